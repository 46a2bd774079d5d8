"""What the test bed costs: a cold build (empty Go module and build caches, as on a fresh CI
machine), a warm build (the caches full, every binary relinked), a build with nothing to do, and
a start of the whole test bed (etcd, two clusters, operators, simulated nodes) to ready, and its
stop. Peak memory of the test bed's processes while it runs.

    .venv/bin/python benchmarks/testbed.py            # every measure (the cold build takes ~20 min)
    .venv/bin/python benchmarks/testbed.py --no-cold  # warm build, no-op build, start

The cold build uses throwaway caches and output folders, so the project's own are untouched;
it needs the Go module proxy.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testbed import bed, build, components
from testbed.processes import Supervisor


def _rss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def _timed_build(bin_dir: Path) -> tuple[float, list[build.Built]]:
    components.BIN_DIR = bin_dir
    start = time.monotonic()
    built = build.build(log=lambda line: print(f"    {line}", flush=True))
    return time.monotonic() - start, built


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--no-cold", action="store_true", help="skip the cold build (about 20 minutes on two cores)")
    args = p.parse_args()
    rows: list[tuple[str, str]] = []
    original_bin = components.BIN_DIR
    if not args.no_cold:
        with tempfile.TemporaryDirectory(prefix="testbed-cold-") as tmp:
            os.environ["GOCACHE"] = str(Path(tmp) / "gocache")
            os.environ["GOMODCACHE"] = str(Path(tmp) / "gomod")
            os.environ["GOFLAGS"] = "-modcacherw"  # so the throwaway module cache can be deleted
            print("cold build (empty Go caches, throwaway output):", flush=True)
            took, built = _timed_build(Path(tmp) / "bin")
            rows.append(("cold build, every component", f"{took / 60:.1f} min"))
            rows += [(f"    {b.component.folder} {b.component.version}", f"{b.seconds:.0f} s") for b in built]
            for var in ("GOCACHE", "GOMODCACHE", "GOFLAGS"):
                os.environ.pop(var, None)
            shutil.rmtree(tmp, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="testbed-warm-") as tmp:
        print("warm build (Go caches full, every binary relinked):", flush=True)
        took, _ = _timed_build(Path(tmp) / "bin")
        rows.append(("warm build (relink every binary)", f"{took:.0f} s"))
    took, _ = _timed_build(original_bin)
    took, _ = _timed_build(original_bin)
    rows.append(("build with nothing to do", f"{took:.1f} s"))
    with tempfile.TemporaryDirectory(prefix="testbed-start-") as tmp:
        state = Path(tmp)
        start = time.monotonic()
        t = bed.up(state, log=lambda _line: None)
        started = time.monotonic() - start
        pids = [r.pid for r in Supervisor(state).records()]
        rss = _rss_mib(pids)
        start = time.monotonic()
        bed.down(state)
        stopped = time.monotonic() - start
    rows.append(("start to ready (etcd, 2 clusters, operators, nodes)", f"{started:.1f} s"))
    rows += [(f"    {k}", f"{v:.1f} s") for k, v in t.timings.items() if k != "build"]
    rows.append(("memory of the running test bed (RSS, 13 processes)", f"{rss:.0f} MiB"))
    rows.append(("stop and delete", f"{stopped:.1f} s"))
    print(
        f"\n{os.cpu_count()} CPUs, {platform.python_implementation()} {platform.python_version()}, load average {os.getloadavg()[0]:.1f}\n"
    )
    print("| Measure | Result |\n|---|---:|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
