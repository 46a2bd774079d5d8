"""The launcher (charts/nemo-rl-gke/files/launcher.py) against a real local Ray head."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest
import ray_head

pytestmark = pytest.mark.ray

LAUNCHER = Path(__file__).resolve().parent.parent / "charts" / "nemo-rl-gke" / "files" / "launcher.py"


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    h = ray_head.start(tmp_path_factory.mktemp("ray-head"))
    yield h
    ray_head.stop(h)
    assert h.pids() == [], "Ray processes of the test head survived its teardown"


@pytest.fixture
def client(head):
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(head.address)


def stand_in(tmp_path: Path, name: str, body: str) -> str:
    """A stand-in for NeMo RL: a script the run's entrypoint executes."""
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return f"python {path}"


def run_launcher(head, tmp_path: Path, *, check: bool = False, timeout: float = 180, **spec) -> subprocess.CompletedProcess[str]:
    base = {"address": head.address, "poll_interval_s": 0.3, "metadata": {"nemo-rl-gke.release": spec.get("submission_id", "x")}}
    path = tmp_path / f"spec-{uuid.uuid4().hex[:6]}.json"
    path.write_text(json.dumps(base | spec))
    args = [sys.executable, str(LAUNCHER), *(["--check"] if check else []), str(path)]
    return subprocess.run(args, cwd=head.workdir, env=head.env(), capture_output=True, text=True, timeout=timeout, check=False)


def jobs_with_prefix(client, prefix: str) -> dict[str, str]:
    return {j.submission_id: str(j.status) for j in client.list_jobs() if (j.submission_id or "").startswith(prefix)}


def new_id() -> str:
    return f"run-{uuid.uuid4().hex[:10]}"


SUCCEEDS = """
import time
for i in range(3):
    print(f"grpo step {i} reward 0.5", flush=True)
    time.sleep(0.2)
"""


def test_a_run_that_succeeds_is_submitted_once_and_followed(head, client, tmp_path):
    rid = new_id()
    proc = run_launcher(head, tmp_path, submission_id=rid, entrypoint=stand_in(tmp_path, "ok", SUCCEEDS), expected_gpus=8, follow=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "grpo step 2 reward 0.5" in proc.stdout  # logs streamed
    assert f"attempt 1 submitted as {rid}; starts from step 0" in proc.stdout
    assert jobs_with_prefix(client, rid) == {rid: "SUCCEEDED"}


def test_rerunning_the_same_spec_submits_nothing(head, client, tmp_path):
    rid = new_id()
    entry = stand_in(tmp_path, "ok", SUCCEEDS)
    assert run_launcher(head, tmp_path, submission_id=rid, entrypoint=entry, expected_gpus=8, follow=True).returncode == 0
    again = run_launcher(head, tmp_path, submission_id=rid, entrypoint=entry, expected_gpus=8, follow=True)
    assert again.returncode == 0
    assert f"found {rid} (SUCCEEDED); the same run spec is never submitted twice" in again.stdout
    assert "submitted as" not in again.stdout
    assert jobs_with_prefix(client, rid) == {rid: "SUCCEEDED"}


def test_a_run_that_fails_exits_nonzero_with_a_message(head, client, tmp_path):
    rid = new_id()
    entry = stand_in(tmp_path, "bad", "import sys\nprint('Not enough GPUs available', flush=True)\nsys.exit(3)\n")
    proc = run_launcher(head, tmp_path, submission_id=rid, entrypoint=entry, expected_gpus=8, follow=True, max_restarts=0)
    assert proc.returncode == 1
    assert "Not enough GPUs available" in proc.stdout
    assert f"{rid} FAILED and no restarts are left (0 allowed)" in proc.stdout
    assert jobs_with_prefix(client, rid) == {rid: "FAILED"}


def test_too_few_gpus_times_out_with_a_clear_message(head, client, tmp_path):
    rid = new_id()
    proc = run_launcher(
        head, tmp_path, submission_id=rid, entrypoint=stand_in(tmp_path, "ok", SUCCEEDS), expected_gpus=16, timeouts={"gpus_s": 2}
    )
    assert proc.returncode == 1
    assert "timed out after 2s waiting for 16 GPUs in the Ray cluster" in proc.stdout
    assert "the cluster reports 8 GPUs on 1 nodes" in proc.stdout
    assert jobs_with_prefix(client, rid) == {}  # nothing submitted


PREEMPTED_ONCE = """
import os, sys
ckpt = sys.argv[1]
steps = sorted(int(n.split('_')[1]) for n in os.listdir(ckpt) if n.startswith('step_')) if os.path.isdir(ckpt) else []
if not steps:
    os.makedirs(os.path.join(ckpt, 'step_5', 'policy'))
    open(os.path.join(ckpt, 'step_5', 'training_info.json'), 'w').write('{"step": 5}')
    print('wrote step_5; node reclaimed', flush=True)
    sys.exit(1)
print(f'resumed from step_{steps[-1]}', flush=True)
"""


def test_a_preempted_run_is_resubmitted_and_resumes_from_its_checkpoint(head, client, tmp_path):
    rid = new_id()
    ckpt = tmp_path / "checkpoints"
    entry = f"{stand_in(tmp_path, 'preempt', PREEMPTED_ONCE)} {ckpt}"
    proc = run_launcher(
        head, tmp_path, submission_id=rid, entrypoint=entry, expected_gpus=8, follow=True, max_restarts=2, checkpoint_dir=str(ckpt)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"attempt 2 submitted as {rid}-retry1; resumes from step_5 in {ckpt}" in proc.stdout
    assert "resumed from step_5" in proc.stdout
    assert jobs_with_prefix(client, rid) == {rid: "FAILED", f"{rid}-retry1": "SUCCEEDED"}
    assert (ckpt / "step_5" / "training_info.json").read_text() == '{"step": 5}'  # untouched


def test_without_follow_the_launcher_exits_once_the_run_is_running(head, client, tmp_path):
    rid = new_id()
    entry = stand_in(tmp_path, "slow", "import time\nprint('training', flush=True)\ntime.sleep(60)\n")
    start = time.monotonic()
    proc = run_launcher(head, tmp_path, submission_id=rid, entrypoint=entry, expected_gpus=8, follow=False)
    try:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"{rid} is RUNNING; exiting (launcher.follow is false)" in proc.stdout
        assert time.monotonic() - start < 45
        # A second launcher for the same spec reports the running run and submits nothing.
        again = run_launcher(head, tmp_path, submission_id=rid, entrypoint=entry, expected_gpus=8, follow=False)
        assert again.returncode == 0
        assert f"found {rid} (RUNNING)" in again.stdout
        assert list(jobs_with_prefix(client, rid)) == [rid]
    finally:
        client.stop_job(rid)


def test_submission_waits_for_the_preparation_marker(head, client, tmp_path):
    rid = new_id()
    marker = tmp_path / "prepared" / "abc.json"
    created: dict[str, float] = {}

    def prepare_later():
        time.sleep(1.5)
        marker.parent.mkdir(parents=True)
        marker.write_text("{}")
        created["at"] = time.time()

    t = threading.Thread(target=prepare_later)
    t.start()
    proc = run_launcher(
        head,
        tmp_path,
        submission_id=rid,
        entrypoint=stand_in(tmp_path, "ok", SUCCEEDS),
        expected_gpus=8,
        follow=True,
        wait_for_files=[str(marker)],
    )
    t.join()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    ready = next(i for i, ln in enumerate(lines) if f"preparation complete: {marker}" in ln)
    submitted = next(i for i, ln in enumerate(lines) if "submitted as" in ln)
    assert ready < submitted
    (info,) = [j for j in client.list_jobs() if j.submission_id == rid]
    assert info.start_time / 1000 >= created["at"] - 0.5


def test_missing_preparation_marker_times_out(head, client, tmp_path):
    rid = new_id()
    proc = run_launcher(
        head,
        tmp_path,
        submission_id=rid,
        entrypoint="python -c 'pass'",
        expected_gpus=8,
        wait_for_files=[str(tmp_path / "never.json")],
        timeouts={"files_s": 1},
    )
    assert proc.returncode == 1
    assert "written by the preparation Job" in proc.stdout and "timed out after 1s" in proc.stdout
    assert jobs_with_prefix(client, rid) == {}


@pytest.mark.parametrize("policy", ["stop", "wait"])
def test_a_changed_spec_waits_for_or_stops_the_previous_run(head, client, tmp_path, policy):
    release = f"rel-{uuid.uuid4().hex[:6]}"
    old, new = f"{release}-aaaa", f"{release}-bbbb"
    sleeps = "import time\nprint('old run', flush=True)\ntime.sleep(3 if __import__('sys').argv[1] == 'short' else 120)\n"
    entry_old = stand_in(tmp_path, "old", sleeps) + (" short" if policy == "wait" else " long")
    client.submit_job(entrypoint=entry_old, submission_id=old, metadata={"nemo-rl-gke.release": release})
    deadline = time.monotonic() + 60
    while str(client.get_job_status(old)) != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.3)
    proc = run_launcher(
        head,
        tmp_path,
        submission_id=new,
        entrypoint=stand_in(tmp_path, "ok", SUCCEEDS),
        expected_gpus=8,
        follow=True,
        previous_runs=policy,
        metadata={"nemo-rl-gke.release": release},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    jobs = {j.submission_id: j for j in client.list_jobs() if j.submission_id in (old, new)}
    if policy == "stop":
        assert f"stopping the previous run {old}" in proc.stdout
        assert str(jobs[old].status) == "STOPPED"
    else:
        assert "waiting for it to end before submitting" in proc.stdout
        assert str(jobs[old].status) == "SUCCEEDED"
    assert jobs[new].start_time >= jobs[old].end_time


def test_helm_test_check_passes_when_the_cluster_matches(head, tmp_path):
    proc = run_launcher(
        head, tmp_path, check=True, submission_id=new_id(), entrypoint="true", expected_gpus=8, expected_nodes=1, expected_interfaces=["lo"]
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "nodes: 1, GPUs: 8" in proc.stdout
    assert "ok: the Ray cluster matches the values" in proc.stdout


def test_helm_test_check_fails_on_missing_gpus_nodes_and_nics(head, tmp_path):
    proc = run_launcher(
        head,
        tmp_path,
        check=True,
        submission_id=new_id(),
        entrypoint="true",
        expected_gpus=16,
        expected_nodes=3,
        expected_interfaces=["lo", "eth9"],
    )
    assert proc.returncode == 1
    assert "FAIL: 8 GPUs in the cluster, expected 16" in proc.stdout
    assert "FAIL: 1 Ray nodes alive, expected 3" in proc.stdout
    assert "lacks eth9 (RDMA NICs not attached?)" in proc.stdout
