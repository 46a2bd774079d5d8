"""Tool speed: the generator CLI, validate, and render + full output validation vs bare Helm.

    .venv/bin/python benchmarks/tools.py [--repeat 7] [--suite]

Prints a markdown table (medians). Whole-process timings for the CLIs (what a user waits for);
render timings in one process, bare `helm template` next to render + validation of every object
(kubernetes-validate for 7 Kubernetes versions, both KubeRay CRD sets, the project's schemas) in the
same run, so the ratio holds on a noisy machine. --suite also times the whole test suite once.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from generator.render.helm import default_helm  # noqa: E402
from generator.render.manifests import parse_documents, validate_documents  # noqa: E402

PY = sys.executable
TARGETS = {"generator": 0.5, "validate": 0.5, "ratio": 3.0, "suite": 180.0}


def median_time(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def cli(*args: str, cwd: Path) -> Callable[[], None]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def run() -> None:
        subprocess.run([PY, "-m", "generator", *args], cwd=cwd, env=env, check=True, capture_output=True)

    return run


def groups(total: int, n: int) -> str:
    sizes = [total // n + (1 if i < total % n else 0) for i in range(n)]
    return ",".join(f"g{i}={s}" for i, s in enumerate(sizes))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--suite", action="store_true", help="also time scripts/test.sh once")
    args = p.parse_args()
    rows: list[tuple[str, str, str, str]] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        gen = median_time(cli("--gpu", "h200", "-o", str(tmp / "v.yaml"), "--force", cwd=tmp), args.repeat)
        rows.append(
            ("`python -m generator --gpu h200` (process start to file written)", f"{gen * 1000:.0f} ms", "< 500 ms", ok(gen, "generator"))
        )
        big = tmp / "big.yaml"
        cli("--gpu", "h200", "--groups", groups(64, 7), "-o", str(big), cwd=tmp)()
        seed = ROOT / "examples" / "tutorial-h200.yaml"
        for label, path in (("the tutorial's run (examples/tutorial-h200.yaml)", seed), ("64 nodes in 7 worker groups", big)):
            t = median_time(cli("validate", str(path), cwd=tmp), args.repeat)
            rows.append((f"`python -m generator validate`, {label}", f"{t * 1000:.0f} ms", "< 500 ms", ok(t, "validate")))

        helm = default_helm()
        validate_documents(parse_documents(helm.template()))  # load and compile the schemas once
        for nodes, n_groups in ((1, 1), (2, 1), (8, 1), (64, 1), (64, 3), (64, 7)):
            values = tmp / f"v-{nodes}-{n_groups}.yaml"
            extra = ["--groups", groups(nodes, n_groups)] if n_groups > 1 else ["--nodes", str(nodes)]
            cli("--gpu", "h200", *extra, "-o", str(values), cwd=tmp)()
            bare = median_time(lambda v=values: helm.template([v]), args.repeat)
            full = median_time(lambda v=values: validate_documents(parse_documents(helm.template([v]))), args.repeat)
            rows.append(
                (
                    f"render + full validation, {nodes} node(s), {n_groups} group(s)",
                    f"{full * 1000:.0f} ms (helm alone {bare * 1000:.0f} ms, x{full / bare:.2f})",
                    "<= 3x helm",
                    ok(full / bare, "ratio"),
                )
            )
    if args.suite:
        t = time.perf_counter()
        subprocess.run([str(ROOT / "scripts" / "test.sh"), "-q"], cwd=ROOT, check=True, capture_output=True)
        suite = time.perf_counter() - t
        rows.append(("whole test suite (`scripts/test.sh`)", f"{suite:.0f} s", "< 180 s", ok(suite, "suite")))
    print(f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}, medians of {args.repeat}\n")
    print("| Measure | Result | Target | Met |\n|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    return 0


def ok(value: float, target: str) -> str:
    return "yes" if value <= TARGETS[target] else "no"


if __name__ == "__main__":
    sys.exit(main())
