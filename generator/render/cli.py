"""`python -m generator render VALUES... --out DIR [-f MORE] [--set K=V]...`: render with the pinned
Helm 4, validate every object (built-in kinds, both KubeRay CRD sets, GKE networking) and write
DIR/<values>/all.yaml.

Several VALUES are several releases, each rendered on its own (as `validate FILE...` checks each
alone). Layers are Helm's flags: one VALUES with `-f MORE` and `--set`, merged in the order
`helm install` takes them, rendered into DIR/<VALUES' name>/. Every file is read under the one
input policy (`generator.core.files.load_values`) before Helm sees it.

Each DIR/<values>/ folder is render's own: it carries a marker file, and render writes into a
folder only when it made it (or it holds just an earlier render's all.yaml). It never deletes a
file."""

from __future__ import annotations

import argparse
import re
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from generator.core.files import InputError, load_values, write_atomic
from generator.helm.runner import Helm, HelmError, HelmMissing, default_helm
from generator.render.manifests import object_id, parse_documents, validate_documents, warm
from generator.values.layers import Layers, add_layer_arguments, helm_failure, layers

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
    """The one input policy (size, YAML, duplicate keys, empty), then: a mapping, as Helm needs."""
    if not isinstance(load_values(f), dict):
        raise InputError(f"{f}: not a values file (a YAML mapping of the chart's keys); give the file python -m generator wrote")


def releases(args: argparse.Namespace) -> list[Layers]:
    """What to render: each VALUES alone, or one VALUES with its -f and --set layers."""
    if (args.more or args.sets) and len(args.files) > 1:
        raise InputError(
            f"{len(args.files)} VALUES files with -f/--set: several VALUES render separately; "
            f"to layer files as helm install does, give one VALUES and each further file with -f"
        )
    if args.more or args.sets:
        return [layers([*args.files, *args.more], args.sets, chart_defaults=True)]
    return [Layers((f,)) for f in args.files]


def _helm(path: str | None) -> Helm:
    try:
        helm = default_helm(path)
    except HelmMissing as e:
        raise InputError(str(e)) from None
    if not _HELM_VERSION_RE.match(helm.version):
        raise InputError(f"--helm {path}: not Helm: `{path} version --short` did not print a version such as v4.1.4")
    return helm


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

    p.add_argument(
        "files",
        nargs="+",
        type=Path,
        metavar="VALUES",
        help="values file; several are rendered each on its own into --out/<name>/ (to layer files, give one and -f the rest)",
    )
    p.add_argument("--out", type=Path, required=True, help="folder for the rendered manifests")
    add_release_name(p, "Helm release name; default nemo-rl", type=release_name)
    p.add_argument("--helm", default=None, help="helm binary to use instead of the pinned Helm 4")
    add_layer_arguments(p, "merged over one VALUES in this order, rendered as one release into --out/<VALUES' name>/")


def run(args: argparse.Namespace) -> int:
    jobs = releases(args)
    for spec in jobs:
        for f in spec.files:
            _check_input(f)
    folders = output_folders([spec.files[0] for spec in jobs])
    _check_out(args.out, create=False)
    helm = _helm(args.helm)
    _check_out(args.out, create=True)
    threading.Thread(target=warm, daemon=True).start()  # the schemas load while Helm renders
    failed = False
    for spec, name in zip(jobs, folders, strict=True):
        sets = [word for flag_arg in spec.sets for word in flag_arg]
        try:
            text = helm.template(list(spec.files), release=args.release, extra=sets)
        except HelmError as e:
            print(f"error: {spec.name}: helm {helm.version} template failed: {helm_failure(spec, str(e))}", file=sys.stderr)
            failed = True
            continue
        except OSError as e:
            raise InputError(f"--helm {helm.path}: cannot run it: {e.strerror or e}") from None
        try:
            objs = _parse(text)
        except ValueError as e:
            print(f"error: {spec.name}: helm {helm.version} {e}; nothing written", file=sys.stderr)
            failed = True
            continue
        findings = validate_documents(objs)
        out = args.out / name
        claim_folder(out)
        write_atomic(out / OUTPUT, text, force=True)
        counts = Counter(o["kind"] for o in objs)
        summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) + _ray_summary(objs)
        print(f"{spec.name} -> {out / OUTPUT} ({helm.version}): {summary}")
        for f in findings:
            print(f"  INVALID {f}", file=sys.stderr)
        if findings:
            failed = True
        else:
            print(f"  all {len(objs)} objects valid ({', '.join(sorted({object_id(o).split('/')[0] for o in objs}))})")
    return 1 if failed else 0
