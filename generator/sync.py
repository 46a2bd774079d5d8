"""Regenerate (or, with --check, verify) every derived file from its one source.

    python -m generator.sync [--check]

- charts/nemo-rl-gke/values.schema.json  <- schemas/values.schema.json
- charts/nemo-rl-gke/values.yaml         <- python -m generator --gpu h200 (the chart's defaults)
- charts/nemo-rl-gke/ci/b200-values.yaml <- python -m generator --gpu b200
- charts/nemo-rl-gke/ci/*-autopilot-values.yaml <- python -m generator --gpu X --mode autopilot
- charts/nemo-rl-gke/README.md table     <- schema descriptions + chart defaults
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

from .docs import replace_table, values_table
from .generate import render_text
from .schema import CHART_DIR, SCHEMA_PATH
from .values_builder import Options


def _chart_values() -> str:
    return render_text(Options(gpu="h200"), ["--gpu", "h200"])


def _generated(gpu: str, mode: str = "standard") -> Callable[[], str]:
    argv = ["--gpu", gpu] + (["--mode", mode] if mode != "standard" else [])
    return lambda: render_text(Options(gpu=gpu, mode=mode), argv)


def _readme() -> str:
    readme = (CHART_DIR / "README.md").read_text(encoding="utf-8")
    defaults = yaml.safe_load(_chart_values())
    return replace_table(readme, values_table(defaults))


TARGETS: dict[Path, Callable[[], str]] = {
    CHART_DIR / "values.schema.json": lambda: SCHEMA_PATH.read_text(encoding="utf-8"),
    CHART_DIR / "values.yaml": _chart_values,
    CHART_DIR / "ci" / "b200-values.yaml": _generated("b200"),
    CHART_DIR / "ci" / "b200-autopilot-values.yaml": _generated("b200", "autopilot"),
    CHART_DIR / "ci" / "h200-autopilot-values.yaml": _generated("h200", "autopilot"),
    CHART_DIR / "README.md": _readme,
}


def drifted() -> list[Path]:
    out = []
    for path, make in TARGETS.items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current != make():
            out.append(path)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m generator.sync", description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 when a derived file differs from its source")
    args = p.parse_args(argv)
    root = CHART_DIR.parent.parent
    if args.check:
        stale = drifted()
        for path in stale:
            print(f"{path.relative_to(root)}: out of date; run scripts/sync.sh", file=sys.stderr)
        return 1 if stale else 0
    for path, make in TARGETS.items():
        text = make()
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"{path.relative_to(root)}: updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
