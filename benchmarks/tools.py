"""Tool speed: the generator CLI, and `validate` and `render` next to bare `helm template`.

    .venv/bin/python benchmarks/tools.py [--repeat 7] [--suite]

Prints a markdown table (medians of wall and of CPU time, user + system of the process and its
children). Every command is timed as a whole process (what a user waits
for): `validate` (the schema, the rules, then a render by the pinned Helm and the object rules) and
`render` (Helm, then every object against kubernetes-validate for 7 Kubernetes versions, both
KubeRay CRD sets and the project's schemas) each next to a bare `helm template` of the same values,
interleaved in the same run so the ratio holds on a noisy machine; `render` of a 50 MB and of an
empty values file (both refused, under 2 s). --suite also times the whole test suite once.

Python's bytecode of generator/ is as scripts/bootstrap.sh leaves it (compiled once; every timed
process runs with PYTHONDONTWRITEBYTECODE=1, so none writes it). One more row times the generator
without it (every module compiled at each start, as where no __pycache__ can be written).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from generator.core.paths import CHART_DIR as CHART  # noqa: E402
from generator.helm.runner import default_helm  # noqa: E402

PY = sys.executable
TARGETS = {"generator": 0.3, "ratio": 3.0, "suite": 180.0, "refusal": 2.0}


def median_time(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def bytecode(root: Path, compiled: bool) -> None:
    """generator/'s bytecode cache of the checkout at `root`: compiled (as scripts/bootstrap.sh
    leaves it) or none at all."""
    for cache in (root / "generator").rglob("__pycache__"):
        shutil.rmtree(cache)
    if compiled:
        subprocess.run([PY, "-m", "compileall", "-q", str(root / "generator")], check=True, capture_output=True)


def cli(*args: str, cwd: Path, root: Path = ROOT) -> Callable[[], None]:
    """`python -m generator ARGS` of the checkout at `root` (this one unless --baseline), as a process."""
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}

    def run() -> None:
        subprocess.run([PY, "-m", "generator", *args], cwd=cwd, env=env, check=True, capture_output=True)

    return run


def refused(*args: str, cwd: Path) -> Callable[[], None]:
    """A CLI run that must be refused (exit 2)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}

    def run() -> None:
        proc = subprocess.run([PY, "-m", "generator", *args], cwd=cwd, env=env, check=False, capture_output=True)
        if proc.returncode != 2:
            raise SystemExit(f"expected a refusal (exit 2) of {' '.join(args)}; got {proc.returncode}")

    return run


def helm_process(helm: Path, values: Path) -> Callable[[], None]:
    """A bare `helm template` of the chart with one values file, as a process (no kube context)."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("HELM_")}, "KUBECONFIG": "/dev/null"}

    def run() -> None:
        subprocess.run([str(helm), "template", "nemo-rl", str(CHART), "-f", str(values)], env=env, check=True, capture_output=True)

    return run


def _children_cpu() -> float:
    """CPU seconds (user + system) of every finished child process so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def interleaved(fns: dict[str, Callable[[], None]], repeat: int) -> dict[str, tuple[float, float]]:
    """Median wall time and median CPU time (the process and its children, e.g. Helm) of each
    command, run in turn (a, b, c, a, b, c...) so load spikes hit all alike. CPU time is what a
    loaded machine changes least."""
    walls: dict[str, list[float]] = {k: [] for k in fns}
    cpus: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            c, t = _children_cpu(), time.perf_counter()
            fn()
            walls[name].append(time.perf_counter() - t)
            cpus[name].append(_children_cpu() - c)
    return {k: (statistics.median(walls[k]), statistics.median(cpus[k])) for k in fns}


def wall_cpu(times: tuple[float, float]) -> str:
    """An `interleaved` median pair as the table shows it."""
    return f"{times[0] * 1000:.0f} ms wall, {times[1] * 1000:.0f} ms CPU"


def groups(total: int, n: int) -> str:
    sizes = [total // n + (1 if i < total % n else 0) for i in range(n)]
    return ",".join(f"g{i}={s}" for i, s in enumerate(sizes))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--suite", action="store_true", help="also time scripts/test.sh once")
    p.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="another checkout (e.g. a worktree of main) whose generator, validate and render run interleaved with this one's",
    )
    args = p.parse_args()
    base: Path | None = args.baseline.resolve() if args.baseline else None
    rows: list[tuple[str, str, str, str]] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        roots = [ROOT] if base is None else [ROOT, base]
        for root in roots:
            bytecode(root, compiled=False)
        gen_cmds = {"gen": cli("--gpu", "h200", "-o", str(tmp / "v.yaml"), "--force", cwd=tmp)}
        if base is not None:
            gen_cmds["base"] = cli("--gpu", "h200", "-o", str(tmp / "v-base.yaml"), "--force", cwd=tmp, root=base)
        cold_times = interleaved(gen_cmds, args.repeat)  # the same commands, before and after compiling
        for root in roots:
            bytecode(root, compiled=True)
        gen_times = interleaved(gen_cmds, args.repeat)
        gen = gen_times["gen"][0]
        if base is not None:
            rows.append(("baseline: `python -m generator --gpu h200`", wall_cpu(gen_times["base"]), "", ""))
        started = "`python -m generator --gpu h200` (process start to file written)"
        rows.append((started, wall_cpu(gen_times["gen"]), "< 300 ms", ok(gen, "generator")))
        if base is not None:
            rows.append(("baseline: the same without bytecode", wall_cpu(cold_times["base"]), "", ""))
        rows.append(("the same without generator/'s bytecode (compiled at each start)", wall_cpu(cold_times["gen"]), "", ""))
        huge, empty = tmp / "huge.yaml", tmp / "empty.yaml"
        huge.write_text("a: " + "x" * (50 << 20) + "\n")
        empty.write_text("")
        for label, bad in (("a 50 MB values file", huge), ("an empty values file", empty)):
            took = median_time(refused("render", str(bad), "--out", str(tmp / "refused"), cwd=tmp), args.repeat)
            rows.append((f"`python -m generator render` refusing {label}", f"{took * 1000:.0f} ms", "< 2 s", ok(took, "refusal")))
        seed = ROOT / "examples" / "tutorial-h200.yaml"
        helm = default_helm()
        out = tmp / "out"
        cases = [("the tutorial's run", seed)]
        for nodes, n_groups in ((1, 1), (8, 1), (64, 7)):
            values = tmp / f"v-{nodes}-{n_groups}.yaml"
            extra = ["--groups", groups(nodes, n_groups)] if n_groups > 1 else ["--nodes", str(nodes)]
            cli("--gpu", "h200", *extra, "-o", str(values), cwd=tmp)()
            cases.append((f"{nodes} node(s), {n_groups} group(s)", values))
        for label, values in cases:
            bare = helm_process(helm.path, values)
            cmds = {
                "helm": bare,
                "validate": cli("validate", str(values), cwd=tmp),
                "render": cli("render", str(values), "--out", str(out), cwd=tmp),
            }
            if base is not None:
                cmds["baseline: validate"] = cli("validate", str(values), cwd=tmp, root=base)
                cmds["baseline: render"] = cli("render", str(values), "--out", str(tmp / "out-base"), cwd=tmp, root=base)
            times = interleaved(cmds, args.repeat)
            (hw, hc) = times["helm"]
            for name in [n for n in cmds if n != "helm"]:
                (w, c) = times[name]
                rows.append(
                    (
                        f"{'baseline: ' if name.startswith('baseline') else ''}`python -m generator {name.split(': ')[-1]}`, {label}",
                        f"{w * 1000:.0f} ms wall (x{w / hw:.2f}), {c * 1000:.0f} ms CPU (x{c / hc:.2f}); "
                        f"bare `helm template` {hw * 1000:.0f} ms wall, {hc * 1000:.0f} ms CPU",
                        "<= 3x helm",
                        ok(max(w / hw, c / hc), "ratio"),
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
