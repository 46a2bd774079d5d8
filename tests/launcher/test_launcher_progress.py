"""The progress parser (charts/nemo-rl-gke/files/launcher_progress.py) on NeMo RL's own log formats,
release by release (nemo_rl_logs.py says which print call each line comes from)."""

from __future__ import annotations

import pytest
from conftest import load_chart_program
from nemo_rl_logs import PATHS, Figures, run_log, step_block

progress_mod = load_chart_program("launcher_progress")
ledger_mod = load_chart_program("launcher_ledger")

FIGURES = [Figures(0.0312, 95.21, 3365.28), Figures(0.2500, 90.00, 3500.00), Figures(0.6734, 85.00, 3600.00)]
CASES = [(release, path) for release, paths in PATHS.items() for path in paths]


def feed(progress, lines: list[str]) -> list[str]:
    out = [p for line in lines if (p := progress.saw_line(line))]
    if tail := progress.flush():
        out.append(tail)
    return out


@pytest.mark.parametrize(("release", "path"), CASES, ids=[f"{r}-{p}" for r, p in CASES])
def test_one_line_per_step_in_each_release_format(release, path):
    progress = progress_mod.Progress(max_steps=300)
    lines = feed(progress, run_log(path, 300, FIGURES))
    assert lines == [
        "step 1/300: mean reward 0.0312, step time 95.2 s, 3365 tokens/s (210 per GPU), about 7 h 54 min left",
        "step 2/300: mean reward 0.2500, step time 90.0 s, 3500 tokens/s (219 per GPU), about 7 h 40 min left",
        "step 3/300: mean reward 0.6734, step time 85.0 s, 3600 tokens/s (225 per GPU), about 7 h 26 min left",
    ]
    assert progress.summary(12.5) == (
        "progress: 3 step(s) logged, the last step 3 of 300; mean reward 0.0312 at step 1, 0.6734 at step 3; "
        "mean step time 90.1 s; 12.50 GPU-node-hours from the GPU workers ready to the end of the run"
    )


@pytest.mark.parametrize("release", list(PATHS))
def test_grpo_train_numbers_steps_within_the_epoch_and_the_run_step_is_counted_across_epochs(release):
    # grpo_train prints current_step + 1 out of min(len(dataloader), max_num_steps): with a
    # 2-step dataloader and 5 steps, epoch 2 starts again at "Step 1/2".
    figures = [Figures(0.1 * i, 10.0, 1000.0) for i in range(1, 6)]
    log = run_log("grpo_train", 5, figures, dataloader_len=2)
    assert [line for line in log if "Step " in line][2] == f"{'=' * 25} Step 1/2 {'=' * 25}"
    progress = progress_mod.Progress(max_steps=5)
    assert [line.split(":")[0] for line in feed(progress, log)] == [f"step {i}/5" for i in range(1, 6)]
    # Without grpo.max_num_steps (0: unknown) the header is all there is.
    assert feed(progress_mod.Progress(), log)[2].startswith("step 1/2: ")


def test_dynamic_sampling_reports_the_mean_over_every_sample():
    # grpo_train with grpo.use_dynamic_sampling prints "Avg Filtered Reward" then "Avg Total Reward".
    progress = progress_mod.Progress(max_steps=10)
    lines = feed(progress, step_block((1, 10), Figures(0.25, 10.0, 1000.0), dynamic_sampling=True))
    assert lines[0].startswith("step 1/10: mean reward 0.2500, ")


def test_a_step_cut_short_is_reported_with_what_it_logged():
    progress = progress_mod.Progress(max_steps=10)
    block = step_block((1, 10), Figures(0.5, 12.0, 1000.0))
    cut = block[: block.index("🔍 Performance Metrics:")]  # the run failed in print_performance_metrics
    assert feed(progress, cut) == ["step 1/10: mean reward 0.5000, step time 12.0 s, about 2 min left"]


def test_lines_of_other_processes_and_odd_values_are_ignored_or_read():
    progress = progress_mod.Progress(max_steps=2)
    lines = [
        f"(VllmGenerationWorker pid=123) {'=' * 25} Step 9/9 {'=' * 25}",  # a Ray actor's prefixed output
        f"{'=' * 25} Step 1/2 {'=' * 25}",
        "  • Avg Reward: nan",
        "  • Total step time: 1.50s",
    ]
    out = feed(progress, lines)
    assert out == ["step 1/2: mean reward nan, step time 1.5 s, about 2 s left"]
    summary = "progress: 1 step(s) logged, the last step 1 of 2; mean reward nan at step 1, nan at step 1; mean step time 1.5 s"
    assert progress.summary() == summary


def test_no_step_no_summary():
    progress = progress_mod.Progress(max_steps=2)
    assert feed(progress, ["▶ Setting up compute cluster...", "SETUP COMPLETE"]) == []
    assert progress.summary() is None
    assert progress.as_dict()["step"] is None


def test_the_ledger_reads_the_first_step_with_the_same_parser():
    ledger = ledger_mod.Ledger(2)
    ledger.saw_line("  • Avg Reward: 0.1")
    assert ledger.first_step_at is None
    ledger.saw_line(f"{'=' * 25} Step 1/300 {'=' * 25}")
    assert ledger.first_step_at is not None
    assert ledger_mod.step_header.__module__ == "launcher_progress"  # one home for the header's format


def test_the_ledger_says_nodes_stay_billed_only_on_a_cluster():
    """The rehearsal runs the launcher with no GPU node (spec rehearsal: true): no billing line."""
    for billed, tail in ((True, "; the GPU workers were not released: their nodes stay billed until `helm uninstall`"), (False, "")):
        ledger = ledger_mod.Ledger(2, billed=billed)
        ledger.run_ended()
        assert ledger.summary().endswith("end of run to GPU workers gone: not seen" + tail)


# How grpo_train ended, from its log (grpo.py v0.5.0-v0.7.0): the deadline and max-steps lines, or
# none when the epoch loop ran out; (end, epochs, figures logged, what `end()` answers).
ENDINGS = [
    ("max-steps", 0, 3, ("max-steps", None)),
    ("deadline", 0, 2, ("deadline", None)),
    ("epochs-ended", 2, 4, ("epochs-ended", 4)),  # 2 epochs of 2 steps, 20 asked
    ("deadline", 2, 3, ("deadline", 4)),  # stopped inside the last epoch: the epoch end is still known
]


@pytest.mark.parametrize(("end", "epochs", "logged", "answer"), ENDINGS)
def test_how_an_attempt_ended(end, epochs, logged, answer):
    progress = progress_mod.Progress(max_steps=20 if epochs else 3)
    figures = (FIGURES * 2)[:logged]
    feed(progress, run_log("grpo_train", 20 if epochs else 3, figures, dataloader_len=2 if epochs else 0, end=end, epochs=epochs))
    assert progress.end() == answer


def test_a_new_attempt_forgets_the_last_ones_end():
    progress = progress_mod.Progress(max_steps=20)
    feed(progress, run_log("grpo_train", 20, FIGURES[:1], dataloader_len=2, end="deadline", epochs=2))
    progress.new_attempt()
    assert progress.end() == ("", None)
    # A resumed attempt with its data spent: the last epoch's header, no step, no line.
    feed(progress, ["", "=" * 25 + " Epoch 2/2 " + "=" * 25])
    assert progress.end() == ("epochs-ended", None)


def test_async_grpo_says_nothing_of_epochs():
    progress = progress_mod.Progress(max_steps=300)
    feed(progress, run_log("async_grpo_train", 300, FIGURES, end="epochs-ended"))
    assert progress.end() == ("", None)
