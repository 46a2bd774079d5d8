"""Every example and every `ci/` scenario installs, upgrades and uninstalls on the real API server,
with both pinned Helm majors (Helm 3's three-way merge and Helm 4's server-side apply), against
the newest KubeRay's CRDs and, with Helm 4, against KubeRay v1.3.2's; uninstall leaves exactly
what the docs say it keeps (the volume and its claim, the cluster-wide network objects)."""

from __future__ import annotations

from pathlib import Path

import pytest
from bed_helpers import CHART, RAY, Release, namespace, remove_cluster_scoped, scenarios, unique

from generator.core.paths import ROOT
from generator.helm import runner as helm_mod

SCENARIOS = scenarios(sorted((ROOT / "examples").glob("*.yaml")) + sorted((CHART / "ci").glob("*-values.yaml")))
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


@pytest.mark.parametrize(("helm_version", "kuberay_version"), COMBINATIONS, ids=lambda v: v)
@pytest.mark.parametrize("values", SCENARIOS, ids=lambda p: p.stem)
def test_each_scenario_installs_upgrades_and_uninstalls(bed, helm_version: str, kuberay_version: str, values: Path):
    helm = helm_mod.pinned(next(p for p in helm_mod.PINS if p.version == helm_version))
    cluster = bed.cluster(kuberay_version)
    kube = cluster.kube()
    release = Release(helm, cluster, unique("rl"), namespace(kube, unique("install")))
    try:
        release.install([values])
        installed = _owned(kube, release.name, release.namespace)
        assert any(kind == "RayCluster" for _, kind, _ in installed), "the RayCluster was not created"
        assert any(kind == "Job" for _, kind, _ in installed), "the launcher Job was not created"

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
