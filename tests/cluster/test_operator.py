"""What each KubeRay version makes of the chart's RayCluster on the real API server and scheduler:
a head and GPU workers that carry the interface annotations, NCCL environment, resources,
tolerations and volumes the values ask for; each worker bound by the real scheduler to its own
node of the GPU pool the infra script creates, the head to the CPU pool; the RayCluster `ready`;
a worker asking more than a node's allocatable Pending, with the scheduler's reason in `status`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from bed_helpers import Release, namespace, ray_pods, remove_cluster_scoped, unique, wait_ready

from generator.cluster.release import render
from generator.core.paths import ROOT
from generator.helm import runner as helm_mod
from generator.values.layers import configurations
from testbed.kube import wait_for
from testbed.nodes import CPU_POOL_NAME

TUTORIAL = ROOT / "examples" / "tutorial-h200.yaml"  # 2 H200 nodes, RDMA, Spot
HELM = helm_mod.pinned(helm_mod.PINS[0])


def _rendered_worker(release: str, ns: str) -> dict[str, Any]:
    rendered = render(configurations([TUTORIAL])[0], release, ns)
    return rendered.raycluster["spec"]["workerGroupSpecs"][0]["template"]


@pytest.fixture
def tutorial(bed, kuberay):
    """The tutorial's release on the cluster of one KubeRay version, ready."""
    cluster = bed.cluster(kuberay)
    kube = cluster.kube()
    release = Release(HELM, cluster, unique("rl"), namespace(kube, unique("kuberay")))
    release.install([TUTORIAL])
    try:
        yield kube, release
    finally:
        release.uninstall(check=False)
        remove_cluster_scoped(kube, release.name)
        kube.delete("v1", "Namespace", release.namespace)


def test_workers_carry_what_the_values_ask_and_land_on_their_pool(tutorial):
    kube, release = tutorial
    rc = wait_ready(kube, release.name, release.namespace)
    want = _rendered_worker(release.name, release.namespace)
    pods = ray_pods(kube, release.name, release.namespace)
    workers = [p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "worker"]
    head = [p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "head"]
    assert len(workers) == 2 and len(head) == 1
    assert rc["status"]["state"] == "ready"

    nodes = {n["metadata"]["name"]: n for n in kube.list("v1", "Node")}
    worker_nodes = [w["spec"]["nodeName"] for w in workers]
    assert len(set(worker_nodes)) == 2, "two GPU workers share a node"
    for name in worker_nodes:
        labels = nodes[name]["metadata"]["labels"]
        assert labels["node.kubernetes.io/instance-type"] == "a3-ultragpu-8g"
        assert labels["cloud.google.com/gke-accelerator"] == "nvidia-h200-141gb"
        assert labels["cloud.google.com/gke-spot"] == "true"
    assert nodes[head[0]["spec"]["nodeName"]]["metadata"]["labels"]["cloud.google.com/gke-nodepool"] == CPU_POOL_NAME

    want_container = want["spec"]["containers"][0]
    for w in workers:
        annotations = w["metadata"].get("annotations") or {}
        for key in ("networking.gke.io/interfaces", "networking.gke.io/default-interface"):
            assert annotations.get(key) == want["metadata"]["annotations"][key], key
        c = next(c for c in w["spec"]["containers"] if c["name"] == want_container["name"])
        env = {e["name"]: e.get("value") for e in c.get("env") or []}
        for e in want_container.get("env") or []:
            if e["name"].startswith("NCCL_"):
                assert env.get(e["name"]) == e.get("value"), e["name"]
        assert c["resources"]["requests"]["nvidia.com/gpu"] == "8"
        assert c["resources"]["limits"]["nvidia.com/gpu"] == "8"
        for k in ("cpu", "memory"):
            assert c["resources"]["requests"][k] == want_container["resources"]["requests"][k]
        tolerations = w["spec"].get("tolerations") or []
        for t in want["spec"]["tolerations"]:
            assert any(all(have.get(k) == v for k, v in t.items()) for have in tolerations), f"toleration {t} missing"
        assert {v["name"] for v in want["spec"]["volumes"]} <= {v["name"] for v in w["spec"]["volumes"]}
        mounts = {m["mountPath"] for m in c.get("volumeMounts") or []}
        assert {m["mountPath"] for m in want_container.get("volumeMounts") or []} <= mounts


def test_a_worker_larger_than_its_node_stays_pending_and_status_says_why(bed, kuberay, tmp_path: Path):
    cluster = bed.cluster(kuberay)
    kube = cluster.kube()
    release = Release(HELM, cluster, unique("rl"), namespace(kube, unique("pending")))
    too_big = tmp_path / "too-big.yaml"
    too_big.write_text(json.dumps({"worker": {"resources": {"requests": {"cpu": "400"}, "limits": {"cpu": "400"}}}}))
    release.install([TUTORIAL, too_big])
    try:

        def pending_reason() -> str:
            for p in ray_pods(kube, release.name, release.namespace):
                if p["metadata"]["labels"].get("ray.io/node-type") != "worker":
                    continue
                for c in (p.get("status") or {}).get("conditions") or []:
                    if c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable" and "cpu" in c.get("message", ""):
                        return c["message"]
            return ""

        reason = wait_for("a worker Unschedulable for its CPU request", pending_reason, 120)
        assert "Insufficient cpu" in reason
        env = dict(os.environ, KUBECONFIG=cluster.kubeconfig)
        cmd = [sys.executable, "-m", "generator", "status", release.name, "-n", release.namespace]
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120, check=False)
        assert "Insufficient cpu" in out.stdout, out.stdout + out.stderr
        assert "Pending" in out.stdout
    finally:
        release.uninstall(check=False)
        remove_cluster_scoped(kube, release.name)
        kube.delete("v1", "Namespace", release.namespace)


def test_a_drain_cannot_evict_a_ray_pod_of_a_running_cluster(tutorial):
    """dataSafety.podDisruptionBudget: the disruption controller can compute the budget (a
    RayCluster has no scale subresource, so only an integer minAvailable works) and the
    Eviction API, which `kubectl drain` and GKE's node upgrades use, refuses to take a Ray pod."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    kube, release = tutorial
    wait_ready(kube, release.name, release.namespace)

    def budget() -> dict[str, Any] | None:
        pdb = kube.list("policy/v1", "PodDisruptionBudget", release.namespace)[0]
        status = pdb.get("status") or {}
        return status if status.get("currentHealthy") == status.get("expectedPods") == 3 else None

    status = wait_for("the PodDisruptionBudget counting the head and both workers", budget, 60)
    assert status["disruptionsAllowed"] == 0
    assert not any(c.get("reason") == "SyncFailed" for c in status.get("conditions") or []), status
    worker = next(p for p in ray_pods(kube, release.name, release.namespace) if p["metadata"]["labels"]["ray.io/node-type"] == "worker")
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=worker["metadata"]["name"], namespace=release.namespace))
    with pytest.raises(ApiException) as refused:
        client.CoreV1Api(kube.api).create_namespaced_pod_eviction(worker["metadata"]["name"], release.namespace, eviction)
    assert refused.value.status == 429, refused.value.body
