"""Regenerate (or, with --check, verify) every derived file from its one source.

    python -m generator.sync [--check]

- schemas/values.schema.json parts that copy a table <- the tables (generator/values/schema_tables.py)
- charts/nemo-rl-gke/values.schema.json  <- schemas/values.schema.json
- charts/nemo-rl-gke/values.yaml         <- python -m generator --gpu <default profile, h200> (the chart's defaults)
- charts/nemo-rl-gke/ci/<gpu>-values.yaml <- python -m generator --gpu <every other profile>
- charts/nemo-rl-gke/ci/*-autopilot-values.yaml <- python -m generator --gpu <every profile Autopilot runs> --mode autopilot
- charts/nemo-rl-gke/ci/*-dranet-values.yaml <- python -m generator --gpu <every profile managed DRANET serves> --network dranet
- charts/nemo-rl-gke/templates/_kueue_limits.tpl <- the Kueue version table (generator/gke/kueue_versions.py)
- charts/nemo-rl-gke/README.md table     <- schema descriptions + chart defaults
- examples/<run>-<gpu>.yaml              <- python -m generator --gpu <gpu> <the run's options>
- docs/values.md releases table          <- the NeMo RL release table (generator/nemo_rl/releases.py)
- docs/values.md start-up asserts table  <- generator/nemo_rl/startup_asserts.json and assert_decisions.py
- generator/validate/release_facts.json <- each carried release's source (vllm_worker.py's own vLLM
                                           keywords, the registered dataset names), read with ast
- generator/nemo_rl/merged_recipes.json  <- each carried recipe the generator chooses, merged over its defaults chain
- schemas/kuberay/*.json                  <- vendor/kuberay's CRDs, converted once for render and validate
                                           (index.json names each vendored file's sha256)
- schemas/kubernetes/*.json               <- the installed kubernetes-validate's strict schemas of the
                                           built-in kinds the chart renders, each with only the
                                           definitions it reaches (index.json: its release, sha256s)
- tests/chart/snapshots/<scenario>.yaml   <- helm template of each ci/ scenario and example (pinned Helm 4),
                                           so a reviewer sees every template change as rendered YAML
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

from generator.core.paths import CHART_DIR, ROOT
from generator.core.schema import SCHEMA_PATH, load_schema
from generator.generate import render_text
from generator.gke import kueue_versions
from generator.gke.profiles import DEFAULT_ACCELERATOR, PROFILES
from generator.gke.provisioning import placeholder_reservation
from generator.render import k8s_schema
from generator.render.crd_schema import compiled
from generator.render.manifests import KUBE_VERSIONS
from generator.validate import release_source
from generator.validate.assert_coverage import replace_asserts_table
from generator.values.docs import replace_accelerators_table, replace_releases_table, replace_table, values_table
from generator.values.options import generate_argv, options_from_args
from generator.values.schema_tables import synced_schema_text
from generator.vendored import MERGED_RECIPES, merged_recipes_text

EXAMPLES_DIR = ROOT / "examples"


def _generated(argv: list[str]) -> Callable[[], str]:
    """The file `python -m generator <argv>` writes (the header names the exact command)."""

    def make() -> str:
        from generator.cli import build_parser

        parser, _ = build_parser()
        args = parser.parse_args(["generate", *argv])
        return render_text(options_from_args(args), generate_argv(args))

    return make


def _readme() -> str:
    readme = (CHART_DIR / "README.md").read_text(encoding="utf-8")
    defaults = yaml.safe_load(_generated(["--gpu", DEFAULT_ACCELERATOR])())
    return replace_table(readme, values_table(defaults))


# Example runs (examples/*.yaml), each generated, for every accelerator profile.
EXAMPLES: dict[str, list[str]] = {
    "quickstart": ["--nodes", "1", "--model", "qwen2.5-1.5b"],
    "tutorial": ["--wandb"],
    "scale-out": ["--groups", "reserved=4:reservation:rl-reservation,spot=4:spot", "--kueue-queue", "gpu-queue", "--wandb"],
}
SECOND_RESERVATION = "extra=4:reservation:rl-reservation-2"  # the scale-out's second group where Spot is not offered


def for_machine(gpu: str, argv: list[str]) -> list[str]:
    """The generator's options for this machine: its profile row decides how its nodes are obtained,
    so a machine offered by reservation only gets a reservation's name, and Spot groups become a
    second reservation."""
    p = PROFILES[gpu]
    if not p.offers("spot"):
        argv = [a.replace("spot=4:spot", SECOND_RESERVATION) for a in argv]
    reserve = placeholder_reservation(p)
    return ["--gpu", gpu, *argv, *([] if reserve is None or "--groups" in argv else ["--reservation", reserve])]


def _install_doc() -> str:
    return replace_accelerators_table((ROOT / "docs" / "install-on-gke.md").read_text(encoding="utf-8"))


def _releases_doc() -> str:
    return replace_asserts_table(replace_releases_table((ROOT / "docs" / "values.md").read_text(encoding="utf-8")))


SNAPSHOTS_DIR = ROOT / "tests" / "chart" / "snapshots"
SNAPSHOT_RELEASE = "nemo-rl"


def snapshot_sources() -> list[Path]:
    """Every values file a snapshot is rendered from: the chart's ci/ scenarios and the examples."""
    return sorted((CHART_DIR / "ci").glob("*-values.yaml")) + sorted(EXAMPLES_DIR.glob("*.yaml"))


def _snapshot(values: Path) -> Callable[[], str]:
    def make() -> str:
        from generator.helm.runner import pinned_or_input_error
        from generator.render.manifests import parse_documents

        text = pinned_or_input_error().template([values], release=SNAPSHOT_RELEASE, namespace=SNAPSHOT_RELEASE)
        docs = parse_documents(text)
        for doc in docs:  # the chart's programs are files of their own: each stands here as its hash
            data = doc.get("data") if doc.get("kind") == "ConfigMap" else None
            for key in [k for k in data or {} if k.endswith(".py")]:
                digest = hashlib.sha256(data[key].encode()).hexdigest()[:16]
                data[key] = f"charts/nemo-rl-gke/files/{key}, sha256 {digest}"
        body = "".join("---\n" + yaml.safe_dump(d, sort_keys=False, width=120) for d in docs)
        source = values.relative_to(ROOT)
        return (
            f"# helm template {SNAPSHOT_RELEASE} charts/nemo-rl-gke -n {SNAPSHOT_RELEASE} -f {source} (pinned Helm 4), written by\n"
            f"# scripts/sync.sh; the chart's programs in the run's ConfigMap are shown by their hash.\n{body}"
        )

    return make


def _schema() -> str:
    return synced_schema_text(SCHEMA_PATH.read_text(encoding="utf-8"))


def targets() -> dict[Path, Callable[[], str]]:
    """Every derived file and how to make it, for the profiles in the table now."""
    others = [gpu for gpu in PROFILES if gpu != DEFAULT_ACCELERATOR]
    return (
        {
            SCHEMA_PATH: _schema,  # its accelerator section comes from the profile table
            CHART_DIR / "values.schema.json": _schema,
            CHART_DIR / "values.yaml": _generated(["--gpu", DEFAULT_ACCELERATOR]),
        }
        | {CHART_DIR / "ci" / f"{gpu}-values.yaml": _generated(for_machine(gpu, [])) for gpu in others}
        | {
            CHART_DIR / "ci" / f"{gpu}-autopilot-values.yaml": _generated(for_machine(gpu, ["--mode", "autopilot"]))
            for gpu, p in PROFILES.items()
            if p.autopilot
        }
        | {
            CHART_DIR / "ci" / f"{gpu}-dranet-values.yaml": _generated(for_machine(gpu, ["--network", "dranet"]))
            for gpu, p in PROFILES.items()
            if p.dranet
        }
        | {CHART_DIR / "templates" / "_kueue_limits.tpl": kueue_versions.template}
        | {CHART_DIR / "README.md": _readme, ROOT / "docs" / "values.md": _releases_doc}
        | {ROOT / "docs" / "install-on-gke.md": _install_doc}
        | {EXAMPLES_DIR / f"{name}-{gpu}.yaml": _generated(for_machine(gpu, argv)) for name, argv in EXAMPLES.items() for gpu in PROFILES}
        | {path: (lambda text=text: text) for path, text in compiled().items()}
        | {path: (lambda text=text: text) for path, text in k8s_schema.compiled(KUBE_VERSIONS).items()}
        | {MERGED_RECIPES: merged_recipes_text}
        | {release_source.FACTS: release_source.facts_text}
        # last: rendered from the files above as they are written
        | {SNAPSHOTS_DIR / f"{p.stem}.yaml": _snapshot(p) for p in snapshot_sources()}
    )


def drifted() -> list[Path]:
    out = []
    for path, make in targets().items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current != make():
            out.append(path)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m generator.sync", description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 when a derived file differs from its source")
    args = p.parse_args(argv)
    root = ROOT
    if args.check:
        stale = drifted()
        for path in stale:
            print(f"{path.relative_to(root)}: out of date; run scripts/sync.sh", file=sys.stderr)
        return 1 if stale else 0
    for path, make in targets().items():
        text = make()
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"{path.relative_to(root)}: updated")
            if path == SCHEMA_PATH:
                load_schema.cache_clear()  # the values files below are checked against the new schema
    return 0


if __name__ == "__main__":
    sys.exit(main())
