"""RDMA mode: Google's NCCL RDMA installer is ready on the GPU nodes, and the GKE Network and
GKENetworkParamSet objects the values name are free to create or, with network.createObjects
false (`python -m generator --existing-networks`), present with the values' VPCs and subnets.

The installer is the DaemonSet nccl-rdma-installer (label k8s-app=nccl-rdma-installer) of Google's
manifests, gpudirect-rdma/nccl-rdma-installer.yaml (kube-system, Standard) and
nccl-rdma-installer-autopilot.yaml (rdma-system, Autopilot), in
GoogleCloudPlatform/container-engine-accelerators; infra.sh applies the one for its mode
(generator/infra/steps.py, INSTALLERS, at the pinned RDMA_INSTALLER_COMMIT). It writes the gIB NCCL plugin into /home/kubernetes/bin/gib
on each GPU node, which the workers mount.

Helm creates an object only when none of that name exists or the existing one carries this
release's ownership metadata (helm pkg/action/validate.go, checkOwnership); the network objects
are cluster-scoped, so another release's, in any namespace, stops the install.
"""

from __future__ import annotations

from typing import Any

from generator.cluster.checks.context import Context, listed
from generator.cluster.kube import Forbidden
from generator.cluster.report import Result, failed, passed, skipped
from generator.infra.steps import INSTALLERS, installer_manifest_url

INSTALLER = "nccl-rdma-installer"
NETWORKS = "/apis/networking.gke.io/v1"


def _rdma(ctx: Context) -> bool:
    return ctx.value("network.mode") == "rdma"


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _pod_state(pod: dict[str, Any]) -> str:
    status = pod.get("status") or {}
    for c in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        waiting = (c.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            return f"{c.get('name')}: {waiting['reason']}"
    return str(status.get("phase") or "unknown")


def installer(ctx: Context) -> Result:
    name = "rdma-installer"
    if not _rdma(ctx):
        return passed(name, f"not needed: network.mode is {ctx.value('network.mode')}")
    mode = str(ctx.value("gke.mode", "standard"))
    url, ns = installer_manifest_url(mode), INSTALLERS[mode][1]
    if ctx.kube.get(f"/apis/apps/v1/namespaces/{ns}/daemonsets/{INSTALLER}") is None:
        return failed(name, f"DaemonSet {ns}/{INSTALLER} not found: the workers' gIB folder stays empty", f"kubectl apply -f {url}")
    try:
        nodes = ctx.gpu_nodes()
    except Forbidden as e:
        return skipped(name, f"DaemonSet {ns}/{INSTALLER} exists; its readiness on the GPU nodes", e.permission)
    if not nodes:
        return passed(name, f"DaemonSet {ns}/{INSTALLER} exists; no GPU node is up yet (it runs on each as it joins)")
    pods = ctx.kube.items(f"/api/v1/namespaces/{ns}/pods", labels=f"k8s-app={INSTALLER}")
    on = {(p.get("spec") or {}).get("nodeName"): p for p in pods}
    not_ready = []
    for node in nodes:
        pod = on.get(node["metadata"]["name"])
        if pod is None or not _ready(pod):
            state = "no installer pod" if pod is None else f"pod {pod['metadata']['name']} {_pod_state(pod)}"
            not_ready.append(f"{node['metadata']['name']} ({state})")
    if not_ready:
        return failed(
            name,
            f"DaemonSet {ns}/{INSTALLER} is not ready on {len(not_ready)} of {len(nodes)} GPU node(s): {listed(not_ready, 3)}",
            f"kubectl -n {ns} describe daemonset {INSTALLER}; workers started before it is ready find no gIB plugin",
        )
    return passed(name, f"DaemonSet {ns}/{INSTALLER} is ready on all {len(nodes)} GPU node(s)")


def _planned(ctx: Context) -> list[dict[str, Any]]:
    """The gVNIC network, then the RDMA ones: name, vpc, subnet and the device mode the chart renders."""
    gvnic = dict(ctx.value("network.gvnic", {}), mode="NetDevice")
    return [gvnic] + [dict(n, mode="RDMA") for n in ctx.value("network.rdma", [])]


def _present_as_planned(ctx: Context, n: dict[str, Any]) -> str:
    """'' when the Network and GKENetworkParamSet named n['name'] match the values, else what differs."""
    params = ctx.kube.get(f"{NETWORKS}/gkenetworkparamsets/{n['name']}")
    network = ctx.kube.get(f"{NETWORKS}/networks/{n['name']}")
    if params is None or network is None:
        return f"{n['name']}: {'GKENetworkParamSet' if params is None else 'Network'} missing"
    spec, want = params.get("spec") or {}, {"vpc": n.get("vpc"), "vpcSubnet": n.get("subnet"), "deviceMode": n["mode"]}
    wrong = [f"{k} {spec.get(k)!r} (values: {v!r})" for k, v in want.items() if spec.get(k) != v]
    ref = ((network.get("spec") or {}).get("parametersRef") or {}).get("name")
    if ref != n["name"]:
        wrong.append(f"Network parametersRef {ref!r}")
    return f"{n['name']}: {', '.join(wrong)}" if wrong else ""


def _foreign(ctx: Context, n: dict[str, Any]) -> list[str]:
    out = []
    for kind, resource in (("GKENetworkParamSet", "gkenetworkparamsets"), ("Network", "networks")):
        if who := ctx.taken(f"{NETWORKS}/{resource}/{n['name']}"):
            out.append(f"{kind} {n['name']} ({who})")
    return out


def networks(ctx: Context) -> Result:
    name = "gke-networks"
    if not _rdma(ctx):
        return passed(name, f"not needed: network.mode is {ctx.value('network.mode')}")
    absent = [c for c in ("networks.networking.gke.io", "gkenetworkparamsets.networking.gke.io") if ctx.crd(c) is None]
    if absent:
        return failed(
            name,
            f"the cluster has no GKE multi-networking (no CustomResourceDefinition {' or '.join(absent)})",
            "create the cluster with --enable-multi-networking and Dataplane V2 (infra.sh does)",
        )
    planned = _planned(ctx)
    if not ctx.value("network.createObjects", True):
        wrong = [w for n in planned if (w := _present_as_planned(ctx, n))]
        if wrong:
            return failed(
                name,
                f"network.createObjects is false but the existing objects differ from the values: {listed(wrong, 3)}",
                "create them with another release (network.createObjects true), or set network.* to the objects' VPCs and subnets",
            )
        return passed(name, f"all {len(planned)} existing Network/GKENetworkParamSet pairs name the values' VPCs and subnets")
    foreign = [f for n in planned for f in _foreign(ctx, n)]
    if foreign:
        return failed(
            name,
            f"{listed(foreign, 4)} already exist(s); helm install would refuse to take them over (invalid ownership metadata)",
            "use them: regenerate with `python -m generator ... --existing-networks` (network.createObjects false); "
            "or delete them if no release uses them",
        )
    return passed(name, f"the {len(planned)} Network/GKENetworkParamSet pairs are absent or this release's own: helm install creates them")
