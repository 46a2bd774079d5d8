"""`python -m generator status` against the API stand-in: the chart's own objects as the cluster shows
them after `helm install` (KubeRay's pods, the Jobs), the scheduler's reason for a Pending worker,
and the run's Ray job and progress read through the API server's service proxy from a real local
Ray head running a stand-in NeMo RL driver. Never a write."""

from __future__ import annotations

import copy
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clusters import NAMESPACE, READ_EVERYTHING, kubeconfig

from generator.cli import main
from generator.cluster.release import Rendered, render
from generator.paths import ROOT
from generator.values.layers import configurations
from tests.kube_api.stand_in import ApiStandIn
from tests.launcher import ray_head
from tests.launcher.nemo_rl_logs import Figures, driver_script, run_log

RELEASE = "nemo-rl"
TUTORIAL = ROOT / "examples" / "tutorial-h200.yaml"
SERVICE = "nemo-rl-head-svc"
# What the scheduler writes on a worker that no node can take (kube-scheduler's FitError).
UNSCHEDULABLE = (
    "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 Insufficient nvidia.com/gpu. "
    "preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No preemption victims found for incoming pod."
)


@pytest.fixture(scope="module")
def rendered() -> Rendered:
    return render(configurations([TUTORIAL])[0], RELEASE, NAMESPACE)


def one(rendered: Rendered, kind: str, component: str = "") -> dict[str, Any]:
    objs = rendered.of_kind(kind)
    if component:
        objs = [o for o in objs if o["metadata"]["labels"].get("app.kubernetes.io/component") == component]
    return copy.deepcopy(objs[0])


def ray_pod(rendered: Rendered, name: str, group: str, scheduled: bool = True) -> dict[str, Any]:
    """A pod as KubeRay makes it from the RayCluster's template, with its labels."""
    rc = rendered.raycluster
    assert rc is not None
    spec = rc["spec"]["headGroupSpec"] if group == "headgroup" else rc["spec"]["workerGroupSpecs"][0]
    labels = dict(spec["template"]["metadata"]["labels"])
    labels |= {
        "ray.io/cluster": rc["metadata"]["name"],
        "ray.io/group": group,
        "ray.io/node-type": "head" if group == "headgroup" else "worker",
    }
    if scheduled:
        status = {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]}
        node = {"nodeName": f"gke-node-{name[-5:]}"}
    else:
        status = {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": UNSCHEDULABLE}],
        }
        node = {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": spec["template"]["spec"] | node,
        "status": status,
    }


def installed(api: ApiStandIn, rendered: Rendered, launcher_active: bool = True) -> str:
    """The release after `helm install`: the RayCluster (one of two workers Pending), the head's
    Service, the Jobs and the run's ConfigMap. The submission id the launcher uses."""
    rc = one(rendered, "RayCluster")
    rc["status"] = {"state": "ready", "readyWorkerReplicas": 1, "availableWorkerReplicas": 1, "desiredWorkerReplicas": 2}
    api.put(rc)
    api.put(
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": SERVICE}, "spec": {"ports": [{"name": "dashboard", "port": 8265}]}}
    )
    api.put(ray_pod(rendered, "nemo-rl-head-x7k2p", "headgroup"))
    api.put(ray_pod(rendered, "nemo-rl-gpu-worker-a1b2c", "gpu"))
    api.put(ray_pod(rendered, "nemo-rl-gpu-worker-d3e4f", "gpu", scheduled=False))
    for cm in rendered.of_kind("ConfigMap"):
        api.put(cm)
    prepare = one(rendered, "Job", "prepare")
    prepare["metadata"]["creationTimestamp"] = "2026-01-01T10:00:00Z"
    prepare["status"] = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    launcher = one(rendered, "Job", "launcher")
    launcher["metadata"]["creationTimestamp"] = "2026-01-01T10:00:01Z"
    failed = {
        "type": "Failed",
        "status": "True",
        "reason": "PodFailurePolicy",
        "message": "Container launcher for pod team/x failed with exit code 3",
    }
    launcher["status"] = {"active": 1} if launcher_active else {"failed": 1, "conditions": [failed]}
    api.put(prepare)
    api.put(launcher)
    return launcher["metadata"]["annotations"]["nemo-rl-gke/submission-id"]


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ray_head.RayHead]:
    h = ray_head.start(tmp_path_factory.mktemp("status-ray-head"))
    yield h
    ray_head.stop(h)
    assert h.pids() == []


def stand_in(tmp_path: Path, **kw: Any) -> ApiStandIn:
    return ApiStandIn(
        tmp_path / "api", namespace=NAMESPACE, user="alice@example.com", cluster_rules=READ_EVERYTHING, strict_crds=False, **kw
    )


@pytest.mark.ray
def test_status_shows_a_pending_reason_the_runs_state_and_its_last_step(tmp_path, capsys, rendered, head):
    from ray.job_submission import JobSubmissionClient

    figures = [Figures(0.0312, 95.21, 3365.28), Figures(0.25, 90.0, 3500.0)]
    driver = tmp_path / "grpo.py"
    driver.write_text(driver_script(run_log("grpo_train", 300, figures)[:-1]) + "time.sleep(300)\n")
    with stand_in(tmp_path, proxies={(NAMESPACE, f"{SERVICE}:8265"): head.address}) as api:
        sid = installed(api, rendered)
        client = JobSubmissionClient(head.address)
        client.submit_job(entrypoint=f"python {driver}", submission_id=sid)
        try:
            deadline = time.monotonic() + 120
            while "E2E (Tokens/sec): 3500.00" not in client.get_job_logs(sid) and time.monotonic() < deadline:
                time.sleep(0.5)
            rc = main(["status", RELEASE, "--kubeconfig", str(kubeconfig(api, tmp_path))])
            out = capsys.readouterr().out
            rc_json = main(["status", RELEASE, "--kubeconfig", str(kubeconfig(api, tmp_path)), "--format", "json"])
            doc = json.loads(capsys.readouterr().out)
        finally:
            client.stop_job(sid)
        assert api.writes() == []
    assert rc == 0 and rc_json == 0, out
    assert "RayCluster nemo-rl: ready, 1/2 GPU workers ready" in out
    assert "  head  nemo-rl-head-x7k2p  ready on gke-node-x7k2p" in out
    assert f"  gpu   nemo-rl-gpu-worker-d3e4f  Pending  (Unschedulable: {UNSCHEDULABLE})" in out
    assert "Job prepare nemo-rl-prepare-" in out and ": complete" in out
    assert "Job launcher nemo-rl-run-" in out and ": running (1 pod(s) active, 0 failed)" in out
    assert f"Ray job {sid} (attempt 1): RUNNING, started " in out
    # grpo.max_num_steps 300 from the run's ConfigMap (launch.json); the step from the driver's log.
    assert "Progress: step 2/300: mean reward 0.2500, step time 90.0 s, 3500 tokens/s (219 per GPU), about 7 h 40 min left" in out
    assert "; first reward 0.0312 at step 1" in out
    assert doc["progress"]["step"] == 2 and doc["progress"]["latest"]["reward"] == 0.25 and doc["ray_job"]["status"] == "RUNNING"
    assert list(doc) == [
        "release", "namespace", "server", "context", "found", "raycluster", "pods", "jobs", "events", "ray_job", "progress", "problems",
    ]  # fmt: skip
    assert doc["pods"][2] == {
        "group": "gpu",
        "name": "nemo-rl-gpu-worker-d3e4f",
        "phase": "Pending",
        "ready": False,
        "node": "",
        "reason": f"Unschedulable: {UNSCHEDULABLE}",
    }


def test_a_head_not_serving_yet_and_a_failed_launcher_are_said(tmp_path, capsys, rendered):
    with stand_in(tmp_path) as api:  # no endpoints behind the head's Service yet
        installed(api, rendered, launcher_active=False)
        event = {"type": "Warning", "reason": "FailedToCreateWorkerPod", "involvedObject": {"kind": "RayCluster", "name": "nemo-rl"}}
        event["message"] = 'pods "nemo-rl-gpu-worker-x" is forbidden: violates PodSecurity "baseline:latest": hostPath volumes'
        api.put({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "nemo-rl.1"}, **event})
        rc = main(["status", "--kubeconfig", str(kubeconfig(api, tmp_path))])  # RELEASE defaults to nemo-rl
        out = capsys.readouterr().out
        assert api.writes() == []
    assert rc == 0
    assert ": failed (PodFailurePolicy: Container launcher for pod team/x failed with exit code 3)" in out
    no_endpoints = f'not answering yet (no endpoints available for service "http:{SERVICE}:8265")'
    assert f"note: the Ray head's Jobs API (service {SERVICE}, through the API server's proxy): {no_endpoints}" in out
    assert 'warning event FailedToCreateWorkerPod: pods "nemo-rl-gpu-worker-x" is forbidden: violates PodSecurity' in out


def test_a_release_that_is_not_there_exits_1(tmp_path, capsys):
    with stand_in(tmp_path) as api:
        rc = main(["status", "other", "--kubeconfig", str(kubeconfig(api, tmp_path))])
    assert rc == 1
    assert "status: no RayCluster or Job of release other in namespace team" in capsys.readouterr().err


def test_watch_prints_again_until_interrupted(tmp_path, rendered):
    with stand_in(tmp_path) as api:
        installed(api, rendered)
        args = [sys.executable, "-m", "generator", "status", "--kubeconfig", str(kubeconfig(api, tmp_path)), "--watch", "--interval", "1"]
        proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen, deadline = 0, time.monotonic() + 60
        assert proc.stdout is not None
        while seen < 2 and time.monotonic() < deadline:
            seen += proc.stdout.readline().startswith("release nemo-rl in namespace team")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert api.writes() == []
    assert seen == 2
    assert proc.returncode == 130 and err.strip().endswith("interrupted") and "Traceback" not in err
