"""The chart's programs stay small enough to read: the launcher's flow under 600 lines, and no
program in radon's C band of the maintainability index (below 10), where a file is too long and
tangled to change safely."""

from __future__ import annotations

from radon.metrics import mi_rank, mi_visit

from generator.core.paths import CHART_DIR

PROGRAMS = sorted((CHART_DIR / "files").glob("*.py"))


def test_the_launcher_is_its_flow_only():
    assert len((CHART_DIR / "files" / "launcher.py").read_text().splitlines()) < 600


def test_no_chart_program_is_in_radons_c_band():
    ranks = {p.name: mi_rank(mi_visit(p.read_text(), multi=True)) for p in PROGRAMS}
    assert len(ranks) >= 10
    assert [name for name, rank in ranks.items() if rank == "C"] == []
