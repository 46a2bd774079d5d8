"""The launcher (charts/nemo-rl-gke/files/launcher.py) against a real local Ray head: submitting once,
failures, timeouts, resubmission after preemption."""

from __future__ import annotations

import json
import time

import pytest
import ray
from conftest import load_chart_program
from launcher_harness import EPOCHS_END, SUCCEEDS, jobs_with_prefix, new_id, run_launcher, stand_in
from nemo_rl_logs import Figures, driver_script, run_log

pytestmark = pytest.mark.ray


def test_a_run_that_succeeds_is_submitted_once_and_followed(head, client, tmp_path):
    rid = new_id()
    entry = stand_in(tmp_path, "ok", SUCCEEDS)
    proc = run_launcher(head, tmp_path, submission_id=rid, entrypoint=entry, expected_gpus=8, follow=True, ray_version=ray.__version__)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [proc.stdout.count(f"grpo step {i} reward 0.5") for i in range(3)] == [1, 1, 1]  # streamed, each line once
    assert f"attempt 1 submitted as {rid}; starts from step 0" in proc.stdout
    assert jobs_with_prefix(client, rid) == {rid: "SUCCEEDED"}


def test_a_followed_run_prints_one_progress_line_per_step_and_a_summary(head, client, tmp_path):
    # NeMo RL v0.7.0's grpo_train log for 3 of 3 steps (nemo_rl_logs.py cites the print calls).
    figures = [Figures(0.0312, 2.0, 3365.28), Figures(0.25, 1.0, 3500.0), Figures(0.6734, 1.5, 3600.0)]
    entry = stand_in(tmp_path, "grpo", driver_script(run_log("grpo_train", 3, figures), pause_s=0.3))
    rid = new_id()
    proc = run_launcher(head, tmp_path, submission_id=rid, entrypoint=entry, expected_gpus=8, follow=True, max_num_steps=3)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line.split("] ", 1)[1] for line in proc.stdout.splitlines() if line.startswith("[launcher ") and "] step " in line]
    assert lines == [
        "step 1/3: mean reward 0.0312, step time 2.0 s, 3365 tokens/s (210 per GPU), about 4 s left",
        "step 2/3: mean reward 0.2500, step time 1.0 s, 3500 tokens/s (219 per GPU), about 2 s left",
        "step 3/3: mean reward 0.6734, step time 1.5 s, 3600 tokens/s (225 per GPU)",
    ]
    summary = next(line for line in proc.stdout.splitlines() if "] progress: " in line)
    assert "3 step(s) logged, the last step 3 of 3; mean reward 0.0312 at step 1, 0.6734 at step 3; mean step time 1.5 s" in summary
    assert "GPU-node-hours from the GPU workers ready to the end of the run" in summary
    assert proc.stdout.count("  • Avg Reward: 0.2500") == 1  # NeMo RL's own lines still stream, once


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
    assert proc.returncode == 3  # final: the Job fails at once (podFailurePolicy)
    assert "Not enough GPUs available" in proc.stdout
    assert f"{rid} FAILED and no restarts are left (0 allowed)" in proc.stdout
    assert jobs_with_prefix(client, rid) == {rid: "FAILED"}


def test_a_head_on_another_ray_version_gets_no_run(head, client, tmp_path):
    # What a `helm upgrade` to another image leaves: KubeRay keeps the old Ray pods running.
    rid = new_id()
    entry = stand_in(tmp_path, "ok", SUCCEEDS)
    proc = run_launcher(head, tmp_path, submission_id=rid, entrypoint=entry, expected_gpus=8, follow=True, ray_version="2.49.2")
    assert proc.returncode == 3
    assert f"FAILED: the Ray head runs Ray {ray.__version__}, but this release's image has Ray 2.49.2" in proc.stdout
    assert "`helm uninstall` and install again" in proc.stdout
    assert jobs_with_prefix(client, rid) == {}  # nothing submitted


def test_a_failure_that_repeats_without_a_new_checkpoint_stops_after_two_attempts(head, client, tmp_path):
    rid = new_id()
    ckpt = tmp_path / "ckpt"
    (ckpt / "step_40").mkdir(parents=True)
    entry = stand_in(tmp_path, "bad", "import sys\nprint('CUDA out of memory', flush=True)\nsys.exit(1)\n")
    proc = run_launcher(
        head, tmp_path, submission_id=rid, entrypoint=entry, expected_gpus=8, follow=True, max_restarts=3, checkpoint_dir=str(ckpt)
    )
    assert proc.returncode == 3
    assert f"{rid}-retry1 FAILED, as did the attempt before it, without a new checkpoint in {ckpt} (newest: step_40)" in proc.stdout
    assert "a failure that repeats, not a preemption" in proc.stdout
    assert jobs_with_prefix(client, rid) == {rid: "FAILED", f"{rid}-retry1": "FAILED"}  # not 4 attempts


def test_a_stopped_run_is_not_resubmitted_and_the_way_back_is_named(head, client, tmp_path):
    rid = new_id()
    entry = stand_in(tmp_path, "long", "import time\ntime.sleep(120)\n")
    client.submit_job(entrypoint=entry, submission_id=rid)
    client.stop_job(rid)
    deadline = time.monotonic() + 60
    while str(client.get_job_status(rid)) != "STOPPED" and time.monotonic() < deadline:
        time.sleep(0.3)
    proc = run_launcher(head, tmp_path, submission_id=rid, entrypoint=entry, expected_gpus=8, follow=True, max_restarts=3)
    assert proc.returncode == 3
    assert f"{rid} was stopped (`ray job stop`, or a newer release's launcher with previousRuns: stop)" in proc.stdout
    assert "to go on, change the run (e.g. raise grpo.max_num_steps) and `helm upgrade`: the new run resumes" in proc.stdout
    assert jobs_with_prefix(client, rid) == {rid: "STOPPED"}


def test_too_few_gpus_times_out_with_a_clear_message(head, client, tmp_path):
    rid = new_id()
    proc = run_launcher(
        head, tmp_path, submission_id=rid, entrypoint=stand_in(tmp_path, "ok", SUCCEEDS), expected_gpus=16, timeouts={"gpus_s": 2}
    )
    assert proc.returncode == 3
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


def test_a_run_the_head_no_longer_knows_counts_as_a_failed_attempt(head, capsys):
    # A restarted head pod forgets its jobs (no GCS fault tolerance): the run died with it. The
    # launcher once crashed here on Ray's 404; now the attempt counts as failed and is resubmitted.
    spec = load_chart_program("launcher_spec").parse_spec(
        {"address": head.address, "submission_id": "x", "entrypoint": "true", "expected_gpus": 8}
    )
    runs = load_chart_program("launcher_ray").Runs(spec)
    rid = new_id()
    assert runs.status(rid) == "FAILED"
    assert runs.logs(rid) == ""
    assert f"{rid} is gone from the Ray head: its pod restarted and lost the job history" in capsys.readouterr().out


# NeMo RL at its save deadline (checkpointing.checkpoint_must_save_by): it saves step_N, with
# training_info.json, and returns normally; the job is SUCCEEDED short of grpo.max_num_steps.
DEADLINE_THEN_END = """
import json, os, sys
ckpt = sys.argv[1]
steps = sorted(int(n.split('_')[1]) for n in os.listdir(ckpt) if n.startswith('step_')) if os.path.isdir(ckpt) else []
step = 4 if not steps else 8
os.makedirs(os.path.join(ckpt, f'step_{step}'))
open(os.path.join(ckpt, f'step_{step}', 'training_info.json'), 'w').write(json.dumps({'total_steps': step}))
print('Timeout has been reached, stopping training early' if step < 8 else 'Max number of steps has been reached', flush=True)
"""


def test_a_run_stopped_at_its_save_deadline_is_resubmitted_until_max_num_steps(head, client, tmp_path):
    rid = new_id()
    ckpt = tmp_path / "checkpoints"
    entry = f"{stand_in(tmp_path, 'deadline', DEADLINE_THEN_END)} {ckpt}"
    proc = run_launcher(
        head, tmp_path, submission_id=rid, entrypoint=entry, expected_gpus=8, follow=True, max_restarts=2,
        checkpoint_dir=str(ckpt), max_num_steps=8,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{rid} SUCCEEDED at step 4 of 8 (grpo.max_num_steps): it stopped at its save deadline" in proc.stdout
    assert "save deadline; resubmitting (restart 1 of 2)" in proc.stdout
    assert f"attempt 2 submitted as {rid}-retry1; resumes from step_4 in {ckpt}" in proc.stdout
    assert f"run {rid} succeeded" in proc.stdout
    assert jobs_with_prefix(client, rid) == {rid: "SUCCEEDED", f"{rid}-retry1": "SUCCEEDED"}


def test_a_run_that_ends_at_its_epochs_end_is_recorded_finished_and_never_resubmitted(head, client, tmp_path):
    rid = new_id()
    ckpt, outcome = tmp_path / "checkpoints", tmp_path / "outcome"
    outcome.mkdir()
    log = tmp_path / "driver.log"
    figures = [Figures(0.1, 1.0, 3000.0)] * 4
    log.write_text("\n".join(run_log("grpo_train", 20, figures, dataloader_len=2, end="epochs-ended", epochs=2)))
    entry = f"{stand_in(tmp_path, 'epochs', EPOCHS_END)} {ckpt} {log}"
    spec = {
        "submission_id": rid, "entrypoint": entry, "expected_gpus": 8, "follow": True, "max_restarts": 2,
        "checkpoint_dir": str(ckpt), "max_num_steps": 20, "outcome_dir": str(outcome),
    }  # fmt: skip
    proc = run_launcher(head, tmp_path, **spec)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{rid} SUCCEEDED at step 4 of 20 (grpo.max_num_steps): its epochs ended" in proc.stdout
    assert "the last one ends at step 4" in proc.stdout and "; resubmitting (" not in proc.stdout
    assert f"outcome recorded in {outcome}/{rid}.json: succeeded (epochs-ended)" in proc.stdout
    recorded = json.loads((outcome / f"{rid}.json").read_text())
    assert (recorded["state"], recorded["reason"], recorded["step"], recorded["attempt"]) == ("succeeded", "epochs-ended", 4, 1)
    assert jobs_with_prefix(client, rid) == {rid: "SUCCEEDED"}
    again = run_launcher(head, tmp_path, **spec)  # a new launcher pod (the Job retried, a helm upgrade)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"run {rid} already ended: succeeded (epochs-ended)" in again.stdout
    assert jobs_with_prefix(client, rid) == {rid: "SUCCEEDED"}


# NeMo RL on flex-start (the generator's checkpointing.checkpoint_must_save_by=06:22:00:00): its
# deadline timer starts with each attempt (TimeoutChecker in grpo_train), so every attempt trains
# up to its own deadline from the newest checkpoint, saves and returns normally, short of
# grpo.max_num_steps. Each attempt here trains 2 steps, and writes when it started and from where.
DEADLINE_EVERY_ATTEMPT = """
import json, os, sys, time
ckpt, attempts = sys.argv[1], sys.argv[2]
steps = sorted(int(n.split('_')[1]) for n in os.listdir(ckpt) if n.startswith('step_')) if os.path.isdir(ckpt) else []
start = steps[-1] if steps else 0
with open(attempts, 'a') as f:
    f.write(json.dumps({'from': start, 'started': time.time()}) + '\\n')
step = start + 2
os.makedirs(os.path.join(ckpt, f'step_{step}'))
open(os.path.join(ckpt, f'step_{step}', 'training_info.json'), 'w').write(json.dumps({'total_steps': step}))
print('Timeout has been reached, stopping training early', flush=True)
"""


def test_a_flex_start_deadline_stop_is_resubmitted_on_the_same_workers_and_counts_as_a_restart(head, client, tmp_path):
    """docs/runs.md, flex-start: a save-deadline stop is resubmitted like a preempted run and counts
    against launcher.maxRestarts; the new attempt runs on the same Ray cluster (the GPU workers are
    not released and brought back between attempts) and NeMo RL's deadline starts again with it."""
    rid = new_id()
    ckpt, attempts = tmp_path / "checkpoints", tmp_path / "attempts.jsonl"
    entry = f"{stand_in(tmp_path, 'flex', DEADLINE_EVERY_ATTEMPT)} {ckpt} {attempts}"
    proc = run_launcher(
        head, tmp_path, submission_id=rid, entrypoint=entry, expected_gpus=8, follow=True, max_restarts=1,
        checkpoint_dir=str(ckpt), max_num_steps=8,
    )  # fmt: skip
    out = proc.stdout
    assert f"{rid} SUCCEEDED at step 2 of 8 (grpo.max_num_steps): it stopped at its save deadline; resubmitting (restart 1 of 1)" in out
    assert f"attempt 2 submitted as {rid}-retry1; resumes from step_2 in {ckpt}" in out
    assert "stopped at its save deadline; no restarts are left (1 allowed)" in out, out
    assert proc.returncode != 0, out  # the run did not reach max_num_steps
    # The same cluster for both attempts: nothing about the GPU workers is done before the second.
    second = out.index(f"attempt 2 submitted as {rid}-retry1")
    assert "GPU workers" not in out[:second], out[:second]
    runs = [json.loads(line) for line in attempts.read_text().splitlines()]
    assert [r["from"] for r in runs] == [0, 2]  # each attempt from the newest checkpoint, to its own deadline
    assert jobs_with_prefix(client, rid) == {rid: "SUCCEEDED", f"{rid}-retry1": "SUCCEEDED"}
