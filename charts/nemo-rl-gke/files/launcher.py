#!/usr/bin/env python3
"""Launch the NeMo RL GRPO run on the release's Ray cluster, once, and keep it going.

    python launcher.py SPEC.json           submit (or find) the run; follow it if asked
    python launcher.py --check SPEC.json   `helm test`: nodes, GPUs and RDMA interfaces

Runs in the NeMo RL image (standard library + ray). SPEC.json is rendered by the chart:
  address          Ray dashboard URL, e.g. http://nemo-rl-head-svc.default.svc.cluster.local:8265
  submission_id    deterministic id derived from the run spec; attempt n > 1 is <id>-retry<n-1>
  entrypoint       the NeMo RL command (holds no secret: tokens reach the driver through the
                   head pod's environment, from a Kubernetes Secret)
  expected_gpus    GPUs the cluster must report before submitting
  ... and optional keys, see launcher_spec.SPEC_KEYS.
This file is the run's flow (wait for the files, the head and the GPUs; submit; follow; record
the outcome; release the GPU workers). Its sibling modules, in the same ConfigMap, hold the rest:
launcher_spec (the spec and attempt ids), launcher_policy (what to do after each look at the run,
without I/O), launcher_ray (the head, its nodes and the Jobs API), launcher_checkpoints (the run's
step folders), launcher_probe (`helm test`), launcher_log (log lines, bounded waits),
launcher_outcome (the run's outcome on the shared volume), launcher_workers and launcher_kube
(the GPU workers released and resumed through the Kubernetes API), launcher_ledger (GPU time),
launcher_progress (one progress line per training step from NeMo RL's log).
Exit status: 0 run running (or finished) as asked; 3 the run failed for good, was stopped, or a
wait timed out; 2 bad spec. The Job fails at once on 2 and 3 (podFailurePolicy): a new pod would
wait the whole timeout again or repeat the same verdict. Anything else (1: an unexpected error,
137: OOM-killed) is retried by the Job.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace

import config_check
import launcher_outcome
import launcher_workers
from launcher_checkpoints import checkpoint_step, latest_step
from launcher_kube import KubeApi, KubeError
from launcher_ledger import Ledger
from launcher_log import GpusTimedOut, LaunchFailed, log, wait_until
from launcher_policy import (
    EXIT_FINAL,
    FOLLOW,
    STOP,
    TERMINAL,
    WAIT_START,
    Decision,
    Seen,
    decide,
    step_rank,
    wants_progress,
)
from launcher_probe import check
from launcher_progress import Progress
from launcher_ray import GpuWatch, Runs, cluster_gpus, follow_logs, head_healthy, version_mismatch
from launcher_spec import RELEASE_WAIT_S, Spec, SpecError, attempt_id, load_spec


def wait_until_started(runs: Runs, job_id: str) -> str:
    timeout = runs.spec.timeout("running_s", 3600)
    return wait_until(
        f"{job_id} to start",
        timeout,
        runs.spec.poll_interval_s,
        lambda: s if (s := runs.status(job_id)) not in ("PENDING",) else None,
        "the job stayed PENDING; check `ray job status` on the head",
    )


def wait_for_files(spec: Spec) -> None:
    for path in spec.wait_for_files:
        wait_until(
            f"{path} (written by the preparation Job)",
            spec.timeout("files_s"),
            spec.poll_interval_s,
            lambda p=path: os.path.exists(p),
            "check the preparation Job's logs (kubectl logs job/<release>-prepare-...)",
        )
        log(f"preparation complete: {path}")


def config_refusal(spec: Spec) -> str:
    """Wait for the preparation Job's verdict on this very run (NeMo RL's own config code, in the
    image); NeMo RL's refusal with the values key to change, or "" to go on."""
    if not spec.config_verdict:
        return ""
    wait_until(
        f"{spec.config_verdict} (the run checked by its release in the image, by the preparation Job)",
        spec.timeout("files_s"),
        spec.poll_interval_s,
        lambda: os.path.exists(spec.config_verdict),
        "check the preparation Job's logs (kubectl logs job/<release>-prepare-...)",
    )
    verdict, problem = config_check.read_verdict(spec.config_verdict)
    if verdict is None or verdict.submission_id != spec.submission_id:
        log(f"{problem or 'the check verdict is for another run'}; going on without it")
        return ""
    if verdict.state == "refused":
        return verdict.message
    log(verdict.message)
    return ""


def release_unless_busy(spec: Spec, ledger: Ledger) -> None:
    """Release the GPU workers for a run that never starts, unless another run of this release
    still uses them (a changed run after `helm upgrade` while the previous one goes on)."""
    if spec.workers() is not None and head_healthy(spec.address) and (others := Runs(spec).others_active()):
        log(f"the GPU workers stay: {others[0].submission_id} of this release is still active")
        return
    release_workers(spec, ledger)


def wait_for_head(spec: Spec) -> None:
    wait_until(
        f"the Ray head at {spec.address}",
        spec.timeout("head_s"),
        spec.poll_interval_s,
        lambda: head_healthy(spec.address),
        "is the head pod Running? kubectl get pods -l ray.io/node-type=head",
    )
    log("Ray head is healthy")
    if why := version_mismatch(spec):
        raise LaunchFailed(why)


def wait_for_gpus(spec: Spec, ledger: Ledger | None = None) -> None:
    def enough() -> tuple[int, float] | None:
        nodes, gpus = cluster_gpus(spec.address, ledger)
        return (nodes, gpus) if gpus >= spec.expected_gpus else None

    try:
        nodes, gpus = wait_until(
            f"{spec.expected_gpus} GPUs in the Ray cluster",
            spec.timeout("gpus_s"),
            spec.poll_interval_s,
            enough,
            "GPU nodes may be unavailable (quota, Spot capacity, reservation) or the workers not Ready; a worker pod the "
            "API server refused (e.g. by the namespace's Pod Security level) shows as a FailedToCreateWorkerPod event: "
            "kubectl get events --field-selector reason=FailedToCreateWorkerPod",
        )
    except LaunchFailed as e:
        nodes, gpus = cluster_gpus(spec.address)
        raise GpusTimedOut(f"{e} (the cluster reports {gpus:g} GPUs on {nodes} nodes)") from None
    log(f"cluster ready: {gpus:g} GPUs on {nodes} nodes")


def settle_previous_runs(runs: Runs) -> None:
    others = runs.others_active()
    if not others:
        return
    ids = ", ".join(j.submission_id for j in others)
    if runs.spec.previous_runs == "stop":
        for j in others:
            log(f"stopping the previous run {j.submission_id} (previous_runs: stop)")
            runs.call(lambda j=j: runs.client.stop_job(j.submission_id))
    else:
        log(f"another run of this release is active ({ids}); waiting for it to end before submitting (previous_runs: wait)")
    wait_until(
        f"previous run(s) {ids} to end",
        runs.spec.timeout("previous_s"),
        runs.spec.poll_interval_s,
        lambda: not runs.others_active(),
        "stop it with `ray job stop` or set launcher.previousRuns: stop",
    )


def launch(spec: Spec) -> int:
    log(f"run {spec.submission_id}: {spec.entrypoint}")
    ledger = Ledger(sum(spec.gpu_release.get("groups", {}).values()) or max(0, spec.expected_nodes - 1), billed=not spec.rehearsal)
    progress = Progress(spec.max_num_steps)
    if refusal := config_refusal(spec):
        log(f"FAILED, nothing submitted: {refusal}")
        release_unless_busy(spec, ledger)
        return EXIT_FINAL
    wait_for_files(spec)
    record = read_outcome(spec)
    if record is not None and (first := decide(spec, record)).action == STOP:
        log(first.why)  # ended for good under an earlier launcher: no head, no GPUs needed
        return finish(spec, first, record, ledger, progress)
    try:
        resume_workers(spec)
        wait_for_head(spec)
        runs = Runs(spec)
        settle_previous_runs(runs)
        seen = current(runs, record)
        while True:
            if wants_progress(spec, seen):
                seen = replace(seen, newest_step=checkpoint_step(spec.checkpoint_dir, latest_step(spec.checkpoint_dir)))
            decision = decide(spec, seen)
            if decision.why:
                log(decision.why)
            if decision.action == STOP:
                return finish(spec, decision, seen, ledger, progress)
            seen = act(runs, seen, decision, ledger, progress)
    except GpusTimedOut as e:
        log(f"FAILED: {e}")
        release_workers(spec, ledger)  # the GPU workers that did come would idle until someone looked
        return EXIT_FINAL


def current(runs: Runs, record: Seen | None) -> Seen:
    """What the launcher sees at its start: the newest attempt the Ray head knows, or the outcome
    recorded on the volume when it is as new (a restarted head forgets its jobs)."""
    existing = runs.attempts()
    head = Seen(existing[-1][0], str(existing[-1][1].status)) if existing else Seen(0, "")
    if record is not None and record.attempt >= head.attempt:
        return record
    if head.status:
        log(f"found {attempt_id(runs.spec.submission_id, head.attempt)} ({head.status}); the same run spec is never submitted twice")
    return head


def act(runs: Runs, seen: Seen, decision: Decision, ledger: Ledger, progress: Progress) -> Seen:
    """Carry out a FOLLOW, WAIT_START or SUBMIT decision; what the launcher sees afterwards."""
    spec = runs.spec
    job_id = attempt_id(spec.submission_id, seen.attempt)
    if decision.action == FOLLOW:
        watch = GpuWatch(spec, ledger)
        progress.new_attempt()
        status = follow_logs(runs, job_id, watch.look, lambda line: saw_line(line, ledger, progress))
        if step := progress.flush():
            log(step)
        ledger.run_ended()
        log(f"{job_id} ended: {status}" + (f" (the cluster lost a GPU node meanwhile: {watch.lost})" if watch.lost else ""))
        log_end, epoch_end_step = progress.end()
        return replace(
            seen,
            status=status,
            started=False,
            stalled=decision.stalled,
            lost_gpu_node=bool(watch.lost),
            log_end=log_end,
            epoch_end_step=epoch_end_step,
        )
    if decision.action == WAIT_START:
        return replace(seen, status=wait_until_started(runs, job_id), started=True, stalled=decision.stalled)
    wait_for_gpus(spec, ledger)
    n = seen.attempt + 1
    step = latest_step(spec.checkpoint_dir) if spec.checkpoint_dir else None
    where = f"resumes from step_{step} in {spec.checkpoint_dir}" if step is not None else "starts from step 0"
    job_id = runs.submit(n)
    log(f"attempt {n} submitted as {job_id}; {where}")
    status = runs.status(job_id)
    at_submit = step_rank(checkpoint_step(spec.checkpoint_dir, step))
    return Seen(n, status if status in TERMINAL else "PENDING", stalled=decision.stalled, step_at_submit=at_submit)


def read_outcome(spec: Spec) -> Seen | None:
    """The outcome an earlier launcher recorded, as what the launcher sees (None: none recorded)."""
    if not spec.outcome_dir:
        return None
    outcome, problem = launcher_outcome.read(spec.outcome_dir, spec.submission_id)
    if problem:
        log(f"{problem}; going by the Ray head's record alone")
    if outcome is None:
        return None
    return Seen(outcome.attempt, outcome.ray_status, recorded=outcome.state, recorded_reason=outcome.reason)


def saw_line(line: str, ledger: Ledger, progress: Progress) -> None:
    """One line of the run's log: the ledger's first step; a progress line when a step is done."""
    ledger.saw_line(line)
    if step := progress.saw_line(line):
        log(step)


def finish(spec: Spec, decision: Decision, seen: Seen, ledger: Ledger, progress: Progress) -> int:
    """Record a final outcome and release the GPU workers; log the progress summary and the
    ledger; the exit status."""
    if decision.final:
        if not seen.recorded:
            record_outcome(spec, decision, seen)
        release_workers(spec, ledger)
    if summary := progress.summary(ledger.gpu_node_hours()):
        log(summary)
    if ledger.ended_at is not None:
        log(ledger.summary())
    return decision.exit_code


def record_outcome(spec: Spec, decision: Decision, seen: Seen) -> None:
    if not spec.outcome_dir:
        return
    step = checkpoint_step(spec.checkpoint_dir, latest_step(spec.checkpoint_dir)) if spec.checkpoint_dir else None
    job_id = attempt_id(spec.submission_id, seen.attempt)
    outcome = launcher_outcome.Outcome(
        spec.submission_id, decision.final, decision.reason, seen.attempt, job_id, seen.status, step, spec.max_restarts, decision.why
    )
    try:
        launcher_outcome.write(spec.outcome_dir, outcome)
    except OSError as e:
        where = spec.outcome_where()
        log(f"could not record the outcome in {where} ({e.strerror or e}): after a Ray head restart a new launcher may submit it again")
        return
    log(f"outcome recorded in {spec.outcome_where()}: {decision.final} ({decision.reason}); no launcher submits this run spec again")


def release_workers(spec: Spec, ledger: Ledger) -> None:
    workers = spec.workers()
    if spec.rehearsal:  # no GPU node exists: nothing stays billed (the rehearsal says what the values ask)
        return
    if workers is None:
        log("the GPU workers stay up (launcher.releaseGpus is false): their nodes are billed until `helm uninstall`")
        return
    waited = spec.timeout("release_s", RELEASE_WAIT_S)
    try:
        api = KubeApi(workers.service_account_dir)
        done, patched = launcher_workers.release(workers, api)
        log(done)
        if not patched:
            return
        took = launcher_workers.wait_released(workers, api, waited, spec.poll_interval_s)
    except KubeError as e:
        log(f"could not release the GPU workers ({e}); they stay billed until `helm uninstall`")
        return
    if took is None:
        log(f"KubeRay did not report the GPU workers gone within {waited:.0f}s; see `kubectl describe raycluster {workers.raycluster}`")
        return
    ledger.gpus_released()
    log(f"GPU workers gone {took:.0f}s after the patch; the cluster autoscaler removes their nodes once unneeded")


def resume_workers(spec: Spec) -> None:
    """Bring back GPU workers an earlier run released: this run may need them."""
    workers = spec.workers()
    if workers is None:
        return
    try:
        if note := launcher_workers.resume(workers, KubeApi(workers.service_account_dir)):
            log(note)
    except KubeError as e:
        log(f"could not check the RayCluster's GPU workers ({e}); if an earlier run released them, this one waits for GPUs in vain")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Launch or check the NeMo RL run of a nemo-rl-gke release.")
    parser.add_argument("spec", help="the JSON spec rendered by the chart")
    parser.add_argument("--check", action="store_true", help="check the cluster against the spec (helm test)")
    args = parser.parse_args(argv)
    try:
        spec = load_spec(args.spec)
        return check(spec) if args.check else launch(spec)
    except SpecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except LaunchFailed as e:
        log(f"FAILED: {e}")
        return EXIT_FINAL
    except KeyboardInterrupt:
        log("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
