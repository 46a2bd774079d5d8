"""What the validate tests share: the corpora under tests/validate/data/ and the CLI as a process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INVALID = sorted((ROOT / "tests" / "validate" / "data" / "invalid").glob("*.yaml"))
LEGITIMATE = sorted((ROOT / "tests" / "validate" / "data" / "valid").glob("*.yaml"))


def header(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if not line.startswith("# "):
            break
        key, _, value = line[2:].partition(": ")
        out[key] = value
    return out


def run_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "generator", *args], cwd=cwd, capture_output=True, text=True, env=env, check=False)


SCHEMA_LEVEL = [p for p in INVALID if header(p)["schema"] == "true"]
