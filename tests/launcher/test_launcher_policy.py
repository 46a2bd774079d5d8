"""The launcher's retry policy (`decide`): follow, wait for the start, submit or stop, and why, for
each thing the launcher can see. A pure function: no Ray, no files."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import load_chart_program

policy = load_chart_program("launcher_policy")
spec_of = load_chart_program("launcher_spec")

BASE = "nemo-rl-0123456789"
FOLLOWING = {"follow": True, "max_restarts": 3, "checkpoint_dir": "/data/run/checkpoints"}
NOT_FOLLOWING = {"follow": False, "max_restarts": 3}
DEADLINED = FOLLOWING | {"max_num_steps": 20}


def spec(**changes: Any) -> Any:
    return spec_of.parse_spec(
        {"address": "http://head:8265", "submission_id": BASE, "entrypoint": "python x.py", "expected_gpus": 8} | changes
    )


FOLLOW, WAIT_START, SUBMIT, STOP = policy.FOLLOW, policy.WAIT_START, policy.SUBMIT, policy.STOP
EXIT = policy.EXIT_FINAL

# (case, spec values, what the launcher sees, action, exit status, a phrase of why, stalled after, resubmission)
CASES = [
    ("no attempt yet: submit the first", FOLLOWING, {"attempt": 0, "status": ""}, SUBMIT, 0, "", 0, False),
    ("an unknown status is submitted anew", FOLLOWING, {"attempt": 0, "status": "?"}, SUBMIT, 0, "", 0, False),
    ("pending, following", FOLLOWING, {"attempt": 1, "status": "PENDING"}, FOLLOW, 0, "", 0, False),
    ("running, following", FOLLOWING, {"attempt": 2, "status": "RUNNING"}, FOLLOW, 0, "", 0, False),
    ("following keeps the stalled count", FOLLOWING, {"attempt": 2, "status": "RUNNING", "stalled": 1}, FOLLOW, 0, "", 1, False),
    ("pending, not following: wait for the start", NOT_FOLLOWING, {"attempt": 1, "status": "PENDING"}, WAIT_START, 0, "", 0, False),
    ("running, not following: look again first", NOT_FOLLOWING, {"attempt": 1, "status": "RUNNING"}, WAIT_START, 0, "", 0, False),
    (
        "started and running, not following",
        NOT_FOLLOWING,
        {"attempt": 1, "status": "RUNNING", "started": True},
        STOP,
        0,
        f"{BASE} is RUNNING; exiting (launcher.follow is false)",
        0,
        False,
    ),
    (
        "started and already done, not following",
        NOT_FOLLOWING,
        {"attempt": 2, "status": "SUCCEEDED", "started": True},
        STOP,
        0,
        f"{BASE}-retry1 is SUCCEEDED; exiting",
        0,
        False,
    ),
    ("succeeded", FOLLOWING, {"attempt": 3, "status": "SUCCEEDED"}, STOP, 0, f"run {BASE} succeeded", 0, False),
    ("stopped by hand: never resubmitted", FOLLOWING, {"attempt": 1, "status": "STOPPED"}, STOP, EXIT, "the new run resumes", 0, False),
    ("stopped, not following", NOT_FOLLOWING, {"attempt": 1, "status": "STOPPED", "started": True}, STOP, EXIT, "was stopped", 0, False),
    ("failed, not following", NOT_FOLLOWING, {"attempt": 1, "status": "FAILED"}, STOP, EXIT, f"see `ray job logs {BASE}`", 0, False),
    (
        "failed with restarts left (found, not submitted by this launcher)",
        FOLLOWING,
        {"attempt": 1, "status": "FAILED"},
        SUBMIT,
        0,
        f"{BASE} FAILED; resubmitting (restart 1 of 3)",
        0,
        True,
    ),
    (
        "failed, no restarts left",
        FOLLOWING,
        {"attempt": 4, "status": "FAILED"},
        STOP,
        EXIT,
        f"{BASE}-retry3 FAILED and no restarts are left (3 allowed)",
        0,
        False,
    ),
    (
        "no restarts allowed at all",
        {"follow": True, "max_restarts": 0},
        {"attempt": 1, "status": "FAILED"},
        STOP,
        EXIT,
        "no restarts are left (0 allowed)",
        0,
        False,
    ),
    (
        "failed after a new checkpoint (a preemption): resubmit, count reset",
        FOLLOWING,
        {"attempt": 2, "status": "FAILED", "stalled": 1, "step_at_submit": 4, "newest_step": 6},
        SUBMIT,
        0,
        "resubmitting (restart 2 of 3)",
        0,
        True,
    ),
    (
        "first failure without a new checkpoint: resubmit, counted",
        FOLLOWING,
        {"attempt": 1, "status": "FAILED", "step_at_submit": -1, "newest_step": None},
        SUBMIT,
        0,
        "resubmitting (restart 1 of 3)",
        1,
        True,
    ),
    (
        "second failure in a row without a new checkpoint: a repeating failure",
        FOLLOWING,
        {"attempt": 2, "status": "FAILED", "stalled": 1, "step_at_submit": 4, "newest_step": 4},
        STOP,
        EXIT,
        "as did the attempt before it, without a new checkpoint in /data/run/checkpoints (newest: step_4)",
        2,
        False,
    ),
    (
        "second stalled failure with no checkpoint at all",
        FOLLOWING,
        {"attempt": 2, "status": "FAILED", "stalled": 1, "step_at_submit": -1, "newest_step": None},
        STOP,
        EXIT,
        "(newest: none): a failure that repeats, not a preemption",
        2,
        False,
    ),
    (
        "a repeating failure on the last attempt: out of restarts says so",
        FOLLOWING,
        {"attempt": 4, "status": "FAILED", "stalled": 1, "step_at_submit": 4, "newest_step": 4},
        STOP,
        EXIT,
        "no restarts are left",
        2,
        False,
    ),
    (
        "no checkpoint folder: failures are not counted",
        {"follow": True, "max_restarts": 3},
        {"attempt": 2, "status": "FAILED", "stalled": 0, "step_at_submit": -1},
        SUBMIT,
        0,
        "resubmitting (restart 2 of 3)",
        0,
        True,
    ),
    (
        "succeeded with max_num_steps reached",
        DEADLINED,
        {"attempt": 1, "status": "SUCCEEDED", "step_at_submit": -1, "newest_step": 20},
        STOP,
        0,
        f"run {BASE} succeeded",
        0,
        False,
    ),
    (
        "succeeded short of max_num_steps: stopped at its save deadline, resubmitted",
        DEADLINED,
        {"attempt": 1, "status": "SUCCEEDED", "stalled": 1, "step_at_submit": -1, "newest_step": 7},
        SUBMIT,
        0,
        f"{BASE} SUCCEEDED at step 7 of 20 (grpo.max_num_steps): it stopped at its save deadline; resubmitting (restart 1 of 3)",
        0,
        True,
    ),
    (
        "a save-deadline stop counts against restarts",
        DEADLINED,
        {"attempt": 4, "status": "SUCCEEDED", "step_at_submit": 7, "newest_step": 9},
        STOP,
        EXIT,
        "stopped at its save deadline; no restarts are left (3 allowed)",
        0,
        False,
    ),
    (
        "succeeded without a checkpoint to compare: done",
        DEADLINED,
        {"attempt": 1, "status": "SUCCEEDED", "step_at_submit": -1, "newest_step": None},
        STOP,
        0,
        f"run {BASE} succeeded",
        0,
        False,
    ),
    (
        "succeeded short of max_num_steps with its epochs ended (the log): finished, not resubmitted",
        DEADLINED,
        {"attempt": 1, "status": "SUCCEEDED", "step_at_submit": -1, "newest_step": 7, "log_end": "epochs-ended"},
        STOP,
        0,
        f"{BASE} SUCCEEDED at step 7 of 20 (grpo.max_num_steps): its epochs ended (grpo.max_num_epochs passes over the data; "
        "NeMo RL's log), not a save deadline; not resubmitting: no data is left",
        0,
        False,
    ),
    (
        "the newest checkpoint is the last step of the last epoch: finished, even after a deadline line",
        DEADLINED,
        {"attempt": 2, "status": "SUCCEEDED", "step_at_submit": 4, "newest_step": 14, "log_end": "deadline", "epoch_end_step": 14},
        STOP,
        0,
        "its epochs ended (grpo.max_num_epochs passes over the data; the last one ends at step 14)",
        0,
        False,
    ),
    (
        "epochs ended on the last restart: finished, not out of restarts",
        DEADLINED,
        {"attempt": 4, "status": "SUCCEEDED", "step_at_submit": 7, "newest_step": 9, "log_end": "epochs-ended"},
        STOP,
        0,
        "not resubmitting: no data is left",
        0,
        False,
    ),
    (
        "a deadline line short of the epochs' end: resubmitted",
        DEADLINED,
        {"attempt": 1, "status": "SUCCEEDED", "step_at_submit": -1, "newest_step": 7, "log_end": "deadline", "epoch_end_step": 14},
        SUBMIT,
        0,
        "it stopped at its save deadline; resubmitting (restart 1 of 3)",
        0,
        True,
    ),
    (
        "failed without a new checkpoint after losing a GPU node: not counted as stalled",
        FOLLOWING,
        {"attempt": 2, "status": "FAILED", "stalled": 1, "step_at_submit": 4, "newest_step": 4, "lost_gpu_node": True},
        SUBMIT,
        0,
        "lost a GPU node during it (a preemption): not counted toward the stall limit; resubmitting (restart 2 of 3)",
        1,
        True,
    ),
    (
        "a GPU node lost on the last attempt: out of restarts",
        FOLLOWING,
        {"attempt": 4, "status": "FAILED", "stalled": 1, "step_at_submit": 4, "newest_step": 4, "lost_gpu_node": True},
        STOP,
        EXIT,
        "not counted toward the stall limit and no restarts are left (3 allowed)",
        1,
        False,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_decide(case):
    _, values, seen, action, exit_code, why, stalled, after_failure = case
    d = policy.decide(spec(**values), policy.Seen(**seen))
    assert (d.action, d.exit_code, d.stalled, d.after_failure) == (action, exit_code, stalled, after_failure)
    assert why in d.why
    if not why:
        assert d.why == ""


@pytest.mark.parametrize(
    ("values", "seen", "wanted"),
    [
        (FOLLOWING, {"attempt": 1, "status": "FAILED", "step_at_submit": 3}, True),
        (FOLLOWING, {"attempt": 1, "status": "FAILED"}, False),  # found, not submitted by this launcher
        (FOLLOWING, {"attempt": 1, "status": "RUNNING", "step_at_submit": 3}, False),
        (NOT_FOLLOWING | {"checkpoint_dir": "/data/c"}, {"attempt": 1, "status": "FAILED", "step_at_submit": 3}, False),
        ({"follow": True}, {"attempt": 1, "status": "FAILED", "step_at_submit": 3}, False),  # no checkpoint folder
        (DEADLINED, {"attempt": 1, "status": "SUCCEEDED"}, True),  # a deadline stop or the end?
        (FOLLOWING, {"attempt": 1, "status": "SUCCEEDED"}, False),  # max_num_steps unknown
        (DEADLINED, {"attempt": 1, "status": "SUCCEEDED", "started": True}, False),  # not following it
    ],
)
def test_the_checkpoint_folder_is_read_only_when_the_decision_needs_it(values, seen, wanted):
    assert policy.wants_progress(spec(**values), policy.Seen(**seen)) is wanted


# Every STOP at the run's end records its outcome (and so releases the GPU workers); a launcher
# that does not follow the run, or that resubmits it, records nothing.
# (case, spec values, what the launcher sees, (outcome recorded, reason))
ENDINGS = [
    (
        "the last step reached",
        DEADLINED,
        {"attempt": 1, "status": "SUCCEEDED", "step_at_submit": -1, "newest_step": 20},
        ("succeeded", "completed"),
    ),
    ("succeeded, max_num_steps unknown", FOLLOWING, {"attempt": 1, "status": "SUCCEEDED"}, ("succeeded", "completed")),
    ("stopped by hand", FOLLOWING, {"attempt": 1, "status": "STOPPED"}, ("stopped", "stopped-by-user")),
    (
        "a repeating failure",
        FOLLOWING,
        {"attempt": 2, "status": "FAILED", "stalled": 1, "step_at_submit": 4, "newest_step": 4},
        ("failed", "stalled"),
    ),
    ("failed, no restarts left", FOLLOWING, {"attempt": 4, "status": "FAILED"}, ("failed", "out-of-restarts")),
    (
        "deadline stop, no restarts left",
        DEADLINED,
        {"attempt": 4, "status": "SUCCEEDED", "step_at_submit": 7, "newest_step": 9},
        ("failed", "out-of-restarts"),
    ),
    (
        "the data spent",
        DEADLINED,
        {"attempt": 1, "status": "SUCCEEDED", "step_at_submit": -1, "newest_step": 7, "log_end": "epochs-ended"},
        ("succeeded", "epochs-ended"),
    ),
    ("a resubmission", FOLLOWING, {"attempt": 1, "status": "FAILED"}, ("", "")),
    ("not following: running", NOT_FOLLOWING, {"attempt": 1, "status": "RUNNING", "started": True}, ("", "")),
    ("not following: failed", NOT_FOLLOWING, {"attempt": 1, "status": "FAILED"}, ("", "")),
    ("not following: stopped", NOT_FOLLOWING, {"attempt": 1, "status": "STOPPED", "started": True}, ("", "")),
]


@pytest.mark.parametrize("case", ENDINGS, ids=[c[0] for c in ENDINGS])
def test_the_outcome_each_ending_records(case):
    _, values, seen, ending = case
    d = policy.decide(spec(**values), policy.Seen(**seen))
    assert (d.final, d.reason) == ending
    assert (d.action == STOP) or ending == ("", "")


OUTCOME_AT = {"outcome_dir": "/var/lib/nemo-rl-gke/outcome", "outcome_volume_dir": "/data/nemo-rl/runs/r/launcher"}
RECORDED_AT = f"recorded in /data/nemo-rl/runs/r/launcher/{BASE}.json"

# A run whose outcome an earlier launcher recorded on the volume (the Ray head may have forgotten it).
# (case, spec values, what was recorded, action, exit status, a phrase of why)
RECORDED = [
    (
        "succeeded: never submitted again",
        FOLLOWING,
        {"attempt": 2, "status": "SUCCEEDED", "recorded": "succeeded", "recorded_reason": "completed"},
        STOP,
        0,
        f"run {BASE} already ended: succeeded (completed) at {BASE}-retry1, {RECORDED_AT}; not submitting it again",
    ),
    (
        "stopped: never submitted again",
        FOLLOWING,
        {"attempt": 1, "status": "STOPPED", "recorded": "stopped", "recorded_reason": "stopped-by-user"},
        STOP,
        EXIT,
        "not submitting it again; to go on, change the run",
    ),
    (
        "a repeating failure: more restarts do not help",
        FOLLOWING | {"max_restarts": 9},
        {"attempt": 2, "status": "FAILED", "recorded": "failed", "recorded_reason": "stalled"},
        STOP,
        EXIT,
        "already ended: failed (stalled)",
    ),
    (
        "out of restarts, launcher.maxRestarts unchanged",
        FOLLOWING,
        {"attempt": 4, "status": "FAILED", "recorded": "failed", "recorded_reason": "out-of-restarts"},
        STOP,
        EXIT,
        "already ended: failed (out-of-restarts)",
    ),
    (
        "out of restarts, launcher.maxRestarts raised: the next attempt",
        FOLLOWING | {"max_restarts": 5},
        {"attempt": 4, "status": "FAILED", "recorded": "failed", "recorded_reason": "out-of-restarts"},
        SUBMIT,
        0,
        "launcher.maxRestarts is now 5: resubmitting (restart 4 of 5)",
    ),
]


@pytest.mark.parametrize("case", RECORDED, ids=[c[0] for c in RECORDED])
def test_decide_after_a_recorded_outcome(case):
    _, values, seen, action, exit_code, why = case
    d = policy.decide(spec(**values, **OUTCOME_AT), policy.Seen(**seen))
    assert (d.action, d.exit_code) == (action, exit_code)
    assert why in d.why


# (tries so far, poll interval, seconds left before the head's deadline, the wait)
BACKOFFS = [
    (1, 0.2, 60.0, 0.2),
    (2, 0.2, 60.0, 0.4),
    (3, 0.2, 60.0, 0.8),
    (8, 0.2, 60.0, 25.6),
    (9, 0.2, 60.0, 30.0),  # capped
    (40, 0.2, 600.0, 30.0),  # no overflow, still capped
    (1, 10.0, 600.0, 10.0),  # GKE's poll interval: the first wait is the interval
    (3, 10.0, 600.0, 30.0),
    (5, 0.2, 1.5, 1.5),  # never past the deadline
    (5, 0.2, 0.0, 0.0),
    (5, 0.2, -3.0, 0.0),
    (1, 0.0, 60.0, 0.0),
]


@pytest.mark.parametrize(("tries", "base", "left", "wait"), BACKOFFS)
def test_the_wait_between_tries_of_a_head_that_is_not_ready_doubles_to_a_cap(tries, base, left, wait):
    assert policy.backoff_s(tries, base, left) == pytest.approx(wait)


def test_a_head_that_stays_down_for_the_rehearsals_wait_is_asked_a_few_dozen_times_not_hundreds():
    """The rehearsal polls every 0.2 s and waits 60 s for the head: without a back-off a refused
    connection was retried about 300 times; with it, the sum of the waits reaches the deadline in
    a dozen tries."""
    left, tries = 60.0, 0
    while left > 0:
        tries += 1
        left -= policy.backoff_s(tries, 0.2, left)
    assert tries <= 12
