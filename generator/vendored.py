"""Third-party data the product reads, carried in the repository under `vendor/`.

Four sets, each copied unmodified from a public repository, with a provenance note and a checksum
list (`PROVENANCE.md`, `SHA256SUMS`) that this module writes and a test verifies:

- `vendor/kuberay/<version>/`: the KubeRay CRDs (RayCluster, RayJob) of the operator versions
  the chart must render for; `manifests` validates every rendered RayCluster against each;
- `vendor/nemo-rl/<tag>/`: the NeMo RL example configs of every release the generator offers, in
  the repository's own layout so each recipe's `defaults:` chain resolves; `validate` and
  `rehearse` merge the chosen release's own recipe from here;
- `vendor/gke-networking-api/<version>/`: the CRDs of GKE's multi-networking kinds (`Network`,
  `GKENetworkParamSet`), which the test bed's real API server serves;
- `vendor/nemo-rl-src/<tag>/`: the Python files of each release's GRPO start-up path, in the
  repository's own layout, at the same commit as its configs; generator/nemo_rl/asserts.py lists
  every `assert` and `raise` in them (generator/nemo_rl/startup_asserts.json).

The files are data, never hand-edited: `scripts/vendor.sh FOLDER` refreshes every set from a
folder laid out as `crds/kuberay-<version>/*.yaml`, `nemo-rl/<tag>/examples/configs/...`,
`crds/gke-networking-api-<version>/*.yaml` and `nemo-rl-src/<tag>/...` (the last written by
`scripts/nemo-rl-asserts.sh stage GIT_DIR FOLDER` from a git mirror of NVIDIA-NeMo/RL).
Nothing here reads a path outside the repository.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from generator.core.errors import InputError
from generator.core.schema import ROOT
from generator.nemo_rl.releases import RELEASES

VENDOR = ROOT / "vendor"
SUMS = "SHA256SUMS"
PROVENANCE = "PROVENANCE.md"


class MissingDataError(InputError):
    """A data file the repository should carry is absent: one line naming it and the fix."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(f"{message} - {fix}")
        self.message = message
        self.fix = fix


@dataclass(frozen=True)
class DataSet:
    name: str  # folder under vendor/
    repository: str  # on GitHub
    license: str
    upstream_path: str  # where the files sit in the upstream repository, for each version
    source_folder: str  # where refresh finds one version in the folder it is given
    versions: dict[str, str]  # version -> upstream commit (or what pins it, named by `pinned_by`)
    purpose: str
    pinned_by: str = "commit"
    pattern: str = "*.yaml"  # the files refresh copies from each version's folder

    @property
    def root(self) -> Path:
        return VENDOR / self.name


KUBERAY = DataSet(
    name="kuberay",
    repository="ray-project/kuberay",
    license="Apache-2.0",
    upstream_path="helm-chart/kuberay-operator/crds/<file>",
    source_folder="crds/kuberay-{version}",
    versions={
        # The oldest operator a managed Ray add-on may still run, and the newest release.
        "v1.3.2": "66e4132c0d3f0fe1f258004073284583994b2341",
        "v1.7.0": "59d663aeec13760646da3db9c1cf8cfe883e30b7",
    },
    purpose="Every rendered RayCluster must be valid under both versions' CRD schemas.",
)

NEMO_RL = DataSet(
    name="nemo-rl",
    repository="NVIDIA-NeMo/RL",
    license="Apache-2.0",
    upstream_path="the same relative path (examples/configs/...)",
    source_folder="nemo-rl/{version}",
    versions={tag: r.commit for tag, r in RELEASES.items()},  # the release table is the one list
    purpose="The recipes the generator chooses, merged over their `defaults:` chains by validate and rehearse.",
)

GKE_NETWORKING = DataSet(
    name="gke-networking-api",
    repository="GoogleCloudPlatform/gke-networking-api",
    license="Apache-2.0",
    upstream_path="config/crds/networking.gke.io_{networks,gkenetworkparamsets}.yaml",
    source_folder="crds/gke-networking-api-{version}",
    versions={
        # Taken from the Go module github.com/GoogleCloudPlatform/gke-networking-api at this version,
        # as the Go module proxy serves it; the hash is the module's in go.sum form.
        "v0.2.11": "h1:U9n3hHMyWvGHO+wiEUxoLHQlqUxU0oARuCHoDZTDxUQ=",
    },
    purpose="The test bed's API server serves GKE's multi-networking kinds (Network, GKENetworkParamSet) from these CRDs.",
    pinned_by="Go module hash",
)

NEMO_RL_SRC = DataSet(
    name="nemo-rl-src",
    repository="NVIDIA-NeMo/RL",
    license="Apache-2.0",
    upstream_path="the same relative path (examples/run_grpo*.py, nemo_rl/...)",
    source_folder="nemo-rl-src/{version}",
    versions={tag: r.commit for tag, r in RELEASES.items()},  # the same commits as the configs
    purpose="The GRPO start-up path's source of each release, read (never imported) by generator/nemo_rl/asserts.py "
    "to list its asserts and raises.",
    pattern="*.py",
)

DRA_DRIVER = DataSet(
    name="dra-driver-nvidia-gpu",
    repository="kubernetes-sigs/dra-driver-nvidia-gpu",
    license="Apache-2.0",
    upstream_path="deployments/helm/dra-driver-nvidia-gpu/crds/resource.nvidia.com_computedomains.yaml",
    source_folder="crds/dra-driver-nvidia-gpu-{version}",
    versions={
        # The newest release tag (chart 0.4.1); it serves ComputeDomain resource.nvidia.com/v1beta1 only.
        "v0.4.1": "764900e7833798a1528bd52a2af3e1b2d5f7a616",
    },
    purpose="Every rendered ComputeDomain must be valid under the CRD of the DRA driver the infra script installs.",
)

SETS: tuple[DataSet, ...] = (KUBERAY, NEMO_RL, GKE_NETWORKING, NEMO_RL_SRC, DRA_DRIVER)
REFRESH = "scripts/vendor.sh refresh FOLDER"


def _relative(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


# --- reading ---------------------------------------------------------------------------------


def crd_files(version: str) -> list[Path]:
    """The KubeRay CRD files of one operator version."""
    folder = KUBERAY.root / version
    files = sorted(folder.glob("*.yaml"))
    if not files:
        raise MissingDataError(
            f"{_relative(folder)}: the KubeRay {version} CRDs are missing from this checkout", "restore them with git checkout -- vendor/"
        )
    return files


def dra_crd_files() -> list[Path]:
    """The CRD files of NVIDIA's DRA driver (ComputeDomain), every carried version."""
    files = sorted(DRA_DRIVER.root.glob("*/*.yaml"))
    if not files:
        raise MissingDataError(
            f"{_relative(DRA_DRIVER.root)}: the DRA driver's CRDs are missing from this checkout",
            "restore them with git checkout -- vendor/",
        )
    return files


def carried_releases() -> tuple[str, ...]:
    return tuple(NEMO_RL.versions)


def recipe_path(tag: str, recipe: str) -> Path:
    """The file of one recipe of one NeMo RL release, or an error naming both and what to do."""
    if tag not in NEMO_RL.versions:
        raise MissingDataError(
            f"NeMo RL {tag}: this repository carries no configs of that release, so its recipe {recipe} cannot be checked",
            f"use a release it carries ({', '.join(NEMO_RL.versions)}: python -m generator --release ...), "
            f"or add its configs with {REFRESH}",
        )
    path = NEMO_RL.root / tag / recipe
    if not path.is_file():
        raise MissingDataError(
            f"NeMo RL {tag} recipe {recipe}: not in this repository ({_relative(NEMO_RL.root / tag)}/)",
            f"use a recipe the generator writes for {tag} (python -m generator), or add it with {REFRESH}",
        )
    return path


def defaults_chain(path: Path) -> list[Path]:
    """The recipe file and every file its `defaults:` chain names, recursively (missing ones too)."""
    out: list[Path] = []
    todo = [path]
    while todo:
        p = todo.pop()
        if p in out:
            continue
        out.append(p)
        if not p.is_file():
            continue
        doc = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        parents = doc.get("defaults") if isinstance(doc, dict) else None
        for parent in [parents] if isinstance(parents, str) else parents or []:
            todo.append((p.parent / str(parent)).resolve())
    return out


# Each recipe the generator can choose, merged over its defaults chain once by scripts/sync.sh
# (OmegaConf's load and merge were most of `python -m generator`'s time), with the sha256 of every
# file of its chain: used only while each of them is unchanged, else merged anew.
MERGED_RECIPES = ROOT / "generator" / "nemo_rl" / "merged_recipes.json"


def merged_recipes_text() -> str:
    """MERGED_RECIPES' text, from the carried configs (scripts/sync.sh)."""
    from generator.nemo_rl.recipe_config import load_recipe

    out = {}
    for tag, recipe in sorted(_needed_recipes()):
        path = recipe_path(tag, recipe)
        chain = {_relative(p): sha256(p) for p in sorted(defaults_chain(path))}
        out[f"{tag}/{recipe}"] = {"chain": chain, "config": load_recipe(path)}
    return json.dumps(out, sort_keys=True, separators=(",", ":")) + "\n"


@cache
def _merged_recipes() -> dict[str, Any]:
    try:
        return json.loads(MERGED_RECIPES.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _merged(tag: str, recipe: str) -> dict | None:
    entry = _merged_recipes().get(f"{tag}/{recipe}")
    if entry is None:
        return None
    for name, digest in entry["chain"].items():
        path = ROOT / name
        if not path.is_file() or sha256(path) != digest:
            return None
    return copy.deepcopy(entry["config"])


def load_release_recipe(tag: str, recipe: str) -> dict:
    """The release's own recipe merged over its `defaults:` chain, as NeMo RL loads it."""
    from generator.nemo_rl.recipe_config import load_recipe

    path = recipe_path(tag, recipe)
    merged = _merged(tag, recipe)
    if merged is not None:
        return merged
    for p in defaults_chain(path):
        if not p.is_file():
            raise MissingDataError(
                f"NeMo RL {tag} recipe {recipe}: its defaults chain names {_relative(p)}, which this repository lacks",
                f"add it with {REFRESH}",
            )
    return load_recipe(path)


# --- checking and refreshing -----------------------------------------------------------------


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _data_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name not in (SUMS, PROVENANCE))


def checksum_text(root: Path) -> str:
    """`sha256sum` format, so `cd vendor/<set> && sha256sum -c SHA256SUMS` checks it too."""
    return "".join(f"{sha256(p)}  {p.relative_to(root).as_posix()}\n" for p in _data_files(root))


def verify(data: DataSet, root: Path | None = None) -> list[str]:
    """What differs from the checksum list: changed, missing and unlisted files."""
    root = root or data.root
    sums = root / SUMS
    if not sums.is_file():
        return [f"{_relative(sums)}: missing"]
    listed = {}
    for line in sums.read_text(encoding="utf-8").splitlines():
        digest, _, name = line.partition("  ")
        listed[name] = digest
    problems = []
    for name, digest in listed.items():
        p = root / name
        if not p.is_file():
            problems.append(f"{_relative(p)}: listed in {SUMS} but missing")
        elif sha256(p) != digest:
            problems.append(f"{_relative(p)}: checksum differs from {SUMS} (edited by hand? refresh with {REFRESH})")
    for p in _data_files(root):
        if p.relative_to(root).as_posix() not in listed:
            problems.append(f"{_relative(p)}: not listed in {SUMS}")
    return problems


def provenance_text(data: DataSet) -> str:
    lines = [
        f"# {data.name}: copied unmodified from github.com/{data.repository}",
        "",
        f"Written by `{REFRESH}` (generator/vendored.py); never edit these files by hand.",
        "",
        f"- repository: https://github.com/{data.repository}",
        f"- license: {data.license} (the upstream repository's LICENSE file)",
        f"- path upstream: {data.upstream_path}",
        f"- use here: {data.purpose}",
        f"- checksums: {SUMS} (sha256sum format)",
        "",
        f"| version | {data.pinned_by} |",
        "|---|---|",
        *(f"| {v} | {c} |" for v, c in data.versions.items()),
        "",
    ]
    return "\n".join(lines)


def _needed_recipes() -> list[tuple[str, str]]:
    """(release, recipe) for every recipe the generator can choose for every release it offers."""
    from generator.nemo_rl.run_spec import MODELS

    return [(tag, recipe) for tag in NEMO_RL.versions for m in MODELS.values() for recipe in m.recipes]


def _needed_sources(tag: str) -> tuple[str, ...]:
    """The start-up files every release must have: its entry script and grpo.py (the others are
    listed where the release has them: generator/nemo_rl/asserts.py)."""
    from generator.nemo_rl.asserts import entry_script

    return (entry_script(tag), "nemo_rl/algorithms/grpo.py")


def _stage(data: DataSet, source: Path, stage: Path) -> None:
    for version in data.versions:
        src = source / data.source_folder.format(version=version)
        if not src.is_dir():
            layout = data.source_folder.format(version="<version>")
            raise MissingDataError(f"{src}: missing", f"give a folder holding {layout}/ for {version}")
        files = sorted(p for p in src.rglob(data.pattern) if p.is_file())
        if not files:
            raise MissingDataError(f"{src}: holds no {data.pattern[1:]} files", f"copy {data.repository} {version}'s files there")
        for p in files:
            dest = stage / version / p.relative_to(src)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, dest)
    (stage / SUMS).write_text(checksum_text(stage), encoding="utf-8")
    (stage / PROVENANCE).write_text(provenance_text(data), encoding="utf-8")


def refresh(source: Path, vendor: Path = VENDOR) -> list[str]:
    """Replace every set under `vendor` with the files in `source`; nothing is changed unless
    every set is complete (every version, every generator recipe with its defaults chain)."""
    with tempfile.TemporaryDirectory(prefix=".vendor-", dir=vendor.parent) as tmp:
        staged = {}
        for data in SETS:
            stage = Path(tmp) / data.name
            _stage(data, source, stage)
            staged[data.name] = stage
        for tag, recipe in _needed_recipes():
            for p in defaults_chain((staged[NEMO_RL.name] / tag / recipe).resolve()):
                if not p.is_file():
                    missing = p.relative_to(staged[NEMO_RL.name].resolve() / tag)
                    raise MissingDataError(f"{source}: NeMo RL {tag} lacks {missing}", f"copy it from {NEMO_RL.repository} at {tag}")
        for tag in NEMO_RL_SRC.versions:
            for path in _needed_sources(tag):
                if not (staged[NEMO_RL_SRC.name] / tag / path).is_file():
                    raise MissingDataError(
                        f"{source}: NeMo RL {tag}'s start-up source lacks {path}",
                        "write it with scripts/nemo-rl-asserts.sh stage GIT_DIR FOLDER",
                    )
        report = []
        vendor.mkdir(exist_ok=True)
        for data in SETS:
            dest = vendor / data.name
            old = Path(tmp) / f"{data.name}.old"
            if dest.exists():
                dest.rename(old)
            staged[data.name].rename(dest)
            report.append(f"{_relative(dest)}: {len(_data_files(dest))} files")
        return report


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scripts/vendor.sh", description="check or refresh the data under vendor/")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="verify every file against its SHA256SUMS")
    r = sub.add_parser(
        "refresh", help="copy every set from FOLDER (crds/kuberay-<v>/, nemo-rl/<tag>/, crds/gke-networking-api-<v>/, nemo-rl-src/<tag>/)"
    )
    r.add_argument("folder", type=Path)
    args = p.parse_args(argv)
    try:
        if args.command == "refresh":
            for line in refresh(args.folder.resolve()):
                print(line)
            return 0
        problems = [msg for data in SETS for msg in verify(data)]
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for msg in problems:
        print(f"error: {msg}", file=sys.stderr)
    if not problems:
        print(f"vendor/: {sum(len(_data_files(d.root)) for d in SETS)} files match their checksums")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
