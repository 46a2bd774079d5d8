"""The launcher's promises at the run's end, against the real components: the chart installed with
the pinned Helm binaries, its real ServiceAccount, Role and RoleBinding under the API server's
RBAC, each KubeRay version's operator and Kueue v0.19.2; the launcher a local process with its
ServiceAccount's token (TokenRequest), its Ray head a local Ray cluster whose GPU nodes follow
the RayCluster's worker pods in the test bed (launcher_bed.RayBridge).

- The release: the launcher records the outcome, suspends the RayCluster, KubeRay deletes the
  head and worker pods and reports `suspended`, and the launcher's wait sees it; a new run
  resumes it and KubeRay recreates the pods; the outcome outlives the Ray head; a Role for
  another RayCluster is refused (403) and reported.
- `helm upgrade` after the release, with Helm 3 and Helm 4, leaves it released; under Kueue Helm
  4's server-side apply conflicts with Kueue on `.spec.workerGroupSpecs` (an atomic list in
  KubeRay's CRD that Kueue's admission rewrites), `--server-side=false` leaves the release as it
  is and `--force-conflicts` brings the GPU workers back.
- Kueue: the RayCluster waits suspended in its LocalQueue while the quota is taken, the release
  (worker groups at 0) frees its GPU quota and the waiting cluster is admitted; `spec.suspend`
  on an admitted cluster is undone by Kueue; a new run brings the workers back at once.

The launcher's policy (a repeating failure, a stopped run, a refused run, GPUs that never come)
runs against the newest KubeRay only: the operator's part there is the same release."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from bed_helpers import namespace, unique, wait_ready
from conftest import load_chart_program
from launcher_bed import (
    HEAD,
    LAUNCHER_FIELD_MANAGER,
    Installed,
    RayBridge,
    admitted,
    apply_queues,
    condition,
    gpu_usage,
    install,
    local_spec,
    one_admitted,
    pod_set_counts,
    remove_namespace,
    run_launcher,
    values_file,
    workloads,
)

from generator.helm import runner as helm_mod
from generator.rehearse.cluster import LocalCluster
from testbed.kube import wait_for
from tests.launcher.launcher_harness import EPOCHS_END, ClusterHead, jobs_with_prefix, new_id, stand_in
from tests.launcher.nemo_rl_logs import Figures, run_log
from tests.rehearse.rehearse_harness import cluster_of

pytestmark = pytest.mark.ray

HELM4 = helm_mod.pinned(helm_mod.PINS[0])
HELMS = {pin.version: helm_mod.pinned(pin) for pin in helm_mod.PINS}
NEWEST = "v1.6.2"

STEPS = """
import sys
for i in range(1, 4):
    print(f"{'=' * 25} Step {i}/3 {'=' * 25}", flush=True)
    print(f"reward {i / 10}", flush=True)
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
"""
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


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[LocalCluster]:
    """The Ray side: a local head (2 CPUs); the bridge adds a GPU node per running worker pod."""
    yield from cluster_of([HEAD], "launcher-bed")


@dataclass
class Setup:
    """One release on the test bed, a folder, and (for a test that runs the launcher) the bridge
    to the local Ray cluster."""

    installed: Installed
    folder: Path
    ray_bridge: RayBridge | None = None

    @property
    def kube(self):
        return self.installed.kube

    @property
    def bridge(self) -> RayBridge:
        assert self.ray_bridge is not None, "this release was made without the Ray side (ray=False)"
        return self.ray_bridge

    def spec(self, run_id: str, **changes: Any) -> tuple[dict[str, Any], dict[str, str]]:
        return local_spec(self.installed, ClusterHead(self.bridge.ray), self.folder, run_id, **changes)

    def run(self, spec: dict[str, Any], env: dict[str, str], **kw: Any) -> tuple[int, str]:
        return run_launcher(self.bridge, self.folder, spec, env, **kw)

    def ready(self, workers: int = 2) -> dict[str, Any]:
        """The RayCluster ready with its workers Running, each played by a Ray node when there
        is a Ray side."""
        rc = wait_ready(self.kube, self.installed.name, self.installed.namespace)
        if self.ray_bridge is not None:
            self.ray_bridge.wait_for_workers(workers)
            return rc

        def running() -> bool:
            return len([p for p in self.installed.pods("worker") if p["status"].get("phase") == "Running"]) == workers

        wait_for(f"{workers} worker pods Running", running, 120)
        return rc

    def outcome(self, run_id: str) -> dict[str, Any]:
        return json.loads((self.folder / "volume-launcher" / f"{run_id}.json").read_text())

    def workers_module(self) -> Any:
        return load_chart_program("launcher_workers")

    def release_in_process(self) -> None:
        """The launcher's own release (launcher_workers.release), with its token, and its wait."""
        lw = self.workers_module()
        spec = self.installed.launch_spec()["gpu_release"]
        sa = self.installed.service_account(self.folder / "serviceaccount")
        workers = lw.Workers(spec["raycluster"], spec["namespace"], spec["groups"], spec["kueue"], str(sa))
        api = lw.KubeApi(str(sa), self.installed.pod_environment())
        _, patched = lw.release(workers, api)
        assert patched
        assert lw.wait_released(workers, api, 120, 0.3) is not None


@pytest.fixture
def make(bed, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Setup]]:
    """Install a release (its own namespace; with `queues`, the infra script's Kueue objects
    there first; with `ray`, the local Ray cluster, started once per module, and a bridge to
    it); on the way out every node the bridge added is removed and the release and its
    namespace are deleted."""
    made: list[Setup] = []

    def make_(kuberay: str, helm: helm_mod.Helm = HELM4, queues: bool = False, ray: bool = True, **values: Any) -> Setup:
        folder = tmp_path / f"release-{len(made)}"
        folder.mkdir()
        cluster = bed.cluster(kuberay)
        kube = cluster.kube()
        ns = namespace(kube, unique("launcher"))
        if queues:
            apply_queues(kube, ns)
        values_path = values_file(folder, **values)
        try:
            installed = install(bed, kuberay, helm, folder, ns=ns, values=values_path)
        except BaseException:
            remove_namespace(kube, ns)
            raise
        # Recorded before the Ray side starts: a release whose bridge fails is still removed, so
        # its cluster-scoped objects (GKENetworkParamSets) cannot block every later install.
        setup = Setup(installed, folder)
        made.append(setup)
        if ray:
            setup.ray_bridge = RayBridge(request.getfixturevalue("ray_cluster"), installed)
        return setup

    try:
        yield make_
    finally:
        for s in reversed(made):
            if s.ray_bridge is not None:
                s.ray_bridge.close()
            s.installed.uninstall()
            remove_namespace(s.kube, s.installed.namespace)


def suspended_and_empty(setup: Setup) -> dict[str, Any] | None:
    rc = setup.installed.raycluster()
    done = rc["spec"].get("suspend") is True and (rc.get("status") or {}).get("state") == "suspended" and not setup.installed.pods()
    return rc if done else None


# --- the release, without Kueue -----------------------------------------------------------------


def test_a_run_that_ends_suspends_its_raycluster_and_kuberay_deletes_every_pod(make, kuberay):
    s = make(kuberay)
    s.ready()
    rid = new_id()
    spec, env = s.spec(rid, entrypoint=stand_in(s.folder, "steps", STEPS))
    started = time.monotonic()
    rc, out = s.run(spec, env)
    assert rc == 0, out
    assert f"run {rid} succeeded" in out
    recorded = s.outcome(rid)
    assert [recorded[k] for k in ("state", "reason", "attempt", "ray_status")] == ["succeeded", "completed", 1, "SUCCEEDED"]
    assert f"outcome recorded in /data/nemo-rl/run/launcher/{rid}.json: succeeded (completed)" in out
    name, ns = s.installed.name, s.installed.namespace
    assert f"suspended RayCluster {ns}/{name} (spec.suspend: true): KubeRay deletes its head and GPU worker pods" in out
    gone_after = re.search(r"GPU workers gone (\d+)s after the patch", out)
    assert gone_after is not None and int(gone_after.group(1)) <= 60, out
    # what KubeRay did: every pod deleted, the cluster reported suspended (the launcher's wait saw it)
    cluster = wait_for("the RayCluster suspended with no pod left", lambda: suspended_and_empty(s), 60)
    assert any(c["type"] == "RayClusterSuspended" and c["status"] == "True" for c in cluster["status"]["conditions"])
    assert s.bridge.gpu_nodes() == []
    # the launcher's one write, recorded by the API server under its field manager: spec.suspend
    mine = s.installed.managed_fields(LAUNCHER_FIELD_MANAGER)
    assert [(m["operation"], m["fieldsV1"]) for m in mine] == [("Update", {"f:spec": {"f:suspend": {}}})]
    ledger = next(line for line in out.splitlines() if "GPU time (2 GPU nodes): " in line)
    assert "GPU workers ready to first training step: 0.0" in ledger and "first step to end of run: 0.0" in ledger
    assert "end of run to GPU workers gone: 0.0" in ledger and "not seen" not in ledger
    assert time.monotonic() - started < 180


@pytest.mark.parametrize("helm_version", list(HELMS))
def test_helm_upgrade_leaves_a_released_cluster_released(make, kuberay, helm_version):
    """Helm 3 patches a custom resource with the difference between its old and new manifests;
    Helm 4's server-side apply sends the fields the chart renders, and it never renders
    spec.suspend: the upgrade (also Helm 4's with --force-conflicts) changes nothing."""
    s = make(kuberay, helm=HELMS[helm_version], ray=False)
    s.ready()
    s.release_in_process()
    before = wait_for("the RayCluster suspended with no pod left", lambda: suspended_and_empty(s), 60)
    flags = [[]] if helm_version.startswith("v3") else [[], ["--force-conflicts"]]
    for extra in flags:
        s.installed.release.upgrade_with([s.installed.values], extra)
        after = s.installed.raycluster()
        assert after["spec"] == before["spec"], extra
        assert after["metadata"]["generation"] == before["metadata"]["generation"], extra
    assert s.installed.release.revision() == 1 + len(flags)
    assert suspended_and_empty(s) is not None


def test_a_new_run_after_helm_upgrade_resumes_the_cluster(make, kuberay):
    s = make(kuberay)
    first_workers = s.ready()
    first = new_id()
    entry = stand_in(s.folder, "steps", STEPS)
    spec, env = s.spec(first, entrypoint=entry)
    assert s.run(spec, env)[0] == 0
    wait_for("the RayCluster suspended with no pod left", lambda: suspended_and_empty(s), 60)
    played_first = [h[1:] for h in s.bridge.history if h.startswith("+")]
    assert first_workers and len(played_first) == 2

    # a changed run: helm upgrade renders a new launcher (new submission id), the cluster untouched
    changed = values_file(s.folder, "changed", max_steps=400)
    s.installed.release.upgrade_with([changed])
    assert suspended_and_empty(s) is not None
    second = new_id()
    spec, env = s.spec(second, entrypoint=f"{entry} 0")
    rc, out = s.run(spec, env)
    assert rc == 0, out
    name, ns = s.installed.name, s.installed.namespace
    assert f"resumed RayCluster {ns}/{name} (spec.suspend: false), suspended when an earlier run ended" in out
    assert f"run {second} succeeded" in out
    # KubeRay made new worker pods for the second run, the bridge played them, and they went again
    played = [h[1:] for h in s.bridge.history if h.startswith("+")]
    assert len(played) == 4 and not set(played[2:]) & set(played_first)
    wait_for("the RayCluster suspended again", lambda: suspended_and_empty(s), 60)
    assert s.bridge.gpu_nodes() == []


def test_the_outcome_outlives_the_ray_head(make):
    from ray.job_submission import JobSubmissionClient

    s = make(NEWEST)
    s.ready()
    rid = new_id()
    spec, env = s.spec(rid, entrypoint=stand_in(s.folder, "steps", STEPS))
    assert s.run(spec, env)[0] == 0
    before = wait_for("the RayCluster suspended with no pod left", lambda: suspended_and_empty(s), 60)
    client = JobSubmissionClient(s.bridge.ray.dashboard_url)
    client.delete_job(rid)  # what a restarted head pod knows of it: nothing
    rc, out = s.run(spec, env)
    assert rc == 0, out
    assert f"run {rid} already ended: succeeded (completed) at {rid}, recorded in /data/nemo-rl/run/launcher/{rid}.json" in out
    assert jobs_with_prefix(client, rid) == {}  # not submitted again
    assert f"RayCluster {s.installed.namespace}/{s.installed.name} is already suspended" in out
    assert s.installed.raycluster()["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]  # not patched


def test_a_role_for_another_cluster_is_refused_by_rbac_and_reported(make):
    s = make(NEWEST)
    s.ready()
    name, ns = s.installed.name, s.installed.namespace
    role = s.kube.get("rbac.authorization.k8s.io/v1", "Role", f"{name}-launcher", ns)
    assert role is not None and role["rules"][0]["resourceNames"] == [name]
    s.kube.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": f"{name}-launcher", "namespace": ns},
            "rules": [dict(rule, resourceNames=["someone-else"]) for rule in role["rules"]],
        }
    )
    rid = new_id()
    spec, env = s.spec(rid, entrypoint=stand_in(s.folder, "steps", STEPS))
    rc, out = s.run(spec, env)
    assert rc == 0, out  # the run's outcome decides the exit status
    assert (
        f'could not release the GPU workers (rayclusters.ray.io "{name}" is forbidden: User "system:serviceaccount:{ns}:'
        f'{name}-launcher" cannot get resource "rayclusters" in API group "ray.io" in the namespace "{ns}")'
    ) in out
    cluster = s.installed.raycluster()
    assert not cluster["spec"].get("suspend") and cluster["status"]["state"] == "ready"
    assert s.installed.managed_fields(LAUNCHER_FIELD_MANAGER) == []
    assert len(s.bridge.gpu_nodes()) == 2
    assert s.outcome(rid)["state"] == "succeeded"


# --- the launcher's policy: when it releases, and when it does not ------------------------------


def test_gpus_that_never_all_come_are_released(make):
    s = make(NEWEST)
    s.ready()
    spec, env = s.spec(new_id(), entrypoint="true", expected_gpus=24)
    spec["timeouts"] = spec["timeouts"] | {"gpus_s": 2}
    rc, out = s.run(spec, env)
    assert rc == 3, out
    assert "timed out after 2s waiting for 24 GPUs in the Ray cluster" in out
    wait_for("the RayCluster suspended with no pod left", lambda: suspended_and_empty(s), 60)
    assert not (s.folder / "volume-launcher").exists()  # no run ended: nothing recorded


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


@pytest.mark.parametrize("ending", ["stalled", "stopped"])
def test_a_run_that_ends_for_good_releases_the_gpu_workers(make, ending):
    s = make(NEWEST)
    s.ready()
    rid = new_id()
    (s.folder / "checkpoints" / "step_10").mkdir(parents=True)  # the attempts write no newer one
    body = FAILS if ending == "stalled" else RUNS_LONG
    spec, env = s.spec(rid, entrypoint=stand_in(s.folder, ending, body), max_restarts=3)
    stopper = stop_when_running(s.bridge.ray.dashboard_url, rid) if ending == "stopped" else None
    rc, out = s.run(spec, env)
    if stopper is not None:
        stopper.join(10)
    assert rc == 3, out
    recorded = s.outcome(rid)
    assert (recorded["state"], recorded["reason"]) == {"stalled": ("failed", "stalled"), "stopped": ("stopped", "stopped-by-user")}[ending]
    assert recorded["step"] == 10
    wait_for("the RayCluster suspended with no pod left", lambda: suspended_and_empty(s), 60)
    assert s.bridge.gpu_nodes() == []


def test_a_run_whose_epochs_ended_is_finished_never_resubmitted_and_releases_the_gpu_workers(make):
    """Issue 26: NeMo RL returns normally at the end of its last epoch, short of grpo.max_num_steps;
    the launcher records it finished (not a deadline stop to resubmit) and releases the workers as
    for any ended run."""
    s = make(NEWEST)
    s.ready()
    rid = new_id()
    log = s.folder / "driver.log"
    log.write_text("\n".join(run_log("grpo_train", 20, [Figures(0.1, 1.0, 3000.0)] * 4, dataloader_len=2, end="epochs-ended", epochs=2)))
    entry = f"{stand_in(s.folder, 'epochs', EPOCHS_END)} {s.folder / 'checkpoints'} {log}"
    spec, env = s.spec(rid, entrypoint=entry, max_restarts=3, max_num_steps=20)
    rc, out = s.run(spec, env)
    assert rc == 0, out
    assert "; resubmitting (" not in out, out
    recorded = s.outcome(rid)
    assert (recorded["state"], recorded["reason"], recorded["step"]) == ("succeeded", "epochs-ended", 4)
    wait_for("the RayCluster suspended with no pod left", lambda: suspended_and_empty(s), 60)
    assert s.bridge.gpu_nodes() == []


def refused(folder: Path, rid: str) -> str:
    """A verdict file as the preparation Job leaves it when NeMo RL refused the run."""
    config_check = load_chart_program("config_check")
    result = config_check.Result("refused", "overrides", error="OverridesError: Failed to parse Hydra overrides: ...", keys=["x"])
    command = {"submission_id": rid, "entrypoint": "cd /opt/nemo-rl && uv run python examples/run_grpo.py --config r.yaml 'x=1'"}
    verdict = config_check.verdict(command, "nvcr.io/nvidia/nemo-rl:v0.7.0", result, 1.0)
    path = folder / "checked" / f"{rid}.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(vars(verdict)))
    return str(path)


def test_a_run_its_release_refused_releases_the_gpu_workers_unsubmitted(make):
    s = make(NEWEST)
    s.ready()
    rid = new_id()
    spec, env = s.spec(rid, entrypoint="true", config_verdict=refused(s.folder, rid))
    rc, out = s.run(spec, env)
    assert rc == 3, out
    assert "FAILED, nothing submitted: grpo.overrides[0] (x=1): NeMo RL refuses this run" in out
    wait_for("the RayCluster suspended with no pod left", lambda: suspended_and_empty(s), 60)
    assert not (s.folder / "volume-launcher").exists()  # no run ended: nothing recorded


def test_a_refused_run_leaves_the_workers_to_the_run_still_going(make):
    from ray.job_submission import JobSubmissionClient

    s = make(NEWEST)
    before = s.ready()
    rid = new_id()
    client = JobSubmissionClient(s.bridge.ray.dashboard_url)
    previous = f"{rid}-previous"
    client.submit_job(entrypoint=stand_in(s.folder, "long", RUNS_LONG), submission_id=previous, metadata={"nemo-rl-gke.release": rid})
    try:
        spec, env = s.spec(rid, entrypoint="true", config_verdict=refused(s.folder, rid))
        rc, out = s.run(spec, env)
    finally:
        client.stop_job(previous)
    assert rc == 3, out
    assert f"the GPU workers stay: {previous} of this release is still active" in out
    after = s.installed.raycluster()
    assert after["metadata"]["generation"] == before["metadata"]["generation"] and not after["spec"].get("suspend")
    assert len(s.bridge.gpu_nodes()) == 2


# --- under Kueue --------------------------------------------------------------------------------


def kueue_ready(s: Setup) -> dict[str, Any]:
    """The cluster's Workload admitted, the RayCluster ready, its workers played by Ray nodes."""
    wl = wait_for("the RayCluster's Workload admitted", lambda: one_admitted(s.kube, s.installed.namespace, s.installed.name), 120)
    s.ready()
    return wl


def test_under_kueue_a_cluster_waits_in_its_queue_until_a_release_frees_the_gpu_quota(make, kuberay):
    s = make(kuberay, queues=True, kueue_queue="gpu-queue")
    first_wl = kueue_ready(s)
    assert pod_set_counts(first_wl) == {"head": 1, "gpu": 2}
    wait_for("the ClusterQueue counting the cluster's 16 GPUs", lambda: gpu_usage(s.kube) == 16, 60)
    ns = s.installed.namespace

    # a second release in the same queue: its Workload pends (no GPU quota left), its cluster waits suspended
    other = install(
        s.installed.bed,
        kuberay,
        HELM4,
        s.folder,
        ns=ns,
        values=values_file(s.folder, "other", kueue_queue="gpu-queue", existing_networks=True),
    )
    try:

        def pending() -> dict[str, Any] | None:
            wls = workloads(s.kube, ns, other.name)
            reserved = condition(wls[0], "QuotaReserved") if wls else {}
            return wls[0] if reserved.get("status") == "False" and "insufficient" in reserved.get("message", "") else None

        waiting = wait_for("the second Workload pending for quota", pending, 60)
        assert "nvidia.com/gpu" in condition(waiting, "QuotaReserved")["message"]
        assert other.raycluster()["spec"]["suspend"] is True and other.pods() == []

        rid = new_id()
        spec, env = s.spec(rid, entrypoint=stand_in(s.folder, "steps", STEPS))
        rc, out = s.run(spec, env)
        assert rc == 0, out
        name = s.installed.name
        assert f"scaled the GPU worker groups of RayCluster {ns}/{name} to 0 replicas: Kueue releases their quota" in out
        assert re.search(r"GPU workers gone \d+s after the patch", out), out
        # what Kueue made of it: the old Workload gone, a new one without GPU workers admitted...
        new_wl = wait_for("the released cluster's new Workload admitted", lambda: one_admitted(s.kube, ns, name), 120)
        assert pod_set_counts(new_wl) == {"head": 1, "gpu": 0}
        assert new_wl["metadata"]["uid"] != first_wl["metadata"]["uid"]
        # ...and the GPU quota it freed admitted the waiting cluster, whose workers now run
        other_wl = wait_for("the waiting cluster admitted", lambda: one_admitted(s.kube, ns, other.name), 120)
        assert pod_set_counts(other_wl) == {"head": 1, "gpu": 2}
        wait_ready(s.kube, other.name, ns)
        assert len(other.pods("worker")) == 2
        wait_for("the ClusterQueue counting the second cluster's GPUs alone", lambda: gpu_usage(s.kube) == 16, 60)
        assert s.bridge.gpu_nodes() == [] and s.installed.pods("worker") == []
        wait_ready(s.kube, name, ns)  # the released cluster's head is back, under its new Workload
        assert [g["replicas"] for g in s.installed.raycluster()["spec"]["workerGroupSpecs"]] == [0]
    finally:
        other.uninstall()


def test_under_kueue_a_new_run_brings_the_workers_back_at_once(make, kuberay):
    """The resume under Kueue sets the groups' replicas and spec.suspend together: the cluster
    waits suspended for its new Workload and KubeRay creates the workers once Kueue admits it.
    (Replicas alone: KubeRay creates the workers at once, Kueue suspends the cluster and they are
    deleted before KubeRay saw them; its scale expectations then hold the group until its next
    periodic reconcile, 300 s later.)"""
    s = make(kuberay, queues=True, kueue_queue="gpu-queue")
    kueue_ready(s)
    entry = stand_in(s.folder, "steps", STEPS)
    spec, env = s.spec(new_id(), entrypoint=entry)
    assert s.run(spec, env)[0] == 0
    ns, name = s.installed.namespace, s.installed.name
    wait_for("the released cluster's Workload admitted", lambda: one_admitted(s.kube, ns, name, 0), 120)
    wait_ready(s.kube, name, ns)

    second = new_id()
    spec, env = s.spec(second, entrypoint=f"{entry} 0")
    spec["timeouts"] = spec["timeouts"] | {"gpus_s": 90}
    started = time.monotonic()
    rc, out = s.run(spec, env)
    assert rc == 0, out
    restored = f"restored the GPU worker groups of RayCluster {ns}/{name} (gpu: 2), released when an earlier run ended"
    assert f"{restored}; it waits suspended until Kueue admits them" in out
    assert re.search(r"cluster ready: 16 GPUs on 3 nodes", out), out
    assert f"run {second} succeeded" in out
    assert time.monotonic() - started < 150


def test_under_kueue_suspend_on_an_admitted_cluster_is_undone_by_kueue(make):
    """Why the launcher scales the groups to 0 under Kueue: Kueue unsuspends an admitted
    RayCluster, so spec.suspend frees nothing: the same Workload keeps its quota and the cluster
    runs its three pods again. Two interleavings are both real: KubeRay sees the suspend first and
    deletes the pods, which it then recreates, or Kueue undoes it before KubeRay acted and the pods
    stay; either way nothing is released."""
    s = make(NEWEST, queues=True, ray=False, kueue_queue="gpu-queue")
    wl = kueue_ready(s)
    ns, name = s.installed.namespace, s.installed.name
    lw = s.workers_module()
    sa = s.installed.service_account(s.folder / "serviceaccount")
    api = lw.KubeApi(str(sa), s.installed.pod_environment())
    api.patch(f"/apis/ray.io/v1/namespaces/{ns}/rayclusters/{name}", {"spec": {"suspend": True}}, lw.MERGE_PATCH)

    def running_again() -> bool:
        rc = s.installed.raycluster()
        conditions = {c["type"]: c["status"] for c in (rc.get("status") or {}).get("conditions") or []}
        pods = s.installed.pods()
        running = [p for p in pods if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
        return (
            rc["spec"].get("suspend") is False
            and conditions.get("RayClusterSuspending") != "True"
            and conditions.get("RayClusterSuspended") != "True"
            and len(pods) == len(running) == 3
        )

    # Up to KubeRay's unconditional requeue (RAYCLUSTER_DEFAULT_REQUEUE_SECONDS, 300 s by default:
    # ray-operator/controllers/ray/raycluster_controller.go at v1.6.2) plus a minute: pods it
    # deleted can wait for that requeue before they are created again.
    wait_for("Kueue unsuspending the cluster and its three pods running", running_again, 360)
    after = one_admitted(s.kube, ns, name)
    assert after is not None and after["metadata"]["uid"] == wl["metadata"]["uid"]  # the same admission, its quota kept
    assert gpu_usage(s.kube) == 16


@pytest.mark.parametrize("helm_version", list(HELMS))
def test_under_kueue_helm_upgrade_after_a_release(make, kuberay, helm_version):
    """Helm 3 (a patch of what changed between the manifests) leaves the released cluster as it
    is. Helm 4's server-side apply conflicts with Kueue, which owns `.spec.workerGroupSpecs` since
    its admission: `--server-side=false` upgrades like Helm 3, and `--force-conflicts` applies the
    chart's replicas, so Kueue queues the GPU workers again and they come back."""
    s = make(kuberay, helm=HELMS[helm_version], queues=True, ray=False, kueue_queue="gpu-queue")
    kueue_ready(s)
    s.release_in_process()
    ns, name = s.installed.namespace, s.installed.name
    wait_for("the released cluster's Workload admitted", lambda: one_admitted(s.kube, ns, name, 0), 120)
    released = wait_ready(s.kube, name, ns)  # Kueue has unsuspended it: nothing left in flight
    upgrade = s.installed.release.upgrade_with
    if helm_version.startswith("v3"):
        upgrade([s.installed.values])
        assert s.installed.raycluster()["spec"] == released["spec"]
        return
    refused_ = upgrade([s.installed.values], check=False)
    assert refused_.returncode != 0
    assert 'conflict with "kueue" using ray.io/v1: .spec.workerGroupSpecs' in refused_.stderr, refused_.stderr
    upgrade([s.installed.values], ["--server-side=false"])
    assert s.installed.raycluster()["spec"] == released["spec"]
    upgrade([s.installed.values], ["--server-side=true", "--force-conflicts"])
    assert [g["replicas"] for g in s.installed.raycluster()["spec"]["workerGroupSpecs"]] == [2]
    back = wait_for("a Workload with the GPU workers admitted", lambda: one_admitted(s.kube, ns, name, 2), 120)
    assert back is not None
    wait_for("the ClusterQueue counting the GPU workers again", lambda: gpu_usage(s.kube) == 16, 60)


def containers(template: dict[str, Any]) -> list[dict[str, Any]]:
    """A pod template's containers with every resource quantity as a string (the RayCluster
    keeps what Helm sent, e.g. the number 8; Kueue's Workload holds the quantity "8")."""
    out = []
    for c in template["spec"]["containers"]:
        resources = {kind: {k: str(v) for k, v in (values or {}).items()} for kind, values in (c.get("resources") or {}).items()}
        out.append(c | {"resources": resources})
    return out


def test_under_kueue_helm4_conflicts_with_kueue_from_the_first_admission(make):
    """No launcher involved: Kueue's admission rewrites the atomic `.spec.workerGroupSpecs` (it
    adds its pod-set label to each group's template), so Helm 4's first upgrade conflicts.
    `--force-conflicts` takes the list back without that label, which Kueue does not compare:
    its Workload matches the cluster as before (pkg/util/equality/podset.go compares the counts,
    containers, init containers and, before admission, tolerations), so nothing restarts."""
    s = make(NEWEST, queues=True, ray=False, kueue_queue="gpu-queue")
    wl = kueue_ready(s)
    before = s.installed.raycluster()
    kueue_owns = [m for m in before["metadata"]["managedFields"] if m["manager"] == "kueue"]
    assert any("f:workerGroupSpecs" in m["fieldsV1"].get("f:spec", {}) for m in kueue_owns)
    assert before["spec"]["workerGroupSpecs"][0]["template"]["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "gpu"
    refused_ = s.installed.release.upgrade_with([s.installed.values], check=False)
    assert 'conflict with "kueue" using ray.io/v1: .spec.workerGroupSpecs' in refused_.stderr, refused_.stderr
    pods = {p["metadata"]["uid"] for p in s.installed.pods()}
    s.installed.release.upgrade_with([s.installed.values], ["--force-conflicts"])
    after = s.installed.raycluster()
    helm_owns = next(m for m in after["metadata"]["managedFields"] if m["manager"] == "helm")
    assert "f:workerGroupSpecs" in helm_owns["fieldsV1"]["f:spec"]
    group = after["spec"]["workerGroupSpecs"][0]
    assert "kueue.x-k8s.io/podset" not in group["template"]["metadata"]["labels"]
    # what Kueue compares with its Workload is unchanged: the cluster still matches it
    admitted_sets = {p["name"]: p for p in wl["spec"]["podSets"]}
    assert group["replicas"] == admitted_sets["gpu"]["count"]
    assert containers(group["template"]) == containers(admitted_sets["gpu"]["template"])
    assert containers(after["spec"]["headGroupSpec"]["template"]) == containers(admitted_sets["head"]["template"])
    assert not after["spec"].get("suspend")
    assert {p["metadata"]["uid"] for p in s.installed.pods()} == pods
    again = one_admitted(s.kube, s.installed.namespace, s.installed.name)
    assert again is not None and again["metadata"]["uid"] == wl["metadata"]["uid"] and admitted(again)
