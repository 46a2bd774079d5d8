"""`python -m generator render VALUES... --out DIR`: render with the pinned Helm 4, validate every
object (built-in kinds, both KubeRay CRD sets, GKE networking) and write DIR/<values>/all.yaml.

Each DIR/<values>/ folder is render's own: it carries a marker file, and render writes into a
folder only when it made it (or it holds just an earlier render's all.yaml). It never deletes a
file."""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from generator.core.files import InputError, write_atomic
from generator.helm.runner import Helm, HelmError, HelmMissing, default_helm
from generator.render.manifests import object_id, parse_documents, validate_documents

MARKER = ".nemo-rl-gke-render"
MARKER_TEXT = "This folder holds manifests written by `python -m generator render`; render replaces all.yaml here.\n"
OUTPUT = "all.yaml"
FALLBACK_SLUG = "values"
_HELM_VERSION_RE = re.compile(r"v\d+\.\d+\.\d+")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.-]+", "-", text.lower()).strip("-.")


def output_folders(files: list[Path]) -> list[str]:
    """The folder name under --out of each values file; refuses two files sharing one."""
    names: list[str] = []
    owner: dict[str, Path] = {}
    for f in files:
        name = _slug(f.stem) or FALLBACK_SLUG
        if name in owner:
            raise InputError(
                f"{owner[name]} and {f} would both be rendered to {name}/{OUTPUT}; rename one or render them with separate --out folders"
            )
        owner[name] = f
        names.append(name)
    return names


def _earlier_render(folder: Path) -> bool:
    """A folder from a render before the marker existed: only all.yaml, as Helm writes it."""
    try:
        entries = [p.name for p in folder.iterdir()]
        if entries != [OUTPUT] or not (folder / OUTPUT).is_file() or (folder / OUTPUT).is_symlink():
            return False
        with open(folder / OUTPUT, encoding="utf-8", errors="replace") as f:
            head = f.read(200)
    except OSError:
        return False
    return head.startswith("---\n# Source: nemo-rl-gke/")


def claim_folder(folder: Path) -> None:
    """Make `folder` render's own, or refuse: a folder render did not make is the user's."""
    try:
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            raise InputError(f"{folder}: exists and is not a folder render made; remove it or choose another --out")
        if folder.is_dir():
            if (folder / MARKER).is_file() or _earlier_render(folder):
                if not (folder / MARKER).is_file():
                    write_atomic(folder / MARKER, MARKER_TEXT, force=True)
                return
            raise InputError(f"{folder}: exists and was not made by render; remove it or choose another --out")
        folder.mkdir()
        write_atomic(folder / MARKER, MARKER_TEXT, force=True)
    except OSError as e:
        raise InputError(f"{folder}: cannot write: {e.strerror or e}") from None


def _check_out(out: Path, create: bool) -> None:
    try:
        if out.exists() and not out.is_dir():
            raise InputError(f"--out {out}: is not a folder; give a folder for the rendered manifests")
        if create:
            out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"--out {out}: cannot create the folder: {e.strerror or e}") from None


def _check_input(f: Path) -> None:
    try:
        if not f.exists():
            raise InputError(f"{f}: no such file")
        if not f.is_file():
            raise InputError(f"{f}: is not a regular file; give a values file")
    except OSError as e:
        raise InputError(f"{f}: cannot read: {e.strerror or e}") from None


def _helm(path: str | None) -> Helm:
    try:
        helm = default_helm(path)
    except HelmMissing as e:
        raise InputError(str(e)) from None
    if not _HELM_VERSION_RE.match(helm.version):
        raise InputError(f"--helm {path}: not Helm: `{path} version --short` did not print a version such as v4.1.4")
    return helm


def _indented(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.strip().splitlines())


def _parse(text: str) -> list[dict[str, Any]]:
    """Helm's output as objects; a message instead when it is not Kubernetes objects."""
    try:
        objs = parse_documents(text)
    except yaml.YAMLError as e:
        raise ValueError(f"output is not YAML: {str(e).splitlines()[0]}") from None
    if not objs:
        raise ValueError("rendered no objects")
    for o in objs:
        if not isinstance(o, dict) or not isinstance(o.get("kind"), str):
            raise ValueError(f"output is not Kubernetes objects (a document starts {str(o)[:60]!r})")
    return objs


def _ray_summary(objs: list[dict[str, Any]]) -> str:
    rc = next((o for o in objs if o["kind"] == "RayCluster"), None)
    if not rc:
        return ""
    try:
        groups = rc["spec"]["workerGroupSpecs"]
        nodes = sum(g.get("replicas", 0) for g in groups)
        gpus = 0
        for g in groups:
            limits = g["template"]["spec"]["containers"][0].get("resources", {}).get("limits", {})
            gpus += g.get("replicas", 0) * int(limits.get("nvidia.com/gpu", 0))
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        return f"; RayCluster {rc.get('metadata', {}).get('name', '?')}"
    return f"; RayCluster {rc['metadata']['name']}: {len(groups)} worker group(s), {nodes} GPU node(s), {gpus} GPUs"


HELP = "render the chart with the pinned Helm and validate every object"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from generator.core.arguments import add_release_name, release_name

    p.add_argument("files", nargs="+", type=Path, metavar="VALUES")
    p.add_argument("--out", type=Path, required=True, help="folder for the rendered manifests")
    add_release_name(p, "Helm release name; default nemo-rl", type=release_name)
    p.add_argument("--helm", default=None, help="helm binary to use instead of the pinned Helm 4")


def run(args: argparse.Namespace) -> int:
    for f in args.files:
        _check_input(f)
    folders = output_folders(args.files)
    _check_out(args.out, create=False)
    helm = _helm(args.helm)
    _check_out(args.out, create=True)
    failed = False
    for values, name in zip(args.files, folders, strict=True):
        try:
            text = helm.template([values], release=args.release)
        except HelmError as e:
            print(f"error: {values}: helm {helm.version} template failed:", file=sys.stderr)
            print(_indented(str(e)) or "  (no message)", file=sys.stderr)
            failed = True
            continue
        except OSError as e:
            raise InputError(f"--helm {helm.path}: cannot run it: {e.strerror or e}") from None
        try:
            objs = _parse(text)
        except ValueError as e:
            print(f"error: {values}: helm {helm.version} {e}; nothing written", file=sys.stderr)
            failed = True
            continue
        findings = validate_documents(objs)
        out = args.out / name
        claim_folder(out)
        write_atomic(out / OUTPUT, text, force=True)
        counts = Counter(o["kind"] for o in objs)
        summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) + _ray_summary(objs)
        print(f"{values} -> {out / OUTPUT} ({helm.version}): {summary}")
        for f in findings:
            print(f"  INVALID {f}", file=sys.stderr)
        if findings:
            failed = True
        else:
            print(f"  all {len(objs)} objects valid ({', '.join(sorted({object_id(o).split('/')[0] for o in objs}))})")
    return 1 if failed else 0
