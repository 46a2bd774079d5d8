"""Every example and every `ci/` scenario installs, upgrades and uninstalls on the real API server,
with both pinned Helm majors (Helm 3's three-way merge and Helm 4's server-side apply), against
the newest KubeRay's CRDs and, with Helm 4, against KubeRay v1.3.2's; uninstall leaves exactly
what the docs say it keeps (the volume and its claim, the cluster-wide network objects).

The scenarios with DRA (A4X's ComputeDomain channel, managed DRANET) get simulated nodes of their
pools first (with the DRA stand-in's ResourceSlices): every worker must be bound by the real
scheduler to a node of its group's pool, with every claim of it allocated from that node's devices.
Not where the values queue the RayCluster in Kueue: Kueue (>= 0.18, KueueDRAIntegration on by
default) holds a workload whose claims name a DeviceClass its configuration does not map
(tests/cluster/test_dra.py, the expected failure)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from bed_helpers import CHART, RAY, Release, namespace, needs_dra, remove_cluster_scoped, unique
from clusters import Made, add_gpu_pools, rendered_for

from generator.core.paths import ROOT
from generator.helm import runner as helm_mod
from testbed.kube import Kube, wait_for

SCENARIOS = sorted((ROOT / "examples").glob("*.yaml")) + sorted((CHART / "ci").glob("*-values.yaml"))
RESOURCE = "resource.k8s.io/v1"
NEWEST, OLDEST = "v1.6.2", "v1.3.2"
# (Helm, KubeRay): both Helm majors on the newest operator's CRDs, Helm 4 on the oldest's.
COMBINATIONS = [(pin.version, NEWEST) for pin in helm_mod.PINS] + [(helm_mod.PINS[0].version, OLDEST)]
KEPT = {
    ("v1", "PersistentVolume"),
    ("v1", "PersistentVolumeClaim"),
    ("networking.gke.io/v1", "Network"),
    ("networking.gke.io/v1", "GKENetworkParamSet"),
}
NAMESPACED = [
    (RAY, "RayCluster"),
    ("batch/v1", "Job"),
    ("v1", "ConfigMap"),
    ("v1", "ServiceAccount"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("policy/v1", "PodDisruptionBudget"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("v1", "PersistentVolumeClaim"),
]


def _owned(kube, release: str, ns: str) -> set[tuple[str, str, str]]:
    """(apiVersion, kind, name) of what the release owns in its namespace and cluster-wide."""
    selector = f"app.kubernetes.io/instance={release}"
    out = set()
    for api, kind in NAMESPACED:
        out |= {(api, kind, o["metadata"]["name"]) for o in kube.list(api, kind, ns, label_selector=selector)}
    for api, kind in (("v1", "PersistentVolume"), ("networking.gke.io/v1", "Network"), ("networking.gke.io/v1", "GKENetworkParamSet")):
        out |= {(api, kind, o["metadata"]["name"]) for o in kube.list(api, kind, label_selector=selector)}
    return out


def _placement(kube: Kube, made: Made, pools: dict[str, list[str]]) -> list[str]:
    """What keeps the workers from being placed as they must be (empty once they are)."""
    ns, rc = made.namespace, made.rendered.raycluster["metadata"]["name"]
    expected = sum(replicas for _, replicas, _ in made.rendered.workers())
    pods = kube.list("v1", "Pod", ns, label_selector=f"ray.io/cluster={rc},ray.io/node-type=worker")
    if len(pods) != expected:
        return [f"{len(pods)} of {expected} workers created"]
    claims = {c["metadata"]["name"]: c for c in kube.list(RESOURCE, "ResourceClaim", ns)}
    problems = []
    for pod in pods:
        name, node = pod["metadata"]["name"], pod["spec"].get("nodeName")
        group = pod["metadata"]["labels"]["ray.io/group"]
        if node not in pools[group]:
            problems.append(f"{name} on {node!r}, not on a node of group {group}'s pool {pools[group]}")
        statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
        if len(statuses) != len(pod["spec"].get("resourceClaims") or []) or not statuses:
            problems.append(f"{name}: claims {statuses} for {pod['spec'].get('resourceClaims')}")
        for st in statuses:
            claim = claims.get(st.get("resourceClaimName") or "") or {}
            devices = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
            if not devices or any(d["pool"] != node for d in devices):
                problems.append(f"{name}: claim {st['name']} not allocated from {node}'s devices: {devices}")
    return problems


def _dra_bed(made: Made) -> dict[str, list[str]]:
    """The scenario's GPU pools as simulated nodes."""
    pools = add_gpu_pools(made)
    assert {name for name, _, _ in made.rendered.workers()} <= set(pools), f"no simulated pool for some worker group: {pools}"
    return pools


def _claim_templates(kube: Kube, ns: str) -> dict[str, Any]:
    return {t["metadata"]["name"]: t for t in kube.list(RESOURCE, "ResourceClaimTemplate", ns)}


@pytest.mark.parametrize(("helm_version", "kuberay_version"), COMBINATIONS, ids=lambda v: v)
@pytest.mark.parametrize("values", SCENARIOS, ids=lambda p: p.stem)
def test_each_scenario_installs_upgrades_and_uninstalls(bed, helm_version: str, kuberay_version: str, values: Path):
    helm = helm_mod.pinned(next(p for p in helm_mod.PINS if p.version == helm_version))
    cluster = bed.cluster(kuberay_version)
    kube = cluster.kube()
    release = Release(helm, cluster, unique("rl"), namespace(kube, unique("install")))
    made = Made(cluster, rendered_for(values, release.namespace, release=release.name)) if needs_dra(values) else None
    try:
        pools = _dra_bed(made) if made else {}
        release.install([values])
        installed = _owned(kube, release.name, release.namespace)
        assert any(kind == "RayCluster" for _, kind, _ in installed), "the RayCluster was not created"
        assert any(kind == "Job" for _, kind, _ in installed), "the launcher Job was not created"
        if made and not made.values["kueue"]["enabled"]:
            wanted = {c["resourceClaimTemplateName"] for _, _, pod in made.rendered.workers() for c in pod.spec["resourceClaims"]}
            wait_for(f"claim templates {sorted(wanted)}", lambda: wanted <= set(_claim_templates(kube, release.namespace)), 60)
            last: list[list[str]] = [[]]

            def placed() -> bool:
                last[0] = _placement(kube, made, pools)
                return not last[0]

            try:
                wait_for("every worker bound to its pool with its claims allocated", placed, 120)
            except TimeoutError:
                raise AssertionError("; ".join(last[0])) from None

        release.upgrade([values])
        assert release.revision() == 2
        assert _owned(kube, release.name, release.namespace) == installed, "an unchanged upgrade changed the set of objects"

        release.uninstall()
        kept = _owned(kube, release.name, release.namespace)
        assert {(a, k) for a, k, _ in kept} <= KEPT, f"uninstall left more than the docs say: {sorted(kept)}"
        expected_kept = {o for o in installed if (o[0], o[1]) in KEPT}
        assert kept == expected_kept, f"uninstall did not keep what the docs say it keeps: {sorted(expected_kept - kept)}"
    finally:
        release.uninstall(check=False)
        remove_cluster_scoped(kube, release.name)
        kube.delete("v1", "Namespace", release.namespace)
        if made:
            made.tear_down()
