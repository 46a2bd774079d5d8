"""The stall rule against node loss, on a real local multi-node Ray cluster (head + 2 GPU workers,
ray.cluster_utils.Cluster as `rehearse --drill preempt` uses it): an attempt during which a GPU
node went away never counts toward the stall limit; a failure that repeats with every node alive
still ends the run after two attempts."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest
from launcher_harness import ClusterHead, jobs_with_prefix, new_id, run_launcher, stand_in, start_launcher

from generator.rehearse.cluster import LocalCluster
from generator.rehearse.topology import NodeSpec
from tests.rehearse.rehearse_harness import cluster_of

pytestmark = pytest.mark.ray

VICTIM = "gpu-1"
NODES = [
    NodeSpec("head", "head", 2, 0, None),
    NodeSpec("gpu-0", "gpu", 1, 8, None),
    NodeSpec(VICTIM, "gpu", 1, 8, None),
]


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    yield from cluster_of(NODES, "launcher-preempt")


@pytest.fixture
def client(cluster: LocalCluster):
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(cluster.dashboard_url)


# Attempts 1 and 2 wait for the test to take a GPU node away (and give one back, as KubeRay
# recreates the pod), then fail without writing a checkpoint; attempt 3 succeeds.
PREEMPTED_TWICE = """
import os, sys, time
state = sys.argv[1]
n = len([f for f in os.listdir(state) if f.startswith('attempt-')]) + 1
open(os.path.join(state, f'attempt-{n}'), 'w').close()
if n >= 3:
    print('training to the end', flush=True)
    sys.exit(0)
print(f'PREEMPT-ME {n}', flush=True)
deadline = time.monotonic() + 120
while not os.path.exists(os.path.join(state, f'reclaimed-{n}')) and time.monotonic() < deadline:
    time.sleep(0.1)
print('lost a training worker with its node', flush=True)
sys.exit(1)
"""


def test_two_preemptions_without_a_new_checkpoint_do_not_end_the_run(cluster, client, tmp_path):
    rid = new_id()
    state = tmp_path / "state"
    state.mkdir()
    ckpt = tmp_path / "checkpoints"
    (ckpt / "step_10").mkdir(parents=True)  # the last checkpoint: no attempt gets to write the next
    entry = f"{stand_in(tmp_path, 'preempted', PREEMPTED_TWICE)} {state}"
    spec = {"expected_gpus": 16, "expected_nodes": 3, "follow": True, "max_restarts": 3, "checkpoint_dir": str(ckpt)}
    proc = start_launcher(ClusterHead(cluster), tmp_path, submission_id=rid, entrypoint=entry, timeouts={"gpus_s": 60}, **spec)
    out = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.append(line)
            if line.startswith("PREEMPT-ME "):
                n = line.split()[1]
                spec_of_victim = cluster.remove(VICTIM)  # a Spot reclaim
                time.sleep(1.5)  # several of the launcher's polls (0.3 s) see the node gone
                cluster.add(spec_of_victim)  # KubeRay recreates the pod
                (state / f"reclaimed-{n}").touch()
        proc.wait(timeout=120)
    except (subprocess.TimeoutExpired, AssertionError):
        proc.kill()
        raise
    text = "".join(out)
    assert proc.returncode == 0, text
    assert text.count("(the cluster lost a GPU node meanwhile: ") == 2
    assert f"{rid} FAILED; the cluster lost a GPU node during it (a preemption): not counted toward the stall limit" in text
    assert f"{rid}-retry1 FAILED; the cluster lost a GPU node during it" in text
    assert "a failure that repeats" not in text
    assert jobs_with_prefix(client, rid) == {rid: "FAILED", f"{rid}-retry1": "FAILED", f"{rid}-retry2": "SUCCEEDED"}


def test_a_repeating_failure_with_every_gpu_node_alive_still_ends_the_run(cluster, client, tmp_path):
    rid = new_id()
    ckpt = tmp_path / "checkpoints"
    (ckpt / "step_10").mkdir(parents=True)
    entry = stand_in(tmp_path, "oom", "import sys\nprint('CUDA out of memory', flush=True)\nsys.exit(1)\n")
    proc = run_launcher(
        ClusterHead(cluster), tmp_path, submission_id=rid, entrypoint=entry, expected_gpus=16, expected_nodes=3, follow=True,
        max_restarts=3, checkpoint_dir=str(ckpt),
    )  # fmt: skip
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert f"{rid}-retry1 FAILED, as did the attempt before it, without a new checkpoint in {ckpt} (newest: step_10)" in proc.stdout
    assert "lost a GPU node" not in proc.stdout
    assert jobs_with_prefix(client, rid) == {rid: "FAILED", f"{rid}-retry1": "FAILED"}  # not 4 attempts
