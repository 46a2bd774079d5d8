"""The run's end on a real local Ray cluster (head + 2 GPU workers) with the Kubernetes API stand-in:
the launcher records the outcome on the volume, releases the GPU workers through the API as the
chart's Role allows (and nothing else), logs its GPU-time ledger; a new launcher of an ended run
submits nothing, whatever the Ray head remembers; a new run brings the workers back.

KubeRay is played by a small reconciler: when the RayCluster is suspended (or, under Kueue, its
groups scaled to 0) it removes the GPU worker nodes from the local Ray cluster and reports the
status KubeRay reports; when they are wanted again it adds them back.

The API stand-in, not the test bed: the test bed's pods run no Ray, so their release could not be
seen in a live Ray cluster."""

from __future__ import annotations

import json
import queue
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import kinds, load_chart_program, one, render, values_for
from launcher_harness import ClusterHead, jobs_with_prefix, new_id, stand_in, start_launcher

from generator.helm import runner as helm_mod
from generator.rehearse.cluster import LocalCluster
from generator.rehearse.topology import NodeSpec
from tests.kube_api.stand_in import ApiStandIn
from tests.rehearse.rehearse_harness import cluster_of

pytestmark = pytest.mark.ray

RELEASE, NAMESPACE = "rl", "team"
GPU_NODES = ["gpu-0", "gpu-1"]
NODES = [NodeSpec("head", "head", 2, 0, None)] + [NodeSpec(n, "gpu", 1, 8, None) for n in GPU_NODES]
PATH = f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayclusters/{RELEASE}"

STEPS = """
import sys
for i in range(1, 4):
    print(f"{'=' * 25} Step {i}/3 {'=' * 25}", flush=True)
    print(f"reward {i / 10}", flush=True)
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    yield from cluster_of(NODES, "launcher-release")


@pytest.fixture(scope="module")
def rendered() -> dict[str, Any]:
    """The chart's RayCluster, Role and launch spec for a 2-node release."""
    objs = render(helm_mod.pinned(helm_mod.PINS[0]), [values_for(nodes=2)], release=RELEASE, namespace=NAMESPACE)
    cm = next(c for c in kinds(objs, "ConfigMap") if "launch.json" in c["data"])
    return {"raycluster": one(objs, "RayCluster"), "role": one(objs, "Role"), "spec": json.loads(cm["data"]["launch.json"])}


class KubeRay:
    """Reconciles the stand-in's RayCluster with the local Ray cluster, as the operator would.
    Ray adds nodes only from the main thread: the test calls `reconcile` while the launcher runs."""

    def __init__(self, api: ApiStandIn, cluster: LocalCluster) -> None:
        self.api, self.cluster = api, cluster
        self.todo: queue.Queue[dict[str, Any]] = queue.Queue()
        api.on_patch = lambda _before, after: self.todo.put(after)

    def reconcile(self, wait_s: float) -> None:
        try:
            obj = self.todo.get(timeout=wait_s) if wait_s > 0 else self.todo.get_nowait()
        except queue.Empty:
            return
        spec = obj["spec"]
        wanted = 0 if spec.get("suspend") else sum(max(g["replicas"], g.get("minReplicas", 0)) for g in spec["workerGroupSpecs"])
        alive = gpu_nodes(self.cluster)
        for name in alive[wanted:]:
            self.cluster.remove(name)
        for name in [n for n in GPU_NODES if n not in alive][: max(0, wanted - len(alive))]:
            self.cluster.add(next(s for s in NODES if s.name == name))
        state = "suspended" if spec.get("suspend") else "ready"
        self.api.set_status("rayclusters", RELEASE, {"state": state, "availableWorkerReplicas": wanted, "readyWorkerReplicas": wanted})


@pytest.fixture
def api(tmp_path: Path, cluster: LocalCluster, rendered: dict[str, Any]) -> Iterator[ApiStandIn]:
    """The API stand-in holding the rendered RayCluster, allowing what the rendered Role allows."""
    with ApiStandIn(tmp_path / "api", rules=rendered["role"]["rules"], namespace=NAMESPACE, service_account=f"{RELEASE}-launcher") as a:
        a.put(rendered["raycluster"])
        a.set_status("rayclusters", RELEASE, {"state": "ready", "availableWorkerReplicas": 2, "readyWorkerReplicas": 2})
        try:
            yield a
        finally:
            for name in GPU_NODES:  # the next test starts with both GPU workers
                if name not in gpu_nodes(cluster):
                    cluster.add(next(s for s in NODES if s.name == name))


@pytest.fixture
def kuberay(api: ApiStandIn, cluster: LocalCluster) -> KubeRay:
    return KubeRay(api, cluster)


def launcher_spec(rendered: dict[str, Any], api: ApiStandIn, tmp_path: Path, rid: str, **changes: Any) -> dict[str, Any]:
    """The chart's launch spec with what a laptop needs changed: the stand-ins and short waits."""
    spec = dict(rendered["spec"])
    for key in ("address", "metadata", "wait_for_files", "config_verdict", "max_num_steps", "expected_interfaces", "ray_version"):
        spec.pop(key)  # the harness sets the address and metadata; nothing to wait for or compare here
    spec["gpu_release"] = dict(spec["gpu_release"], service_account_dir=str(api.service_account_dir))
    (tmp_path / "checkpoints").mkdir(exist_ok=True)
    spec |= {
        "submission_id": rid,
        "checkpoint_dir": str(tmp_path / "checkpoints"),
        "outcome_dir": str(tmp_path / "volume-launcher"),
        "outcome_volume_dir": "/data/nemo-rl/run/launcher",
        "timeouts": {"gpus_s": 60, "head_s": 60, "release_s": 60},
    }
    return spec | changes


def run(cluster: LocalCluster, api: ApiStandIn, kuberay: KubeRay, tmp_path: Path, spec: dict[str, Any]) -> tuple[int, str]:
    """The launcher to its end, with KubeRay reconciling meanwhile; (exit status, output)."""
    head = ClusterHead(cluster)
    proc = start_launcher(head, tmp_path, env=head.env() | api.pod_environment(), **spec)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()
    deadline = time.monotonic() + 180
    while proc.poll() is None and time.monotonic() < deadline:
        kuberay.reconcile(0.2)
    if proc.poll() is None:
        proc.kill()
    proc.wait(30)
    reader.join(30)
    kuberay.reconcile(0)
    return proc.returncode, "".join(lines)


def gpu_nodes(cluster: LocalCluster) -> list[str]:
    return [n.spec.name for n in cluster.nodes if n.spec.gpus > 0]


def patches(api: ApiStandIn) -> list[tuple[str, Any]]:
    return [(r.content_type, r.body) for r in api.writes()]


def test_a_run_that_ends_is_recorded_and_its_gpu_workers_released(cluster, api, kuberay, rendered, tmp_path):
    rid = new_id()
    entry = stand_in(tmp_path, "steps", STEPS)
    started = time.monotonic()
    rc, out = run(cluster, api, kuberay, tmp_path, launcher_spec(rendered, api, tmp_path, rid, entrypoint=entry))
    assert rc == 0, out
    assert f"run {rid} succeeded" in out
    # the outcome, on the volume, for whoever starts next
    recorded = json.loads((tmp_path / "volume-launcher" / f"{rid}.json").read_text())
    assert [recorded[k] for k in ("state", "reason", "attempt", "ray_status")] == ["succeeded", "completed", 1, "SUCCEEDED"]
    assert f"outcome recorded in /data/nemo-rl/run/launcher/{rid}.json: succeeded (completed)" in out
    # the release: one merge patch of spec.suspend, as the launcher's account, nothing else written
    assert patches(api) == [("application/merge-patch+json", {"spec": {"suspend": True}})]
    assert all(r.authorized and r.path == PATH for r in api.requests)
    assert api.writes()[0].query == {"fieldManager": ["nemo-rl-gke-launcher"]}
    assert api.get("rayclusters", RELEASE, NAMESPACE)["spec"]["suspend"] is True
    assert gpu_nodes(cluster) == []
    assert time.monotonic() - started < 120
    gone_after = re.search(r"GPU workers gone (\d+)s after the patch", out)
    assert gone_after is not None and int(gone_after.group(1)) <= 60, out  # released within a minute
    # the ledger: the three spans, from what the launcher saw
    ledger = next(line for line in out.splitlines() if "GPU time (2 GPU nodes): " in line)
    assert "GPU workers ready to first training step: 0.0" in ledger
    assert "first step to end of run: 0.0" in ledger and "end of run to GPU workers gone: 0.0" in ledger
    assert "not seen" not in ledger


def test_the_outcome_outlives_the_ray_head(cluster, api, kuberay, rendered, tmp_path):
    from ray.job_submission import JobSubmissionClient

    rid = new_id()
    entry = stand_in(tmp_path, "steps", STEPS)
    spec = launcher_spec(rendered, api, tmp_path, rid, entrypoint=entry)
    assert run(cluster, api, kuberay, tmp_path, spec)[0] == 0
    client = JobSubmissionClient(cluster.dashboard_url)
    client.delete_job(rid)  # what a restarted head pod knows of it: nothing
    api.requests.clear()
    rc, out = run(cluster, api, kuberay, tmp_path, spec)
    assert rc == 0, out
    assert f"run {rid} already ended: succeeded (completed) at {rid}, recorded in /data/nemo-rl/run/launcher/{rid}.json" in out
    assert jobs_with_prefix(client, rid) == {}  # not submitted again
    assert patches(api) == []  # already suspended: not resumed, not patched again
    assert [r.method for r in api.requests] == ["GET"]


def test_a_new_run_brings_the_released_workers_back(cluster, api, kuberay, rendered, tmp_path):
    entry = stand_in(tmp_path, "steps", STEPS)
    first, second = new_id(), new_id()
    assert run(cluster, api, kuberay, tmp_path, launcher_spec(rendered, api, tmp_path, first, entrypoint=entry))[0] == 0
    assert gpu_nodes(cluster) == []
    rc, out = run(cluster, api, kuberay, tmp_path, launcher_spec(rendered, api, tmp_path, second, entrypoint=f"{entry} 0"))
    assert rc == 0, out
    assert "resumed RayCluster team/rl (spec.suspend: false), suspended when an earlier run ended" in out
    assert [body for _, body in patches(api)] == [{"spec": {"suspend": v}} for v in (True, False, True)]
    assert f"run {second} succeeded" in out


def test_under_kueue_the_groups_are_scaled_to_zero(cluster, api, kuberay, rendered, tmp_path):
    rid = new_id()
    entry = stand_in(tmp_path, "fails", STEPS)
    spec = launcher_spec(rendered, api, tmp_path, rid, entrypoint=f"{entry} 1", follow=True, max_restarts=0)
    spec["gpu_release"] = dict(spec["gpu_release"], kueue=True)
    rc, out = run(cluster, api, kuberay, tmp_path, spec)
    assert rc == 3, out
    assert f"{rid} FAILED and no restarts are left (0 allowed)" in out
    assert patches(api) == [
        (
            "application/json-patch+json",
            [
                {"op": "test", "path": "/spec/workerGroupSpecs/0/groupName", "value": "gpu"},
                {"op": "add", "path": "/spec/workerGroupSpecs/0/replicas", "value": 0},
                {"op": "add", "path": "/spec/workerGroupSpecs/0/minReplicas", "value": 0},
            ],
        )
    ]
    assert "spec" in api.get("rayclusters", RELEASE, NAMESPACE) and gpu_nodes(cluster) == []
    assert json.loads((tmp_path / "volume-launcher" / f"{rid}.json").read_text())["reason"] == "out-of-restarts"


def test_gpus_that_never_all_come_are_released(cluster, api, kuberay, rendered, tmp_path):
    spec = launcher_spec(rendered, api, tmp_path, new_id(), entrypoint="true", expected_gpus=24)
    spec["timeouts"] = spec["timeouts"] | {"gpus_s": 2}
    rc, out = run(cluster, api, kuberay, tmp_path, spec)
    assert rc == 3, out
    assert "timed out after 2s waiting for 24 GPUs in the Ray cluster" in out
    assert patches(api) == [("application/merge-patch+json", {"spec": {"suspend": True}})]
    assert not (tmp_path / "volume-launcher").exists()  # no run ended: nothing recorded


def test_a_role_for_another_cluster_is_refused_and_reported(cluster, api, kuberay, rendered, tmp_path):
    api.rules = [dict(rule, resourceNames=["someone-else"]) for rule in rendered["role"]["rules"]]
    rid = new_id()
    entry = stand_in(tmp_path, "steps", STEPS)
    rc, out = run(cluster, api, kuberay, tmp_path, launcher_spec(rendered, api, tmp_path, rid, entrypoint=entry))
    assert rc == 0, out  # the run's outcome decides the exit status
    assert (
        f'could not release the GPU workers (rayclusters.ray.io "{RELEASE}" is forbidden: User "system:serviceaccount:{NAMESPACE}:'
        f'{RELEASE}-launcher" cannot get resource "rayclusters" in API group "ray.io" in the namespace "{NAMESPACE}")'
    ) in out
    assert api.writes() == [] and gpu_nodes(cluster) == GPU_NODES
    assert (tmp_path / "volume-launcher" / f"{rid}.json").exists()


FAILS = """
import sys
print('CUDA out of memory', flush=True)
sys.exit(1)
"""
RUNS_LONG = """
import time
print('training', flush=True)
time.sleep(120)
"""


def stop_when_running(address: str, job_id: str) -> threading.Thread:
    """`ray job stop` once the run is RUNNING, as a user would."""
    from ray.job_submission import JobSubmissionClient

    def stop() -> None:
        client = JobSubmissionClient(address)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if str(client.get_job_status(job_id)) == "RUNNING":
                    client.stop_job(job_id)
                    return
            except RuntimeError:  # not submitted yet
                pass
            time.sleep(0.3)

    thread = threading.Thread(target=stop, daemon=True)
    thread.start()
    return thread


def end_for_good(cluster, api, kuberay, rendered, tmp_path, *, ending: str) -> None:
    rid = new_id()
    (tmp_path / "checkpoints" / "step_10").mkdir(parents=True)  # the attempts write no newer one
    body = FAILS if ending == "stalled" else RUNS_LONG
    spec = launcher_spec(rendered, api, tmp_path, rid, entrypoint=stand_in(tmp_path, ending, body), max_restarts=3)
    stopper = stop_when_running(cluster.dashboard_url, rid) if ending == "stopped" else None
    rc, out = run(cluster, api, kuberay, tmp_path, spec)
    if stopper is not None:
        stopper.join(10)
    assert rc == 3, out
    recorded = json.loads((tmp_path / "volume-launcher" / f"{rid}.json").read_text())
    assert (recorded["state"], recorded["reason"]) == {"stalled": ("failed", "stalled"), "stopped": ("stopped", "stopped-by-user")}[ending]
    assert recorded["step"] == 10
    assert patches(api) == [("application/merge-patch+json", {"spec": {"suspend": True}})]
    assert gpu_nodes(cluster) == []


def test_a_repeating_failure_releases_the_gpu_workers(cluster, api, kuberay, rendered, tmp_path):
    end_for_good(cluster, api, kuberay, rendered, tmp_path, ending="stalled")


def test_a_stopped_run_releases_the_gpu_workers(cluster, api, kuberay, rendered, tmp_path):
    end_for_good(cluster, api, kuberay, rendered, tmp_path, ending="stopped")


def refused(tmp_path: Path, rid: str) -> str:
    """A verdict file as the preparation Job leaves it when NeMo RL refused the run."""
    config_check = load_chart_program("config_check")
    result = config_check.Result("refused", "overrides", error="OverridesError: Failed to parse Hydra overrides: ...", keys=["x"])
    command = {"submission_id": rid, "entrypoint": "cd /opt/nemo-rl && uv run python examples/run_grpo.py --config r.yaml 'x=1'"}
    verdict = config_check.verdict(command, "nvcr.io/nvidia/nemo-rl:v0.7.0", result, 1.0)
    path = tmp_path / "checked" / f"{rid}.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(vars(verdict)))
    return str(path)


def test_a_run_its_release_refused_releases_the_gpu_workers_unsubmitted(cluster, api, kuberay, rendered, tmp_path):
    rid = new_id()
    spec = launcher_spec(rendered, api, tmp_path, rid, entrypoint="true", config_verdict=refused(tmp_path, rid))
    rc, out = run(cluster, api, kuberay, tmp_path, spec)
    assert rc == 3, out
    assert "FAILED, nothing submitted: grpo.overrides[0] (x=1): NeMo RL refuses this run" in out
    assert patches(api) == [("application/merge-patch+json", {"spec": {"suspend": True}})]
    assert not (tmp_path / "volume-launcher").exists()  # no run ended: nothing recorded


def test_a_refused_run_leaves_the_workers_to_the_run_still_going(cluster, api, kuberay, rendered, tmp_path):
    from ray.job_submission import JobSubmissionClient

    rid = new_id()
    client = JobSubmissionClient(cluster.dashboard_url)
    previous = f"{rid}-previous"
    client.submit_job(entrypoint=stand_in(tmp_path, "long", RUNS_LONG), submission_id=previous, metadata={"nemo-rl-gke.release": rid})
    try:
        spec = launcher_spec(rendered, api, tmp_path, rid, entrypoint="true", config_verdict=refused(tmp_path, rid))
        rc, out = run(cluster, api, kuberay, tmp_path, spec)
    finally:
        client.stop_job(previous)
    assert rc == 3, out
    assert f"the GPU workers stay: {previous} of this release is still active" in out
    assert patches(api) == [] and gpu_nodes(cluster) == GPU_NODES
