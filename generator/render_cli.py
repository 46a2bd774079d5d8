"""`python -m generator render VALUES... --out DIR`: render with the pinned Helm 4, validate every
object (built-in kinds, both KubeRay CRD sets, GKE networking) and write DIR/<values>/all.yaml."""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter

from .helm import HelmError, HelmMissing, default_helm
from .manifests import object_id, parse_documents, validate_documents
from .values_io import InputError


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.-]+", "-", text.lower()).strip("-")


def run(args: argparse.Namespace) -> int:
    for f in args.files:
        if not f.is_file():
            raise InputError(f"{f}: no such file")
    try:
        helm = default_helm(args.helm)
    except HelmMissing as e:
        raise InputError(str(e)) from None
    failed = False
    for values in args.files:
        try:
            text = helm.template([values], release=args.release)
        except HelmError as e:
            print(f"{values}: helm {helm.version} template failed:\n{e}", file=sys.stderr)
            failed = True
            continue
        objs = parse_documents(text)
        findings = validate_documents(objs)
        out = args.out / _slug(values.stem)
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob("*.yaml"):
            old.unlink()
        (out / "all.yaml").write_text(text, encoding="utf-8")
        counts = Counter(o["kind"] for o in objs)
        summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        rc = next((o for o in objs if o["kind"] == "RayCluster"), None)
        if rc:
            groups = rc["spec"]["workerGroupSpecs"]
            nodes = sum(g["replicas"] for g in groups)
            gpus = sum(g["replicas"] * g["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] for g in groups)
            summary += f"; RayCluster {rc['metadata']['name']}: {len(groups)} worker group(s), {nodes} GPU node(s), {gpus} GPUs"
        print(f"{values} -> {out}/all.yaml ({helm.version}): {summary}")
        for f in findings:
            print(f"  INVALID {f}", file=sys.stderr)
        if findings:
            failed = True
        else:
            print(f"  all {len(objs)} objects valid ({', '.join(sorted({object_id(o).split('/')[0] for o in objs}))})")
    return 1 if failed else 0
