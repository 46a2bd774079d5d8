"""Wall time and peak memory of `python -m generator rehearse` for 2, 4, 8 and 16 GPU nodes.

    .venv/bin/python benchmarks/rehearse.py [--nodes 2 4 8 16] [--drill]

Each size is the tutorial's run (Gemma 3 27B, H200, colocated as the generator's default) with --nodes N,
rehearsed end to end by the CLI in a subprocess. Memory is sampled every 0.5 s over the CLI and
every process of its rehearsal (they carry NEMO_RL_GKE_REHEARSAL=<tag> in their environment):
PSS (shared pages split between the processes that map them: what the machine really spends) and
the plain RSS sum (counts shared pages once per process). Prints a markdown table. Not part of
the test suite.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from generator.rehearse.cluster import TAG_ENV, tagged_pids  # noqa: E402
from generator.values.build import Options, build  # noqa: E402


def _kib(path: str, field: str) -> int:
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def memory_kib(pids: list[int]) -> tuple[int, int]:
    """(PSS, RSS) summed over the processes, in KiB."""
    pss = sum(_kib(f"/proc/{p}/smaps_rollup", "Pss:") for p in pids)
    rss = sum(_kib(f"/proc/{p}/status", "VmRSS:") for p in pids)
    return pss, rss


@dataclass(frozen=True)
class Row:
    nodes: int
    seconds: float
    cluster_up: str  # as the CLI printed it
    pss_gib: float
    rss_gib: float
    result: str
    left: int  # processes of the rehearsal still running after it exited


def run(nodes: int, drill: bool, workdir: Path) -> Row:
    values = workdir / f"values-{nodes}.yaml"
    values.write_text(yaml.safe_dump(build(Options(gpu="h200", nodes=nodes)), sort_keys=False))
    tag = f"rh-bench-{uuid.uuid4().hex[:8]}"
    cmd = [sys.executable, "-m", "generator", "rehearse", str(values), "--max-nodes", str(max(nodes, 16))]
    if drill:
        cmd += ["--drill", "preempt"]
    peak = {"pss": 0, "rss": 0}
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, TAG_ENV: tag}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            pss, rss = memory_kib([proc.pid, *tagged_pids(tag)])
            peak["pss"], peak["rss"] = max(peak["pss"], pss), max(peak["rss"], rss)
            done.wait(0.5)  # sampling costs CPU too: not too often on 2 cores

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = proc.communicate()
    seconds = time.monotonic() - started
    done.set()
    sampler.join()
    up = next((ln.split(" up in ")[1].split(" s")[0] for ln in out.splitlines() if " Ray nodes up in " in ln), "?")
    ends = ("rehearse: PASS", "rehearse: FAIL")
    verdicts = [ln.removeprefix("rehearse: ").split(":")[0] for ln in out.splitlines() if ln.startswith(ends)]
    verdict = verdicts[-1] if verdicts else "?"
    result = f"{verdict} (exit {proc.returncode})"
    return Row(nodes, seconds, up, peak["pss"] / 2**20, peak["rss"] / 2**20, result, len(tagged_pids(tag)))


def summary(runs: list[Row]) -> Row:
    """The median run's times with the highest memory peaks of all runs."""
    middle = sorted(runs, key=lambda r: r.seconds)[len(runs) // 2]
    return replace(
        middle,
        pss_gib=max(r.pss_gib for r in runs),
        rss_gib=max(r.rss_gib for r in runs),
        left=max(r.left for r in runs),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--drill", action="store_true", help="rehearse with --drill preempt")
    parser.add_argument("--repeat", type=int, default=1, help="runs per size: the median wall time and the highest peaks are shown")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="rh-bench-") as tmp:
        for n in args.nodes:
            runs = []
            for _ in range(max(1, args.repeat)):
                r = run(n, args.drill, Path(tmp))
                print(f"# {n} nodes: {r.seconds:.1f} s, peak PSS {r.pss_gib:.2f} GiB, {r.result}", file=sys.stderr, flush=True)
                runs.append(r)
            rows.append(summary(runs))
    cpus = os.cpu_count()
    mem = _kib("/proc/meminfo", "MemTotal:") / 2**20
    how = f"median of {args.repeat} runs, highest peaks" if args.repeat > 1 else "one run each"
    print(f"rehearse{' --drill preempt' if args.drill else ''} on {cpus} CPUs, {mem:.0f} GiB RAM ({how}; Ray nodes = GPU nodes + head)\n")
    print("| GPU nodes | Ray nodes | wall time | cluster start | peak memory (PSS) | peak RSS sum | result | processes left |")
    print("|---:|---:|---:|---:|---:|---:|---|---:|")
    for r in rows:
        print(
            f"| {r.nodes} | {r.nodes + 1} | {r.seconds:.1f} s | {r.cluster_up} s | {r.pss_gib:.2f} GiB "
            f"| {r.rss_gib:.2f} GiB | {r.result} | {r.left} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
