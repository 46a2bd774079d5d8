"""How long each lane of the test suite takes, as `scripts/test.sh` runs it (lint, checksums and
import layers included), one after the other on this machine, and the whole suite (the test bed
already built: its cold build is benchmarks/testbed.py's).

    .venv/bin/python benchmarks/suite.py                # every lane
    .venv/bin/python benchmarks/suite.py --lane fast    # one

Targets (issue 24): the fast lane under 2 minutes, the whole suite under 10 minutes on two cores.
They are measured here, never asserted by a timed test.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LANES = {"fast": "--fast", "ray": "--ray", "cluster": "--cluster"}
TARGETS = {"fast": 120.0, "all": 600.0}


def run(lane_flag: str) -> tuple[float, str]:
    start = time.monotonic()
    proc = subprocess.run([str(ROOT / "scripts" / "test.sh"), lane_flag, "-q"], cwd=ROOT, capture_output=True, text=True, check=False)
    took = time.monotonic() - start
    tail = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
    return took, tail if proc.returncode == 0 else f"FAILED ({proc.returncode}): {tail}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lane", choices=[*LANES, "all"], default="all")
    args = p.parse_args()
    lanes = list(LANES) if args.lane == "all" else [args.lane]
    rows = []
    total = 0.0
    for lane in lanes:
        took, summary = run(LANES[lane])
        total += took
        rows.append((lane, took, summary))
        print(f"{lane}: {took:.0f} s ({summary})", flush=True)
    print(f"\n{os.cpu_count()} CPUs, load average at the end {os.getloadavg()[0]:.1f}\n")
    print("| Lane | Time | Target | Result |\n|---|---:|---:|---|")
    for lane, took, summary in rows:
        target = TARGETS.get(lane)
        print(f"| {lane} | {took / 60:.1f} min | {f'< {target / 60:.0f} min' if target else '-'} | {summary} |")
    if args.lane == "all":
        print(f"| all, one after the other | {total / 60:.1f} min | < {TARGETS['all'] / 60:.0f} min | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
