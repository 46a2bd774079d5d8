"""What the rehearsal prints: its own lines (prefixed `rehearse:`), and the verdict from the
stand-in's results (one JSON line per attempt), the launcher's exit status and the drill."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from generator.rehearse.checkpoints import compare, snapshot
from generator.rehearse.drill import Drill

STAND_IN_STEPS = 3  # the checkpoints the stand-in writes: step_1..step_3


class Output:
    """Lines to stdout (or a test's callback), one at a time across threads."""

    def __init__(self, write: Callable[[str], None] | None = None) -> None:
        self._write = write or (lambda line: print(line, flush=True))
        self._lock = threading.Lock()

    def line(self, text: str) -> None:
        with self._lock:
            self._write(text)

    def note(self, text: str) -> None:
        self.line(f"rehearse: {text}")


@dataclass(frozen=True)
class Outcome:
    rc: int  # the launcher's exit status
    lines: list[str]  # its output, with the run's logs
    results: list[dict[str, Any]]  # one per attempt, from the stand-in
    checkpoint_dir: Path
    seconds: float
    head_failures: tuple[str, ...] = ()  # the local Ray head's processes that died (LocalCluster.head_failures)


def report(out: Output, o: Outcome, drill: Drill | None) -> int:
    last = o.results[-1] if o.results else None
    if o.head_failures:
        return report_local_ray(out, o)
    if last is not None and not last.get("ok") and not last.get("node_lost"):
        return report_failure(out, last)
    if drill is not None:
        return report_drill(out, o, drill)
    if last is None:
        tail = next((ln for ln in reversed(o.lines) if ln.strip()), "(no output)")
        out.note(f"FAIL: the stand-in did not report (launcher exit {o.rc}): {tail}")
        return 1
    if not last.get("ok") or o.rc != 0:
        out.note(f"FAIL: the run did not finish (launcher exit {o.rc}): {last.get('error', '')}")
        return 1
    out.note(f"PASS: every resource request was placed and the stand-in trained to step {STAND_IN_STEPS} ({o.seconds:.1f} s)")
    return 0


def report_local_ray(out: Output, o: Outcome) -> int:
    """The local Ray head died under the rehearsal: this machine's failure, not the values'."""
    out.note(
        f"FAIL: the local Ray cluster failed, not the run: its head's {', '.join(o.head_failures)} exited "
        f"(launcher exit {o.rc}); your values are not at fault: run again (a machine short of memory ends Ray's processes)"
    )
    return 1


def report_start_failure(out: Output, error: BaseException) -> int:
    """Ray could not start the local cluster: this machine's failure, not the values'."""
    first = next((ln.strip() for ln in str(error).splitlines() if ln.strip()), "")
    out.note(
        f"FAIL: the local Ray cluster did not start ({type(error).__name__}{': ' + first if first else ''}); "
        "your values are not at fault: run again when the machine is less busy"
    )
    return 1


def report_failure(out: Output, result: dict[str, Any]) -> int:
    out.note(f"FAIL: {result.get('error', '')}")
    if result.get("explanation"):
        out.note(f"why: {result['explanation']}")
    if result.get("key"):
        out.note(f"change {result['key']}: {result.get('hint', '')}")
    return 1


def report_drill(out: Output, o: Outcome, drill: Drill) -> int:
    lost, changed, added = compare(drill.before, snapshot(o.checkpoint_dir)) if drill.before else ([], [], [])
    problems = drill_problems(o, drill, lost, changed)
    for p in problems:
        out.note(f"FAIL: drill: {p}")
    if problems:
        return 1
    pause, results = drill.pause_after_step, o.results
    kept = sorted({p.split(os.sep)[0] for p in drill.before})
    new = sorted({p.split(os.sep)[0] for p in added})
    out.note(
        f"drill: {drill.victim} reclaimed after step_{pause}; attempt {len(results)} ({results[-1].get('attempt')}) "
        f"resumed from step_{pause} and trained to step {STAND_IN_STEPS}"
    )
    out.note(
        f"drill: checkpoint folder intact: the {len(drill.before)} files of {', '.join(kept)} unchanged (sha256 and mtime); "
        f"added: {', '.join(new) or 'nothing'}"
    )
    out.note(f"PASS: the preempted run was resubmitted and resumed from its checkpoint ({o.seconds:.1f} s)")
    return 0


def drill_problems(o: Outcome, drill: Drill, lost: list[str], changed: list[str]) -> list[str]:
    """What the preemption drill shows went wrong: the node removal, the attempts, the launcher's
    exit and the checkpoint files written before the reclaim (`lost`, `changed`); [] when nothing did."""
    problems = []
    if drill.error:
        problems.append(drill.error)
    elif not drill.victim:
        problems.append("no node was removed")
    problems += _attempt_problems(o, drill.pause_after_step)
    if o.rc != 0:
        problems.append(f"the launcher exited {o.rc}")
    if lost or changed:
        problems.append(f"checkpoint files lost: {lost or 'none'}; changed: {changed or 'none'}")
    return problems


def _attempt_problems(o: Outcome, pause: int) -> list[str]:
    """The first attempt must fail on the node loss, and a resubmitted one resume from step_<pause>."""
    results, problems = o.results, []
    if not results or not results[0].get("node_lost"):
        problems.append("the first attempt did not fail on the node loss")
    if len(results) < 2:
        problems.append("the launcher did not resubmit the run")
    elif not results[-1].get("ok") or results[-1].get("resumed_from") != pause:
        problems.append(f"the last attempt did not resume from step_{pause} and finish: {results[-1]}")
    if len(results) >= 2 and not any(f"resumes from step_{pause} in" in ln for ln in o.lines):
        problems.append(f"the launcher did not report the resume from step_{pause}")
    return problems
