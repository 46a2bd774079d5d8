"""The README's table of GPU-node-hours billed without training is what the model prints
(benchmarks/gpu_idle.py), and the model reads the examples as they are."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _model():
    spec = importlib.util.spec_from_file_location("gpu_idle", ROOT / "benchmarks" / "gpu_idle.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_readme_shows_the_models_table():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    between = readme.split("<!-- gpu-idle:begin -->\n", 1)[1].split("<!-- gpu-idle:end -->", 1)[0]
    assert between == _model().table(), "README's GPU-idle table is stale: run .venv/bin/python benchmarks/gpu_idle.py"


def test_reserved_nodes_are_counted_apart_and_released_nodes_cost_less_after():
    model = _model()
    scale_out = model.example("scale-out")
    assert (scale_out.released, scale_out.reserved) == (4, 4)
    for run in model.RUNS:
        ex = model.example(run)
        before, after = model.node_hours("before", ex.released), model.node_hours("after", ex.released)
        assert after["before install"] == 0 < before["before install"]
        assert sum(after.values()) < sum(before.values())


def test_the_readme_shows_the_layouts_table_for_the_tutorials_run():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    between = readme.split("<!-- layouts:begin -->\n", 1)[1].split("<!-- layouts:end -->", 1)[0]
    assert between == _model().layouts_table(), "README's layouts table is stale: run .venv/bin/python benchmarks/gpu_idle.py"
    assert _model().tutorial_run() == (2, 300)  # read from examples/tutorial-h200.yaml


def test_the_seeds_split_idles_half_colocated_wins_while_the_switch_is_short_async_overlaps():
    model = _model()
    for gen in (0.1, 0.3, 0.5, 0.7, 0.9):
        split, colocated, overlapped = model.layouts(2, gen, work=4, switch=0.5)
        assert abs(split.idle - 0.5) < 1e-9  # one node waits while the other phase runs
        assert overlapped.step_minutes <= split.step_minutes and overlapped.idle < split.idle
        assert colocated.step_minutes < split.step_minutes
    overlapped = model.layouts(2, 0.5, work=4, switch=0.5)[2]
    assert overlapped.idle == 0 and overlapped.step_minutes == 2
    # Colocated costs more than the seed's split once the per-step switch passes W / N (here 2 min).
    assert model.layouts(2, 0.5, work=4, switch=2.5)[1].step_minutes > model.layouts(2, 0.5, work=4, switch=2.5)[0].step_minutes
    assert model.layouts(2, 0.5, work=4, switch=1.9)[1].step_minutes < 4
