"""`python -m generator status` against the test bed's real API server: a release installed with the
pinned Helm on a cluster made for it, the RayCluster's state as each KubeRay version reports it,
every Ray pod with the real scheduler's reason for a Pending one, KubeRay's refusals as Warning
events, the Jobs as the Job controller reports them (kwok completes their pods), and the service
proxy's answer for a head whose Service has no endpoints. Only the run's Ray job and progress,
read through the service proxy from a live Ray head, are shown against the API stand-in."""

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
import yaml
from bed_helpers import ray_pods, wait_ready
from clusters import (
    KUEUE,
    Made,
    installed_release,
    made_for,
    rendered_for,
    unique,
    user_kubeconfig,
    with_a_cluster_queue_too_small,
    with_baseline_pod_security,
)
from kubernetes import client as k8s

from generator.cli import main
from generator.cluster.release import Rendered, render
from generator.core.paths import ROOT
from generator.values.build import Options, build
from generator.values.layers import configurations
from testbed.kube import wait_for
from tests.kube_api.stand_in import ApiStandIn
from tests.launcher import ray_head
from tests.launcher.nemo_rl_logs import Figures, driver_script, run_log

TUTORIAL = ROOT / "examples" / "tutorial-h200.yaml"
JSON_KEYS = [
    "release", "namespace", "server", "context", "found", "raycluster", "pods", "jobs", "events", "ray_job", "progress",
    "problems", "unread",
]  # fmt: skip


def values_file(folder: Path, **changes: Any) -> Path:
    """Values generated as `python -m generator --gpu h200` makes them (with `changes` to its options)."""
    path = folder / f"{unique('values')}.yaml"
    path.write_text(yaml.safe_dump(build(Options(gpu="h200", **changes)), sort_keys=False))
    return path


def status(made: Made, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["status", "--kubeconfig", made.cluster.kubeconfig, "-n", made.namespace, *args])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def installed(bed, kuberay, tmp_path) -> Iterator[Made]:
    """Three GPU workers on the test bed's pool of two nodes: one stays Pending."""
    values = values_file(tmp_path, nodes=3)
    cluster = bed.cluster(kuberay)
    rendered = render(configurations([values])[0], "nemo-rl", unique("status"))
    with made_for(cluster, rendered, gpu_nodes=False) as made, installed_release(made, values):
        yield made


def _complete(job: dict[str, Any]) -> bool:
    return any(c["type"] == "Complete" and c["status"] == "True" for c in (job.get("status") or {}).get("conditions") or [])


def _unschedulable(pod: dict[str, Any]) -> str:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable":
            return c.get("message", "")
    return ""


def test_status_shows_each_pod_the_schedulers_reason_and_the_rayclusters_state(installed, capsys):
    made = installed
    kube = made.kube

    def settled() -> tuple[str, dict[str, Any]] | None:
        pods = ray_pods(kube, "nemo-rl", made.namespace)
        ready = [p for p in pods if any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])]
        pending = [m for p in pods if (m := _unschedulable(p))]
        rc = kube.get("ray.io/v1", "RayCluster", "nemo-rl", made.namespace) or {}
        jobs = kube.list("batch/v1", "Job", made.namespace)
        workers_ready = (rc.get("status") or {}).get("readyWorkerReplicas") == 2
        return (pending[0], rc) if len(ready) == 3 and pending and workers_ready and len(jobs) == 2 and all(map(_complete, jobs)) else None

    message, rc = wait_for("the head and two workers ready, the third Unschedulable, the Jobs complete", settled, 180)
    assert "Insufficient nvidia.com/gpu" in message  # the real scheduler's words
    rc_text, out, _ = status(made, capsys, "nemo-rl")
    rc_json, doc_text, _ = status(made, capsys, "nemo-rl", "--format", "json")
    doc = json.loads(doc_text)
    assert rc_text == 0 and rc_json == 0, out

    # KubeRay reports no `state` until every pod has been ready: its condition says why.
    assert not rc["status"].get("state")
    provisioning = "RayCluster Pods are being provisioned for first time"
    assert f"RayCluster nemo-rl: provisioning ({provisioning}), 2/3 GPU workers ready" in out
    lines = out.splitlines()
    head = [line for line in lines if line.startswith("  head ")]
    workers = [line for line in lines if line.startswith("  gpu ")]
    assert len(head) == 1 and " ready on gke-nemo-rl-default-pool-0" in head[0], out
    assert sum(" ready on gke-nemo-rl-gpu-h200-" in w for w in workers) == 2, out
    assert [w for w in workers if "Pending" in w] == [next(w for w in workers if f"Pending  (Unschedulable: {message})" in w)]
    for component in ("prepare", "launcher"):
        assert any(line.startswith(f"Job {component} nemo-rl-") and line.endswith(": complete") for line in lines), out
    # The head's Service has no endpoints here (pod addresses are loopback): the proxy answers 503.
    service = rc["spec"]["headGroupSpec"]["headService"]["metadata"]["name"]
    assert f"note: the Ray head's Jobs API (service {service}, through the API server's proxy): not answering yet (" in out

    assert list(doc) == JSON_KEYS
    assert doc["raycluster"] == {
        "name": "nemo-rl",
        "state": "provisioning",
        "detail": provisioning,
        "suspended": False,
        "workers_desired": 3,
        "workers_ready": 2,
    }
    pending = [p for p in doc["pods"] if p["phase"] == "Pending"]
    assert len(pending) == 1 and pending[0]["group"] == "gpu" and pending[0]["node"] == "" and pending[0]["ready"] is False
    assert pending[0]["reason"] == f"Unschedulable: {message}"
    assert {j["component"]: j["state"] for j in doc["jobs"]} == {"prepare": "complete", "launcher": "complete"}
    assert doc["ray_job"] is None and doc["progress"] is None


def test_a_suspended_raycluster_is_said_and_its_ray_job_not_read(bed, capsys):
    """Suspended as the launcher releases the GPU workers (a merge patch of spec.suspend): KubeRay
    deletes every Ray pod, the head's too."""
    rendered = render(configurations([TUTORIAL])[0], "nemo-rl", unique("status-suspend"))
    with made_for(bed.cluster(), rendered, gpu_nodes=False) as made, installed_release(made, TUTORIAL):
        wait_ready(made.kube, "nemo-rl", made.namespace)
        _, ready_out, _ = status(made, capsys)
        objects = k8s.CustomObjectsApi(made.kube.api)
        objects.patch_namespaced_custom_object("ray.io", "v1", made.namespace, "rayclusters", "nemo-rl", {"spec": {"suspend": True}})

        def suspended() -> bool:
            rc = made.kube.get("ray.io/v1", "RayCluster", "nemo-rl", made.namespace) or {}
            return (rc.get("status") or {}).get("state") == "suspended" and not ray_pods(made.kube, "nemo-rl", made.namespace)

        wait_for("the RayCluster suspended and its pods gone", suspended, 120)
        rc, out, _ = status(made, capsys)
        doc = json.loads(status(made, capsys, "--format", "json")[1])
    assert "RayCluster nemo-rl: ready, 2/2 GPU workers ready" in ready_out, ready_out
    assert rc == 0
    why = "the launcher suspends it once the run has ended; Kueue, until it admits it"
    assert f"RayCluster nemo-rl: suspended, no Ray pod runs ({why})" in out
    assert "note: the run's Ray job is not readable: the RayCluster is suspended, so no Ray head runs" in out
    assert "Jobs API" not in out  # not asked through the proxy
    assert doc["raycluster"]["suspended"] is True and doc["raycluster"]["workers_desired"] == 0 and doc["pods"] == []


def test_a_raycluster_kueue_has_not_admitted_says_kueues_reason(bed, capsys):
    """Kueue suspends the RayCluster until its Workload reserves quota; here the ClusterQueue holds
    one node's GPUs of the two the release needs."""
    sets = ("kueue.enabled=true", "kueue.queueName=gpu-queue")
    rendered = rendered_for(TUTORIAL, unique("status-kueue"), *sets)
    with made_for(bed.cluster(), rendered, gpu_nodes=False) as made:
        with_a_cluster_queue_too_small(made)
        with installed_release(made, TUTORIAL, sets):

            def pending() -> str:
                for w in made.kube.list(KUEUE, "Workload", made.namespace):
                    for c in (w.get("status") or {}).get("conditions") or []:
                        if c["type"] == "QuotaReserved" and c["status"] == "False" and c.get("message"):
                            return c["message"]
                return ""

            reason = wait_for("Kueue's reason for not admitting the Workload", pending, 60)
            rc, out, _ = status(made, capsys)
    assert rc == 0
    assert "insufficient quota for nvidia.com/gpu in flavor h200-spot" in reason
    # Kueue's words (its Workload's QuotaReserved message, which it rewrites as it retries).
    line = next(x for x in out.splitlines() if x.startswith("RayCluster nemo-rl: "))
    assert line.startswith("RayCluster nemo-rl: suspended (Kueue has not admitted it: couldn't assign flavors to pod set "), line
    assert "insufficient quota for nvidia.com/gpu in flavor h200-spot" in line and "), no Ray pod runs (" in line


def test_kuberays_refused_pods_show_as_warning_events(bed, capsys, tmp_path):
    """At baseline the workers' hostPath volumes are refused: KubeRay records FailedToCreateWorkerPod."""
    cluster = bed.cluster()
    with made_for(cluster, render(configurations([TUTORIAL])[0], "nemo-rl", unique("status-psa")), gpu_nodes=False) as made:
        with_baseline_pod_security(made)
        with installed_release(made, TUTORIAL):

            def refused() -> bool:
                fields = "involvedObject.kind=RayCluster,involvedObject.name=nemo-rl,type=Warning"
                found = made.kube.list("v1", "Event", made.namespace, field_selector=fields)
                return any(e.get("reason") == "FailedToCreateWorkerPod" for e in found)

            wait_for("KubeRay's FailedToCreateWorkerPod event", refused, 120)
            rc, out, _ = status(made, capsys)  # RELEASE defaults to nemo-rl
    assert rc == 0
    assert "  warning event FailedToCreateWorkerPod: " in out and 'violates PodSecurity "baseline:latest"' in out, out
    assert "hostPath volumes" in out


def test_a_launcher_pod_that_waits_and_then_fails_is_shown_as_the_job_controller_reports_it(bed, capsys, tmp_path):
    """The launcher's pod selects a node no pool has: Pending with the scheduler's reason. Then its
    container exits with 3 (reported as a kubelet reports it), and the Job controller applies the
    chart's pod failure policy (exit codes 2 and 3 fail the Job)."""
    cluster = bed.cluster()
    values = values_file(tmp_path)
    sets = ["launcher.nodeSelector.cloud\\.google\\.com/gke-nodepool=no-such-pool"]
    rendered = render(configurations([values], sets=[("--set", s) for s in sets])[0], "nemo-rl", unique("status-job"))
    with made_for(cluster, rendered, gpu_nodes=False) as made, installed_release(made, values, sets):
        selector = "app.kubernetes.io/instance=nemo-rl,app.kubernetes.io/component=launcher"

        def waiting() -> dict[str, Any] | None:
            # (until the chart's claim is bound, the scheduler's first reason is the claim)
            pods = made.kube.list("v1", "Pod", made.namespace, label_selector=selector)
            return pods[0] if pods and "didn't match Pod's node affinity/selector" in _unschedulable(pods[0]) else None

        pod = wait_for("the launcher's pod Unschedulable for its node selector", waiting, 120)
        _, pending_out, _ = status(made, capsys)
        name = pod["metadata"]["name"]
        assert f"  launcher  {name}  Pending  (Unschedulable: {_unschedulable(pod)})" in pending_out, pending_out

        _container_exits(made, pod, 3)

        def failed() -> dict[str, Any] | None:
            jobs = made.kube.list("batch/v1", "Job", made.namespace, label_selector=selector)
            conditions = (jobs[0].get("status") or {}).get("conditions") or [] if jobs else []
            return next((c for c in conditions if c["type"] == "Failed" and c["status"] == "True"), None)

        condition = wait_for("the launcher Job Failed", failed, 120)
        rc, out, _ = status(made, capsys)
    assert rc == 0
    assert condition["reason"] == "PodFailurePolicy"
    assert f"Container launcher for pod {made.namespace}/{name} failed with exit code 3" in condition["message"]
    assert f": failed (PodFailurePolicy: {condition['message']})" in out, out
    assert f"  launcher  {name}" not in out  # a failed Job's pod says nothing the Job does not


def _container_exits(made: Made, pod: dict[str, Any], code: int) -> None:
    """What a kubelet reports when the pod's only container exits with `code`."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    container = pod["spec"]["containers"][0]
    terminated = {"exitCode": code, "reason": "Error", "startedAt": now, "finishedAt": now}
    reported = copy.deepcopy(pod["status"])
    reported |= {
        "phase": "Failed",
        "containerStatuses": [
            {
                "name": container["name"],
                "image": container["image"],
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "started": False,
                "state": {"terminated": terminated},
            }
        ],
    }
    core = k8s.CoreV1Api(made.kube.api)
    core.patch_namespaced_pod_status(pod["metadata"]["name"], made.namespace, {"status": reported})


def test_a_release_that_is_not_there_exits_1(bed, capsys):
    with made_for(bed.cluster(), render(configurations([TUTORIAL])[0], "nemo-rl", unique("status-none")), gpu_nodes=False) as made:
        rc, _, err = status(made, capsys, "other")
    assert rc == 1
    assert f"status: no RayCluster or Job of release other in namespace {made.namespace}" in err


def test_a_release_that_could_not_be_read_is_said_so_and_never_none(bed, capsys, tmp_path):
    """A ServiceAccount without any RBAC: the real API server answers 403 to every read."""
    values = values_file(tmp_path)
    rendered = render(configurations([values])[0], "nemo-rl", unique("status-unread"))
    with made_for(bed.cluster(), rendered, gpu_nodes=False) as made, installed_release(made, values):
        config = user_kubeconfig(made, bed, tmp_path, rules=[], cluster_rules=[])
        capsys.readouterr()
        rc = main(["status", "--kubeconfig", str(config), "-n", made.namespace])
        out, err = capsys.readouterr()
        assert rc == 1
        assert f"RayCluster: could not read the RayClusters of namespace {made.namespace}" in out
        assert "none with" not in out and "no RayCluster" not in err
        assert f"note: could not read rayclusters (you may not list rayclusters.ray.io in namespace {made.namespace})" in out
        assert f"status: could not read the rayclusters and jobs of namespace {made.namespace}" in err
        rc = main(["status", "--kubeconfig", str(config), "-n", made.namespace, "--format", "json"])
        doc = json.loads(capsys.readouterr().out)
        assert rc == 1 and doc["found"] is False and doc["unread"][:2] == ["rayclusters", "jobs"]


def test_watch_prints_again_until_interrupted(bed):
    cluster = bed.cluster()
    args = [sys.executable, "-m", "generator", "status", "--kubeconfig", cluster.kubeconfig, "-n", "default", "--watch", "--interval", "1"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen, deadline = 0, time.monotonic() + 60
    assert proc.stdout is not None
    while seen < 2 and time.monotonic() < deadline:
        seen += proc.stdout.readline().startswith("release nemo-rl in namespace default")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert seen == 2
    assert proc.returncode == 130 and err.strip().endswith("interrupted") and "Traceback" not in err


# --- the run's Ray job and progress: a live Ray head behind the API server's service proxy ---------

NAMESPACE = "team"
SERVICE = "nemo-rl-head-svc"


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ray_head.RayHead]:
    h = ray_head.start(tmp_path_factory.mktemp("status-ray-head"))
    yield h
    ray_head.stop(h)
    assert h.pids() == []


def _one(rendered: Rendered, kind: str, component: str = "") -> dict[str, Any]:
    objs = [o for o in rendered.of_kind(kind) if not component or o["metadata"]["labels"].get("app.kubernetes.io/component") == component]
    return copy.deepcopy(objs[0])


@pytest.mark.ray
def test_status_reads_the_runs_ray_job_and_its_last_step_through_the_service_proxy(tmp_path, capsys, head):
    """Against the API stand-in: the test bed's pods run no Ray, and its Services have no endpoints."""
    from ray.job_submission import JobSubmissionClient

    rendered = render(configurations([TUTORIAL])[0], "nemo-rl", NAMESPACE)
    read = [{"apiGroups": ["", "batch", "ray.io"], "resources": ["*"], "verbs": ["get", "list"]}]
    figures = [Figures(0.0312, 95.21, 3365.28), Figures(0.25, 90.0, 3500.0)]
    driver = tmp_path / "grpo.py"
    driver.write_text(driver_script(run_log("grpo_train", 300, figures)[:-1]) + "time.sleep(300)\n")
    with ApiStandIn(tmp_path / "api", namespace=NAMESPACE, rules=read, proxies={(NAMESPACE, f"{SERVICE}:8265"): head.address}) as api:
        # What the release shows after `helm install` and KubeRay: the RayCluster, the run's
        # ConfigMap (launch.json: grpo.max_num_steps) and the launcher Job naming the submission.
        api.put(_one(rendered, "RayCluster") | {"status": {"state": "ready", "readyWorkerReplicas": 2}})
        ports = [{"name": "dashboard", "port": 8265}]
        api.put({"apiVersion": "v1", "kind": "Service", "metadata": {"name": SERVICE}, "spec": {"ports": ports}})
        for cm in rendered.of_kind("ConfigMap"):
            api.put(cm)
        launcher = _one(rendered, "Job", "launcher") | {"status": {"active": 1}}
        api.put(launcher)
        sid = launcher["metadata"]["annotations"]["nemo-rl-gke/submission-id"]
        client = JobSubmissionClient(head.address)
        client.submit_job(entrypoint=f"python {driver}", submission_id=sid)
        try:
            wait_for("the second step logged", lambda: "E2E (Tokens/sec): 3500.00" in client.get_job_logs(sid), 120, 0.5)
            config = api.kubeconfig(tmp_path / "kubeconfig")
            rc = main(["status", "--kubeconfig", str(config)])
            out = capsys.readouterr().out
            rc_json = main(["status", "--kubeconfig", str(config), "--format", "json"])
            doc = json.loads(capsys.readouterr().out)
        finally:
            client.stop_job(sid)
        assert api.writes() == []
    assert rc == 0 and rc_json == 0, out
    assert f"Ray job {sid} (attempt 1): RUNNING, started " in out
    # grpo.max_num_steps 300 from the run's ConfigMap (launch.json); the step from the driver's log.
    assert "Progress: step 2/300: mean reward 0.2500, step time 90.0 s, 3500 tokens/s (219 per GPU), about 7 h 40 min left" in out
    assert "; first reward 0.0312 at step 1" in out
    assert doc["progress"]["step"] == 2 and doc["progress"]["latest"]["reward"] == 0.25
    assert doc["ray_job"]["status"] == "RUNNING" and doc["ray_job"]["submission_id"] == sid and doc["ray_job"]["attempt"] == 1
