"""How long the in-image check (charts/nemo-rl-gke/files/config_check.py) takes here, per release.

    .venv/bin/python benchmarks/config_check.py [--runs 5]

For each release the repository carries, the generated values (the tutorial's run) are rendered
with the pinned Helm, and the preparation Job's check runs on the rendered command as prepare.py
runs it (a new process of this Python), against the tests' stand-in `nemo_rl`
(tests/launcher/nemo_rl_stand_in.py) and the carried recipes. What it measures: process start,
the imports of hydra-core, omegaconf and (v0.7.0) pydantic, the recipe merge, the overrides, the
resolve and the MasterConfig. What it does not: the image's entry script imports torch, ray,
transformers, vLLM's and NeMo RL's modules first, which takes longer on a CPU node. Prints a
markdown table. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "launcher")]

import nemo_rl_stand_in  # noqa: E402

from generator.helm import runner as helm_mod  # noqa: E402
from generator.render.chart_programs import load  # noqa: E402
from generator.render.manifests import parse_documents  # noqa: E402
from generator.values.build import Options, build  # noqa: E402

RELEASES = ("v0.5.0", "v0.6.0", "v0.7.0")


def rendered_check(tmp: Path, release: str) -> str:
    """The command the launcher would submit, as the chart renders it, run from a stand-in folder."""
    code = nemo_rl_stand_in.write(tmp / release, release, configs_from=release)
    values = build(Options(gpu="h200", release=release))
    values["grpo"]["codeDir"] = str(code)
    path = tmp / f"{release}.yaml"
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    objs = parse_documents(helm_mod.pinned(helm_mod.PINS[0]).template([path]))
    cm = next(o for o in objs if o.get("kind") == "ConfigMap" and "prepare.json" in o.get("data", {}))
    return json.loads(cm["data"]["prepare.json"])["check"]["entrypoint"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args(argv)
    config_check = load("config_check")
    print(f"{args.runs} runs per release, Python {sys.version.split()[0]}\n")
    print("| Release | MasterConfig | first run | median | slowest |")
    print("|---|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="nemo-rl-gke-bench-") as tmp:
        for release in RELEASES:
            entrypoint = rendered_check(Path(tmp), release)
            took, kind = [], ""
            for _ in range(args.runs):
                result, seconds = config_check.run_in_image(entrypoint, 300)
                if result.state != "passed":
                    print(f"{release}: {result.state}: {result.error}", file=sys.stderr)
                    return 1
                took.append(seconds)
                kind = result.master_config
            print(f"| {release} | {kind} | {took[0]:.2f} s | {statistics.median(took):.2f} s | {max(took):.2f} s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
