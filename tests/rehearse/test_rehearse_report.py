"""The rehearsal's verdict on a preemption drill, from its outcome alone (no Ray needed)."""

from __future__ import annotations

from pathlib import Path

from generator.rehearse.checkpoints import snapshot
from generator.rehearse.drill import Drill
from generator.rehearse.report import Outcome, Output, report, report_drill


def drill_in(ckpt: Path, **changes) -> Drill:
    (ckpt / "step_2").mkdir(parents=True)
    (ckpt / "step_2" / "model.pt").write_text("weights")
    return Drill(cluster=None, checkpoint_dir=ckpt, say=print, pause_after_step=2, before=snapshot(ckpt), **changes)


def verdict(o: Outcome, drill: Drill) -> tuple[int, list[str]]:
    lines: list[str] = []
    return report_drill(Output(lines.append), o, drill), lines


def test_a_resumed_drill_passes_and_says_what_was_kept(tmp_path):
    drill = drill_in(tmp_path, victim="gpu-1")
    (tmp_path / "step_3").mkdir()
    (tmp_path / "step_3" / "model.pt").write_text("more")
    results = [{"node_lost": True}, {"ok": True, "resumed_from": 2, "attempt": "run-retry1"}]
    o = Outcome(0, ["attempt 2 submitted as run-retry1; resumes from step_2 in /c"], results, tmp_path, 1.0)
    rc, lines = verdict(o, drill)
    assert rc == 0
    assert lines[0] == "rehearse: drill: gpu-1 reclaimed after step_2; attempt 2 (run-retry1) resumed from step_2 and trained to step 3"
    assert lines[1].endswith("the 1 files of step_2 unchanged (sha256 and mtime); added: step_3")
    assert lines[2].startswith("rehearse: PASS: the preempted run was resubmitted")


def test_a_failed_drill_names_every_problem_in_order(tmp_path):
    drill = drill_in(tmp_path)
    (tmp_path / "step_2" / "model.pt").unlink()
    o = Outcome(3, [], [{"ok": False}], tmp_path, 1.0)
    rc, lines = verdict(o, drill)
    assert rc == 1
    assert lines == [
        "rehearse: FAIL: drill: no node was removed",
        "rehearse: FAIL: drill: the first attempt did not fail on the node loss",
        "rehearse: FAIL: drill: the launcher did not resubmit the run",
        "rehearse: FAIL: drill: the launcher exited 3",
        "rehearse: FAIL: drill: checkpoint files lost: ['step_2/model.pt']; changed: none",
    ]


def test_a_dead_local_ray_head_is_the_machines_failure_not_the_values(tmp_path):
    """Whatever the stand-in or the drill reported, a head that died says so, and to run again."""
    for results in ([], [{"ok": False, "error": "placement group timed out", "key": "cluster.num_nodes"}]):
        lines: list[str] = []
        o = Outcome(1, ["Ray head at http://127.0.0.1:1 unreachable"], results, tmp_path, 1.0, ("gcs_server",))
        assert report(Output(lines.append), o, None) == 1
        assert lines == [
            "rehearse: FAIL: the local Ray cluster failed, not the run: its head's gcs_server exited (launcher exit 1); "
            "your values are not at fault: run again (a machine short of memory ends Ray's processes)"
        ]
