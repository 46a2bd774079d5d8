"""DRA on the test bed (issue 28): the DRA driver's ComputeDomain CRD and the chart's claim
templates go through the real API server's validation, and the real scheduler allocates the
claims from the ResourceSlices the DRA stand-in publishes for simulated A4X nodes, so a claim no
node can satisfy shows up as an Unschedulable pod while the pool's nodes stand idle, before any
GPU is paid for."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from bed_helpers import CHART, Release, namespace, remove_cluster_scoped, unique
from clusters import KUEUE, Made, add_gpu_pools, add_kueue, rendered_for
from kubernetes.client.exceptions import ApiException

from generator.gke.kueue_dra import MAPPINGS
from generator.gke.profiles import profile
from generator.helm import runner as helm_mod
from testbed import dra_stand_in, nodes
from testbed.bed import Cluster, add_nodes, default_infra
from testbed.kube import Kube, wait_for

RESOURCE = dra_stand_in.RESOURCE
CD_API = dra_stand_in.COMPUTE_DOMAIN_API
GB200 = profile("gb200")


@pytest.fixture
def cluster(bed) -> Cluster:
    return bed.cluster()


@pytest.fixture
def a4x_pool(cluster: Cluster) -> Iterator[list[str]]:
    """Two simulated A4X nodes of a managed-DRANET pool, deleted afterwards (their slices with them)."""
    kube = cluster.kube()
    infra = dataclasses.replace(default_infra("gb200", 2), cluster=unique("dra"))
    pool = nodes.gpu_pool(infra, infra.worker_groups[0], dranet=True)
    names = [n["metadata"]["name"] for n in pool]
    try:
        add_nodes(kube, pool)
        for name in names:
            wait_for(f"ResourceSlices of {name}", lambda n=name: len(_slices(kube, n)) == 2, 60)
        yield names
    finally:
        for name in names:
            kube.delete("v1", "Node", name)


def _slices(kube: Kube, node: str) -> list[dict[str, Any]]:
    return [s for s in kube.list(RESOURCE, "ResourceSlice") if s["spec"].get("nodeName") == node]


def _pod(name: str, ns: str, node: str, claims: dict[str, str]) -> dict[str, Any]:
    """A pod pinned to one node, tolerating every taint, claiming from the templates `claims` names."""
    container = {"name": "main", "image": "busybox", "resources": {"claims": [{"name": c} for c in claims]}}
    spec = {
        "nodeSelector": {"kubernetes.io/hostname": node},
        "tolerations": [{"operator": "Exists"}],
        "containers": [container],
        "resourceClaims": [{"name": c, "resourceClaimTemplateName": t} for c, t in claims.items()],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": spec}


def _scheduled(kube: Kube, name: str, ns: str) -> dict[str, Any]:
    """The pod's PodScheduled condition once the scheduler has set it."""
    pod = kube.get("v1", "Pod", name, ns) or {}
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"), {})


def _unschedulable(kube: Kube, name: str, ns: str) -> dict[str, Any]:
    cond = wait_for(f"pod {ns}/{name} scheduled or refused", lambda: _scheduled(kube, name, ns), 60)
    assert cond["status"] == "False", f"{name} was scheduled: {cond}"
    assert cond["reason"] == "Unschedulable", cond
    assert (kube.get("v1", "Pod", name, ns) or {})["spec"].get("nodeName") is None
    return cond


def _rendered(values: str, ns: str, release: str) -> list[dict[str, Any]]:
    r = rendered_for(CHART / "ci" / values, ns, release=release)
    return [o for o in r.objects if o.get("kind") in ("ComputeDomain", "ResourceClaimTemplate")]


def test_the_compute_domain_and_claim_templates_are_accepted_and_validated(cluster: Cluster):
    kube = cluster.kube()
    ns = namespace(kube, unique("dra"), labels={})
    try:
        objs = _rendered("gb200-dranet-values.yaml", ns, "rl")
        assert sorted(o["kind"] for o in objs) == ["ComputeDomain", "ResourceClaimTemplate"]
        for obj in objs:
            kube.apply(obj | {"metadata": obj["metadata"] | {"namespace": ns}})
        domain = next(o for o in objs if o["kind"] == "ComputeDomain")
        channel = domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
        # The controller's part: the channel template, of the driver's default channel class.
        made = wait_for(f"template {channel}", lambda: kube.get(RESOURCE, "ResourceClaimTemplate", channel, ns), 60)
        request = made["spec"]["spec"]["devices"]["requests"][0]
        assert request["exactly"]["deviceClassName"] == dra_stand_in.CHANNEL_CLASS

        # The CRD's own rules hold: spec.channel is required, and the spec is immutable (CEL).
        with pytest.raises(ApiException) as refused:
            kube.apply({"apiVersion": CD_API, "kind": "ComputeDomain", "metadata": {"name": "no-channel", "namespace": ns}, "spec": {}})
        assert refused.value.status == 422 and "channel" in str(refused.value.body)
        changed = domain | {"metadata": domain["metadata"] | {"namespace": ns}}
        changed["spec"] = {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "another-channel"}}}
        with pytest.raises(ApiException) as immutable:
            kube.apply(changed)
        assert immutable.value.status == 422 and "immutable" in str(immutable.value.body)

        # The real API server validates DRA requests too: an allocation mode that does not exist is refused.
        rdma = next(o for o in objs if o["kind"] == "ResourceClaimTemplate")
        bad = rdma | {"metadata": {"name": "bad-rdma", "namespace": ns}}
        bad["spec"] = {
            "spec": {
                "devices": {"requests": [{"name": "rdma", "exactly": {"deviceClassName": "mrdma.google.com", "allocationMode": "Most"}}]}
            }
        }
        with pytest.raises(ApiException) as invalid:
            kube.apply(bad)
        assert invalid.value.status == 422 and "allocationMode" in str(invalid.value.body)

        # Deleting the domain takes its channel template with it (owned by the domain).
        kube.delete(CD_API, "ComputeDomain", domain["metadata"]["name"], ns)
        wait_for(f"template {channel} gone with its domain", lambda: kube.get(RESOURCE, "ResourceClaimTemplate", channel, ns) is None, 60)
    finally:
        kube.delete("v1", "Namespace", ns)


def test_more_nics_than_a_node_has_is_unschedulable_before_a_gpu_is_paid_for(cluster: Cluster, a4x_pool: list[str]):
    kube = cluster.kube()
    ns = namespace(kube, unique("dra"), labels={})
    try:
        nics = GB200.rdma_nics
        for name, count in (("fits", nics), ("too-many", nics + 1)):
            request = {
                "name": "rdma",
                "exactly": {"deviceClassName": dra_stand_in.RDMA_CLASS, "allocationMode": "ExactCount", "count": count},
            }
            meta = {"name": f"rdma-{name}", "namespace": ns}
            kube.apply(
                {
                    "apiVersion": RESOURCE,
                    "kind": "ResourceClaimTemplate",
                    "metadata": meta,
                    "spec": {"spec": {"devices": {"requests": [request]}}},
                }
            )
        node = a4x_pool[0]
        kube.apply(_pod("fits", ns, node, {"rdma": "rdma-fits"}))
        kube.apply(_pod("too-many", ns, node, {"rdma": "rdma-too-many"}))

        fits = wait_for("pod fits scheduled", lambda: _scheduled(kube, "fits", ns).get("status") == "True", 60)
        assert fits
        assert (kube.get("v1", "Pod", "fits", ns) or {})["spec"]["nodeName"] == node
        cond = _unschedulable(kube, "too-many", ns)
        assert "claim" in cond["message"], cond["message"]
        claims = [c for c in kube.list(RESOURCE, "ResourceClaim", ns) if c["metadata"]["name"].startswith("too-many")]
        assert claims and not (claims[0].get("status") or {}).get("allocation"), "the unsatisfiable claim was allocated"
    finally:
        kube.delete("v1", "Namespace", ns)


def test_one_compute_domain_channel_per_node(cluster: Cluster, a4x_pool: list[str]):
    """The driver (v0.4.1) advertises channel 0 only: a second claim of the channel on the same
    node cannot be allocated, while another node of the pool takes it."""
    kube = cluster.kube()
    ns = namespace(kube, unique("dra"), labels={})
    try:
        domain = next(o for o in _rendered("gb200-values.yaml", ns, "rl") if o["kind"] == "ComputeDomain")
        kube.apply(domain | {"metadata": domain["metadata"] | {"namespace": ns}})
        channel = domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
        wait_for(f"template {channel}", lambda: kube.get(RESOURCE, "ResourceClaimTemplate", channel, ns), 60)
        first, second = a4x_pool
        kube.apply(_pod("worker-a", ns, first, {"channel": channel}))
        wait_for("worker-a scheduled", lambda: _scheduled(kube, "worker-a", ns).get("status") == "True", 60)
        kube.apply(_pod("worker-b", ns, first, {"channel": channel}))
        kube.apply(_pod("worker-c", ns, second, {"channel": channel}))
        wait_for("worker-c scheduled", lambda: _scheduled(kube, "worker-c", ns).get("status") == "True", 60)
        _unschedulable(kube, "worker-b", ns)
    finally:
        kube.delete("v1", "Namespace", ns)


def test_kueue_admits_a_queued_release_with_dra_claims(cluster: Cluster):
    """Kueue >= 0.18 holds a Workload whose claims name a DeviceClass its configuration does not map
    (sigs.k8s.io/kueue v0.19.2 pkg/dra/claims.go): the bed's Kueue maps them as the infra script
    does (generator/gke/kueue_dra.py), the ClusterQueue the infra script makes gives quota for them,
    and the admitted Workload is charged each worker's channel and NICs."""
    values = CHART / "ci" / "gb200-dranet-values.yaml"
    kube = cluster.kube()
    ns = namespace(kube, unique("dra-kueue"))
    queued = ["kueue.enabled=true", "kueue.queueName=gpu-queue"]
    made = Made(cluster, rendered_for(values, ns, *queued, release="rl"))
    release = Release(helm_mod.pinned(helm_mod.PINS[0]), cluster, "rl", ns)
    try:
        add_gpu_pools(made)
        add_kueue(made)
        release.install([values], queued)

        def decided() -> dict[str, Any]:
            workloads = kube.list(KUEUE, "Workload", ns)
            conds = {c["type"]: c for c in (workloads[0].get("status") or {}).get("conditions") or []} if workloads else {}
            return conds.get("QuotaReserved", {})

        def reserved() -> dict[str, Any]:
            # Until the ComputeDomain's channel template exists (the driver's controller makes it
            # after the release's objects), Kueue reports "Internal error ... not found" and retries
            # with back-off (workload_controller.go, v0.19.2, returns the error to be requeued).
            cond = decided()
            if cond.get("status") != "True":
                raise AssertionError(f"Kueue has not admitted the release: {cond.get('reason')}: {cond.get('message')}")
            return cond

        wait_for("Kueue's quota reservation for the release", reserved, 180)
        workload = kube.list(KUEUE, "Workload", ns)[0]
        sets = {a["name"]: a for a in workload["status"]["admission"]["podSetAssignments"]}
        workers = made.values["workerGroups"][0]["replicas"]
        charged = {k: v for a in sets.values() for k, v in (a.get("resourceUsage") or {}).items() if k in {m.resource for m in MAPPINGS}}
        assert charged == {
            "nvidia.com/compute-domain-channel": str(workers),
            "google.com/mrdma": str(workers * GB200.rdma_nics),
        }, sets
    finally:
        release.uninstall(check=False)
        remove_cluster_scoped(kube, release.name)
        made.tear_down()
        kube.delete("v1", "Namespace", ns)
