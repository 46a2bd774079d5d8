"""With accelerator.computeDomain (A4X): NVIDIA's DRA driver serves the ComputeDomain the chart
renders, and its kubelet plugin publishes the ComputeDomain devices of every GPU node, so the
workers' channel claims can be allocated before any GPU is paid for.

What the infra script installs (generator/infra/dra.py): the chart dra-driver-nvidia-gpu 0.4.1 as
release dra-driver-nvidia-gpu in namespace nvidia-dra-driver-gpu, whose kubelet plugin is the
DaemonSet dra-driver-nvidia-gpu-kubelet-plugin; the chart's CRD computedomains.resource.nvidia.com
(vendored at vendor/dra-driver-nvidia-gpu/v0.4.1). The plugin publishes ResourceSlices
(resource.k8s.io/v1, field spec.driver compute-domain.nvidia.com, spec.nodeName the node) for the
IMEX channels a claim of the ComputeDomain's ResourceClaimTemplate takes.
"""

from __future__ import annotations

from typing import Any

from generator.cluster.checks.context import Context, listed
from generator.cluster.kube import Forbidden
from generator.cluster.report import Result, failed, passed, skipped, warned
from generator.infra import dra

NAME = "dra-driver"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
INSTALL = (
    f"install it as the infra script does: helm install {dra.RELEASE} {dra.CHART} --version {dra.CHART_VERSION}"
    f" --namespace {dra.NAMESPACE} with GKE's values (python -m generator infra --gpu gb200 writes the step)"
)


def _rendered_version(ctx: Context) -> str:
    cd = next(iter(ctx.rendered.of_kind("ComputeDomain")), None)
    return str(cd["apiVersion"]).rpartition("/")[2] if cd else ""


def _served(crd: dict[str, Any]) -> list[str]:
    return [str(v["name"]) for v in (crd.get("spec") or {}).get("versions") or [] if v.get("served", True)]


def _slices_by_node(ctx: Context) -> set[str]:
    found = ctx.kube.items(SLICES, fields=f"spec.driver={dra.COMPUTE_DOMAIN_DRIVER}")
    return {str((s.get("spec") or {}).get("nodeName", "")) for s in found}


def check(ctx: Context) -> Result:
    if not ctx.value("accelerator.computeDomain", False):
        return passed(NAME, "not needed: accelerator.computeDomain is false")
    crd = ctx.crd(dra.CRD)
    if crd is None:
        return failed(NAME, f"no CustomResourceDefinition {dra.CRD}: NVIDIA's DRA driver is not installed", INSTALL)
    served, want = _served(crd), _rendered_version(ctx)
    if want and want not in served:
        return failed(
            NAME,
            f"{dra.CRD} serves {', '.join(served) or 'no version'}, the chart renders resource.nvidia.com/{want}",
            f"upgrade the DRA driver: {INSTALL}",
        )
    path = f"/apis/apps/v1/namespaces/{dra.NAMESPACE}/daemonsets/{dra.KUBELET_PLUGIN}"
    ds = ctx.kube.get(path)
    if ds is None:
        return failed(NAME, f"DaemonSet {dra.NAMESPACE}/{dra.KUBELET_PLUGIN} (the driver's kubelet plugin) not found", INSTALL)
    status = ds.get("status") or {}
    desired, ready = int(status.get("desiredNumberScheduled") or 0), int(status.get("numberReady") or 0)
    plugin = f"DaemonSet {dra.NAMESPACE}/{dra.KUBELET_PLUGIN}"
    if ready < desired:
        return failed(
            NAME,
            f"{plugin} is ready on {ready} of {desired} node(s): the claims of workers on the others cannot be prepared",
            f"kubectl -n {dra.NAMESPACE} describe daemonset {dra.KUBELET_PLUGIN}",
        )
    try:
        nodes = sorted(n["metadata"]["name"] for n in ctx.gpu_nodes())
    except Forbidden as e:
        return skipped(NAME, f"{plugin} is ready; the GPU nodes it should serve", e.permission)
    if not nodes:
        return passed(NAME, f"{dra.CRD} serves {', '.join(served)}; {plugin} exists; no GPU node yet (its devices appear with the nodes)")
    missing = [n for n in nodes if n not in _slices_by_node(ctx)]
    if missing:
        return failed(
            NAME,
            f"no ResourceSlice of {dra.COMPUTE_DOMAIN_DRIVER} on {len(missing)} of {len(nodes)} GPU node(s): {listed(missing)}:"
            " the workers' ComputeDomain claims cannot be allocated there",
            f"kubectl -n {dra.NAMESPACE} get pods -o wide (the kubelet plugin's pod on those nodes), then its logs",
        )
    if not ready:
        return warned(NAME, f"{plugin} reports no ready pod, yet every GPU node has a ResourceSlice")
    return passed(NAME, f"{dra.CRD} serves {', '.join(served)}; {plugin} publishes ComputeDomain devices on all {len(nodes)} GPU node(s)")
