"""The launcher against a real local Ray head: ordering (the preparation marker, a previous run)
and the `helm test` check."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
import ray
from launcher_harness import SUCCEEDS, jobs_with_prefix, new_id, run_launcher, stand_in, start_launcher

pytestmark = pytest.mark.ray


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
    assert proc.returncode == 3
    assert "written by the preparation Job" in proc.stdout and "timed out after 1s" in proc.stdout
    assert jobs_with_prefix(client, rid) == {}


@pytest.mark.parametrize("policy", ["stop", "wait"])
def test_a_changed_spec_waits_for_or_stops_the_previous_run(head, client, tmp_path, policy):
    release = f"rel-{uuid.uuid4().hex[:6]}"
    old, new = f"{release}-aaaa", f"{release}-bbbb"
    go = tmp_path / "old-may-end"  # the old run ends once the test creates it (or after 120 s)
    waits = f"""
    import os, time
    print('old run', flush=True)
    end = time.time() + 120
    while not os.path.exists({str(go)!r}) and time.time() < end:
        time.sleep(0.1)
    """
    client.submit_job(entrypoint=stand_in(tmp_path, "old", waits), submission_id=old, metadata={"nemo-rl-gke.release": release})
    deadline = time.monotonic() + 60
    while str(client.get_job_status(old)) != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.3)
    proc = start_launcher(
        head,
        tmp_path,
        submission_id=new,
        entrypoint=stand_in(tmp_path, "ok", SUCCEEDS),
        expected_gpus=8,
        follow=True,
        previous_runs=policy,
        metadata={"nemo-rl-gke.release": release},
    )
    watchdog = threading.Timer(180, proc.kill)
    watchdog.start()
    try:
        assert proc.stdout is not None
        out = []
        for line in proc.stdout:
            out.append(line)
            if "waiting for it to end before submitting" in line:
                go.touch()  # only now: the launcher has seen the old run active
        proc.wait()
    finally:
        watchdog.cancel()
    stdout = "".join(out)
    assert proc.returncode == 0, stdout
    jobs = {j.submission_id: j for j in client.list_jobs() if j.submission_id in (old, new)}
    if policy == "stop":
        assert f"stopping the previous run {old}" in stdout
        assert str(jobs[old].status) == "STOPPED"
    else:
        assert "waiting for it to end before submitting" in stdout
        assert str(jobs[old].status) == "SUCCEEDED"
    assert jobs[new].start_time >= jobs[old].end_time


def test_helm_test_check_passes_when_the_cluster_matches(head, tmp_path):
    proc = run_launcher(
        head,
        tmp_path,
        check=True,
        submission_id=new_id(),
        entrypoint="true",
        expected_gpus=8,
        expected_nodes=1,
        expected_interfaces=["lo"],
        ray_version=ray.__version__,
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
        ray_version="2.54.0",
    )
    assert proc.returncode == 1
    assert f"FAIL: the Ray head runs Ray {ray.__version__}, but this release's image has Ray 2.54.0" in proc.stdout
    assert "FAIL: 8 GPUs in the cluster, expected 16" in proc.stdout
    assert "FAIL: 1 Ray nodes alive, expected 3" in proc.stdout
    assert "lacks eth9 (RDMA NICs not attached?)" in proc.stdout
