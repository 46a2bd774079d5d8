"""The launcher against a real local Ray head and the verdict the preparation Job left on the run:
a run its release refused in its image is never submitted, and the message names the values key."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path

import pytest
from check_harness import config_check, local, prepare, rendered_specs, run_prepare, run_values
from launcher_harness import SUCCEEDS, jobs_with_prefix, run_launcher, stand_in

pytestmark = pytest.mark.ray


def checked_run(tmp_path: Path, release: str, extra: list[str]) -> tuple[str, str]:
    """(the run's submission id, its verdict file) after the preparation Job's check, as rendered."""
    pspec, lspec = rendered_specs(run_values(tmp_path, release, extra=extra))
    spec = local(pspec, tmp_path)
    with contextlib.suppress(prepare.RunRefused):
        run_prepare(spec)
    return lspec["submission_id"], spec["check"]["verdict"]


@pytest.mark.parametrize("release", ["v0.5.0", "v0.7.0"])
def test_a_run_its_release_refuses_is_never_submitted(head, client, tmp_path, release):
    rid, verdict = checked_run(tmp_path, release, ["+policy.train_micro_batch_size=2"])
    entry = stand_in(tmp_path, "ok", SUCCEEDS)
    proc = run_launcher(head, tmp_path, submission_id=rid, entrypoint=entry, expected_gpus=8, follow=True, config_verdict=verdict)
    assert proc.returncode == 3, proc.stdout + proc.stderr  # the Job fails at once (podFailurePolicy)
    assert "FAILED, nothing submitted: grpo.extraOverrides[0] (+policy.train_micro_batch_size=2): NeMo RL refuses this run" in proc.stdout
    assert "An item is already at 'policy.train_micro_batch_size'" in proc.stdout
    assert jobs_with_prefix(client, rid) == {}
    assert "GPU workers stay up (launcher.releaseGpus is false)" in proc.stdout  # no gpu_release in this spec


def test_a_run_that_passed_is_submitted_and_the_log_says_how_it_was_checked(head, client, tmp_path):
    rid, verdict = checked_run(tmp_path, "v0.7.0", [])
    entry = stand_in(tmp_path, "ok", SUCCEEDS)
    proc = run_launcher(head, tmp_path, submission_id=rid, entrypoint=entry, expected_gpus=8, follow=True, config_verdict=verdict)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "checked by NeMo RL's own config code in nvcr.io/nvidia/nemo-rl:v0.7.0 (MasterConfig validated)" in proc.stdout
    assert jobs_with_prefix(client, rid) == {rid: "SUCCEEDED"}


def test_an_unchecked_run_is_submitted_with_the_reason(head, client, tmp_path):
    rid = "run-unchecked-1"
    verdict = tmp_path / "checked" / f"{rid}.json"
    result = config_check.Result("unchecked", "import", error="ModuleNotFoundError: No module named 'x'")
    spec = {"submission_id": rid, "entrypoint": "cd /opt/nemo-rl && uv run python examples/run_grpo.py --config r.yaml"}
    verdict.parent.mkdir()
    verdict.write_text(json.dumps(dataclasses.asdict(config_check.verdict(spec, "nvcr.io/nvidia/nemo-rl:v0.7.0", result, 2.0))))
    entry = stand_in(tmp_path, "ok", SUCCEEDS)
    proc = run_launcher(head, tmp_path, submission_id=rid, entrypoint=entry, expected_gpus=8, follow=True, config_verdict=str(verdict))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "not checked in nvcr.io/nvidia/nemo-rl:v0.7.0 (stage import): ModuleNotFoundError" in proc.stdout
    assert jobs_with_prefix(client, rid) == {rid: "SUCCEEDED"}


def test_no_verdict_within_the_preparation_wait_submits_nothing(head, client, tmp_path):
    rid = "run-no-verdict-1"
    proc = run_launcher(
        head,
        tmp_path,
        submission_id=rid,
        entrypoint=stand_in(tmp_path, "ok", SUCCEEDS),
        expected_gpus=8,
        config_verdict=str(tmp_path / "checked" / f"{rid}.json"),
        timeouts={"files_s": 1},
    )
    assert proc.returncode == 3
    assert "(the run checked by its release in the image, by the preparation Job)" in proc.stdout
    assert jobs_with_prefix(client, rid) == {}


def test_a_verdict_for_another_run_is_not_taken_for_this_one(head, client, tmp_path):
    _, verdict = checked_run(tmp_path, "v0.6.0", ["policy.no_such_key=1"])
    assert json.loads(Path(verdict).read_text())["state"] == "refused"
    rid = "run-other-verdict-1"
    proc = run_launcher(
        head, tmp_path, submission_id=rid, entrypoint=stand_in(tmp_path, "ok", SUCCEEDS), expected_gpus=8, config_verdict=verdict
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "the check verdict is for another run; going on without it" in proc.stdout
