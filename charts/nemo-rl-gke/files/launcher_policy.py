"""The launcher's retry policy: what to do after each look at the run (follow it, wait for its
start, submit the next attempt, or stop, and why), from the spec and what was seen, without I/O:
every branch is table-tested (tests/launcher/test_launcher_policy.py)."""

from __future__ import annotations

from dataclasses import dataclass

from launcher_spec import Spec, attempt_id

TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


ACTIVE = {"PENDING", "RUNNING"}


EXIT_FINAL = 3


STALLED_LIMIT = 2  # failed attempts in a row without a new checkpoint before giving up


FOLLOW, WAIT_START, SUBMIT, STOP = "follow", "wait-start", "submit", "stop"


BACKOFF_CAP_S = 30.0  # the longest wait between two tries of a Ray head that is not ready


def backoff_s(tries: int, base_s: float, left_s: float, cap_s: float = BACKOFF_CAP_S) -> float:
    """How long to wait after the `tries`-th failed try (1, 2, ...) of a head that is not ready:
    base_s doubled per try, at most cap_s, and never past the deadline (left_s); 0 when no time is
    left. A head that stays down is asked a few dozen times over its wait, not thousands."""
    if left_s <= 0:
        return 0.0
    wait = min(cap_s, max(base_s, 0.0) * 2 ** max(tries - 1, 0))
    return min(wait, left_s)


EPOCHS_ENDED = "epochs-ended"  # launcher_progress.EPOCHS_ENDED: the run's data spent


@dataclass(frozen=True)
class Seen:
    """What the launcher knows of the run when it decides."""

    attempt: int  # the newest attempt's number; 0: none yet
    status: str  # its Ray status; "" when there is none
    started: bool = False  # the status is the answer of a wait for the start (launcher.follow false)
    stalled: int = 0  # failed attempts in a row, before this one, that wrote no new checkpoint
    step_at_submit: int | None = None  # newest step (-1: none) when this launcher submitted it; None: it did not
    newest_step: int | None = None  # the newest step now (measured only when wants_progress)
    lost_gpu_node: bool = False  # a GPU node of the cluster went away while this attempt ran
    recorded: str = ""  # the outcome recorded on the shared volume: succeeded, stopped or failed
    recorded_reason: str = ""  # why (launcher_outcome.Outcome.reason)
    log_end: str = ""  # how the attempt's log says it ended (launcher_progress.Progress.end); "": unknown
    epoch_end_step: int | None = None  # the step its last epoch ends at, from its log; None: unknown


@dataclass(frozen=True)
class Decision:
    action: str  # FOLLOW, WAIT_START, SUBMIT or STOP
    why: str = ""  # the line to log ("" for none)
    exit_code: int = 0  # STOP: the launcher's exit status
    stalled: int = 0  # the count of stalled failures to carry on
    after_failure: bool = False  # SUBMIT: a resubmission, which first waits for the GPUs
    final: str = ""  # STOP at the run's end: the outcome to record (succeeded, stopped, failed); "": none
    reason: str = ""  # with final: completed, epochs-ended, stopped-by-user, out-of-restarts or stalled


# How to run a run again that has ended (its outcome is recorded, so the same run spec is never
# submitted twice): a changed run spec is a new run, which resumes from the newest checkpoint.
RUN_AGAIN = (
    "to go on, change the run (e.g. raise grpo.max_num_steps) and `helm upgrade`: the new run resumes from the "
    "newest checkpoint in the same folder"
)


def wants_progress(spec: Spec, seen: Seen) -> bool:
    """Whether `decide` needs the newest checkpoint step: after a failure of an attempt this
    launcher submitted, or after a success it followed (to tell a deadline stop from the end),
    when it follows the run and knows its checkpoint folder."""
    if not (spec.follow and spec.checkpoint_dir) or seen.started:
        return False
    if seen.status == "SUCCEEDED":
        return spec.max_num_steps > 0
    return seen.status == "FAILED" and seen.step_at_submit is not None


def decide(spec: Spec, seen: Seen) -> Decision:
    """Follow the run, wait for it to start, submit the next attempt, or stop (and why)."""
    job_id = attempt_id(spec.submission_id, seen.attempt)
    if seen.recorded:
        return _after_record(spec, seen, job_id)
    if seen.started and seen.status in ("RUNNING", "SUCCEEDED"):
        return Decision(STOP, f"{job_id} is {seen.status}; exiting (launcher.follow is false)")
    if seen.status in ACTIVE:
        return Decision(FOLLOW if spec.follow else WAIT_START, stalled=seen.stalled)
    if seen.status == "SUCCEEDED":
        return _after_success(spec, seen, job_id)
    if seen.status == "STOPPED":
        return Decision(
            STOP,
            f"{job_id} was stopped (`ray job stop`, or a newer release's launcher with previousRuns: stop); not resubmitting; {RUN_AGAIN}",
            EXIT_FINAL,
            final="" if seen.started else "stopped",
            reason="" if seen.started else "stopped-by-user",
        )
    if seen.status == "FAILED":
        return _after_failure(spec, seen, job_id)
    return Decision(SUBMIT, stalled=seen.stalled)


def _after_success(spec: Spec, seen: Seen, job_id: str) -> Decision:
    # NeMo RL with checkpointing.checkpoint_must_save_by saves and returns normally once the
    # deadline is near (nemo_rl/algorithms/grpo.py at v0.5.0, v0.6.0 and v0.7.0: "Timeout has been
    # reached, stopping training early"), so the job is SUCCEEDED short of grpo.max_num_steps.
    # With the data spent (grpo.max_num_epochs passes) grpo_train returns normally too, without a
    # line of its own: a new attempt would find no data left and end the same way.
    newest = seen.newest_step
    if not wants_progress(spec, seen) or newest is None or newest >= spec.max_num_steps:
        return Decision(STOP, f"run {spec.submission_id} succeeded", final="succeeded", reason="completed")
    n = seen.attempt
    if seen.log_end == EPOCHS_ENDED or (seen.epoch_end_step is not None and newest == seen.epoch_end_step):
        why = (
            f"{job_id} SUCCEEDED at step {newest} of {spec.max_num_steps} (grpo.max_num_steps): its epochs ended "
            f"(grpo.max_num_epochs passes over the data; "
            + (f"the last one ends at step {seen.epoch_end_step}" if seen.epoch_end_step is not None else "NeMo RL's log")
            + "), not a save deadline; not resubmitting: no data is left. To train on, raise grpo.max_num_epochs and `helm upgrade`: "
            "the new run resumes from the newest checkpoint in the same folder"
        )
        return Decision(STOP, why, final="succeeded", reason=EPOCHS_ENDED)
    short = f"{job_id} SUCCEEDED at step {newest} of {spec.max_num_steps} (grpo.max_num_steps): it stopped at its save deadline"
    if n >= 1 + spec.max_restarts:
        why = f"{short}; no restarts are left ({spec.max_restarts} allowed)"
        return Decision(STOP, why, EXIT_FINAL, final="failed", reason="out-of-restarts")
    return Decision(SUBMIT, f"{short}; resubmitting (restart {n} of {spec.max_restarts})", after_failure=True)


def _after_failure(spec: Spec, seen: Seen, job_id: str) -> Decision:
    # Failed attempts in a row that wrote no new step_N: a preemption costs at most the steps since
    # the last checkpoint, a failure that repeats costs a whole start-up on every GPU each time.
    if not spec.follow:
        return Decision(STOP, f"{job_id} FAILED; see `ray job logs {job_id}`", EXIT_FINAL)
    stalled, n, newest, at_submit = seen.stalled, seen.attempt, seen.newest_step, seen.step_at_submit
    out_of_restarts = n >= 1 + spec.max_restarts
    lost_node = ""
    if wants_progress(spec, seen) and at_submit is not None:
        if step_rank(newest) > at_submit:
            stalled = 0
        elif seen.lost_gpu_node:
            # A preemption (a reclaimed Spot node) between two checkpoints is no repeating failure:
            # the count is kept as it was, neither raised nor reset.
            lost_node = "; the cluster lost a GPU node during it (a preemption): not counted toward the stall limit"
        else:
            stalled += 1
        if stalled >= STALLED_LIMIT and not out_of_restarts:
            return Decision(
                STOP,
                f"{job_id} FAILED, as did the attempt before it, without a new checkpoint in {spec.checkpoint_dir} "
                f"(newest: {'step_' + str(newest) if newest is not None else 'none'}): a failure that repeats, not a "
                f"preemption; not resubmitting. See `ray job logs {job_id}`",
                EXIT_FINAL,
                stalled,
                final="failed",
                reason="stalled",
            )
    if out_of_restarts:
        why = f"{job_id} FAILED{lost_node} and no restarts are left ({spec.max_restarts} allowed)"
        return Decision(STOP, why, EXIT_FINAL, stalled, final="failed", reason="out-of-restarts")
    return Decision(
        SUBMIT, f"{job_id} FAILED{lost_node}; resubmitting (restart {n} of {spec.max_restarts})", stalled=stalled, after_failure=True
    )


def _after_record(spec: Spec, seen: Seen, job_id: str) -> Decision:
    # The run ended under an earlier launcher (its outcome outlives the Ray head). Only a run that
    # ran out of restarts goes on, and only when launcher.maxRestarts now allows another attempt.
    n, where = seen.attempt, spec.outcome_where()
    ended = f"run {spec.submission_id} already ended: {seen.recorded} ({seen.recorded_reason}) at {job_id}, recorded in {where}"
    if seen.recorded == "succeeded":
        return Decision(STOP, f"{ended}; not submitting it again", final="succeeded", reason=seen.recorded_reason)
    if seen.recorded_reason == "out-of-restarts" and n < 1 + spec.max_restarts:
        why = f"{ended}; launcher.maxRestarts is now {spec.max_restarts}: resubmitting (restart {n} of {spec.max_restarts})"
        return Decision(SUBMIT, why, after_failure=True)
    return Decision(STOP, f"{ended}; not submitting it again; {RUN_AGAIN}", EXIT_FINAL, final=seen.recorded, reason=seen.recorded_reason)


def step_rank(step: int | None) -> int:
    return -1 if step is None else step
