"""Turn a CustomResourceDefinition's openAPIV3Schema into a strict JSON Schema.

The API server prunes (or, with strict field validation, rejects) fields a CRD does not declare;
an older operator silently ignores them. So every object with declared `properties` becomes
`additionalProperties: false` unless it says x-kubernetes-preserve-unknown-fields.

Converting 4.3 MB of vendored CRD YAML took most of `render`'s time on every call, so
`scripts/sync.sh` does it once: `schemas/kuberay/` holds each kind's converted schemas (one per
CRD set, descriptions dropped: they do not validate) and `index.json` the kinds and the sha256 of
each vendored file they came from; `scripts/sync.sh --check` (and a test) fail when they drift.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from generator.core.paths import ROOT

_DROP = {
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-validations",
    "x-kubernetes-embedded-resource",
    "nullable",
    "description",  # documentation only; the bulk of the CRD text
}
COMPILED = ROOT / "schemas" / "kuberay"
INDEX = COMPILED / "index.json"


def convert(node: Any) -> Any:
    if isinstance(node, list):
        return [convert(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: convert(v) for k, v in node.items() if k not in _DROP and k != "properties"}
    if "properties" in node:
        out["properties"] = {k: convert(v) for k, v in node["properties"].items()}
    preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if "properties" in node and "additionalProperties" not in node and not preserve:
        out["additionalProperties"] = False
    if node.get("nullable") and "type" in out:
        t = out["type"]
        out["type"] = [*t, "null"] if isinstance(t, list) else [t, "null"]
    if node.get("format") in ("int32", "int64", "byte", "date-time"):
        out.pop("format", None)
    return out


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@cache
def load_crd(path: Path) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Map (group, version, kind) -> the raw openAPIV3Schema of every served version."""
    doc = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)  # noqa: S506 - a safe loader
    group = doc["spec"]["group"]
    kind = doc["spec"]["names"]["kind"]
    return {(group, v["name"], kind): v["schema"]["openAPIV3Schema"] for v in doc["spec"]["versions"] if v.get("served", True)}


def json_schema(openapi: dict[str, Any]) -> dict[str, Any]:
    schema = convert(openapi)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


def _kind_file(gvk: tuple[str, str, str]) -> str:
    return "_".join(gvk) + ".json"


def _dump(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n"


def compiled() -> dict[Path, str]:
    """Every file of schemas/kuberay/ and its text, from the vendored CRDs the chart renders objects
    of: KubeRay's and the DRA driver's ComputeDomain (scripts/sync.sh)."""
    from generator.vendored import KUBERAY, crd_files, dra_crd_files

    kinds: dict[tuple[str, str, str], dict[str, Any]] = {}
    sources = {}
    for version in KUBERAY.versions:
        for path in crd_files(version):
            sources[f"{version}/{path.name}"] = hashlib.sha256(path.read_bytes()).hexdigest()
            for gvk, openapi in load_crd(path).items():
                kinds.setdefault(gvk, {})[f"kuberay-{version}"] = json_schema(openapi)
    for path in dra_crd_files():  # NVIDIA's DRA driver: the ComputeDomain of A4X's NVLink domain
        sources[f"dra-driver-{path.parent.name}/{path.name}"] = hashlib.sha256(path.read_bytes()).hexdigest()
        for gvk, openapi in load_crd(path).items():
            kinds.setdefault(gvk, {})[f"dra-driver-{path.parent.name}"] = json_schema(openapi)
    index = {
        "written_by": "scripts/sync.sh from vendor/kuberay and vendor/dra-driver-nvidia-gpu (generator/render/crd_schema.py); do not edit",
        "sources": sources,
        "kinds": {"/".join(gvk): {"file": _kind_file(gvk), "sets": list(sets)} for gvk, sets in sorted(kinds.items())},
    }
    return {INDEX: _dump(index)} | {COMPILED / _kind_file(gvk): _dump(sets) for gvk, sets in sorted(kinds.items())}


@cache
def compiled_index() -> dict[tuple[str, str, str], str]:
    """(group, version, kind) -> its file in schemas/kuberay/, from the index sync wrote."""
    index = json.loads(INDEX.read_text(encoding="utf-8"))
    return {tuple(key.split("/")): entry["file"] for key, entry in index["kinds"].items()}  # type: ignore[misc]


def compiled_schemas(gvk: tuple[str, str, str]) -> dict[str, dict[str, Any]]:
    """The converted schemas of one kind, by CRD set (kuberay-<version>)."""
    return json.loads((COMPILED / compiled_index()[gvk]).read_text(encoding="utf-8"))
