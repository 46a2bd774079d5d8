"""kubernetes-validate's strict schemas of the built-in kinds the chart renders, prepared once.

kubernetes-validate (https://github.com/willthames/kubernetes-validate, the installed release in
requirements/) ships one JSON Schema per kind and Kubernetes version whose `$ref`s point into a
1.5 MB `_definitions.json` per version. Reading seven of those on every `render` was most of its
time after Helm. `scripts/sync.sh` writes `schemas/kubernetes/` instead: per kind, the schema with
only the definitions it reaches (refs made local, `description` keywords dropped: they do not
validate), one copy per distinct schema with the Kubernetes versions it is identical for.
`index.json` names the kubernetes-validate release and the sha256 of every file read;
`scripts/sync.sh --check` and a test fail when they drift. At run time the compiled files are used
only while the installed kubernetes-validate is the release they were made from.
"""

from __future__ import annotations

import hashlib
import json
import re
from functools import cache
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from generator.core.paths import ROOT

COMPILED = ROOT / "schemas" / "kubernetes"
INDEX = COMPILED / "index.json"
K8S_SCHEMAS = "kubernetes-json-schema"

# The built-in (kind, apiVersion) pairs the chart's templates render (a test holds the list to the
# rendered snapshots); any other kind is validated from kubernetes-validate's own files.
KINDS: tuple[tuple[str, str], ...] = (
    ("ConfigMap", "v1"),
    ("Job", "batch/v1"),
    ("NetworkPolicy", "networking.k8s.io/v1"),
    ("PersistentVolume", "v1"),
    ("PersistentVolumeClaim", "v1"),
    ("Pod", "v1"),
    ("PodDisruptionBudget", "policy/v1"),
    ("ResourceClaimTemplate", "resource.k8s.io/v1"),
    ("Role", "rbac.authorization.k8s.io/v1"),
    ("RoleBinding", "rbac.authorization.k8s.io/v1"),
    ("Secret", "v1"),
    ("ServiceAccount", "v1"),
)

# Keywords whose value is a map of names to schemas, and those whose value is a schema or a list of them.
_NAMED = {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
_SCHEMAS = {
    "additionalProperties",
    "items",
    "prefixItems",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
}
_DEFS_REF = re.compile(r"^(?:/api/_definitions\.json)?#/\$defs/(.+)$")


def package_dir() -> Path:
    """kubernetes-validate's folder, found without importing it (its import takes 0.1 s)."""
    spec = find_spec("kubernetes_validate")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("kubernetes-validate is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def installed_version() -> str:
    text = (package_dir() / "version.py").read_text(encoding="utf-8")
    match = re.search(r"__version__\s*=\s*['\"]([^'\"]+)['\"]", text)
    return match.group(1) if match else "?"


def schema_file(version: str, kind: str, api_version: str) -> Path:
    """kubernetes-validate's strict schema file of one kind (its own naming: pod-v1, job-batch-v1)."""
    api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    return package_dir() / K8S_SCHEMAS / f"v{version}.0-local-strict" / f"{kind.lower()}-{api}.json"


def _strip(node: Any, refs: set[str]) -> Any:
    """A schema without `description` keywords and `$id`, its `$ref`s local (#/$defs/NAME)."""
    if isinstance(node, list):
        return [_strip(n, refs) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("description", "$id"):
            continue
        if key == "$ref" and isinstance(value, str) and (m := _DEFS_REF.match(value)):
            refs.add(m.group(1))
            out[key] = f"#/$defs/{m.group(1)}"
        elif key in _NAMED and isinstance(value, dict):
            out[key] = {name: _strip(sub, refs) for name, sub in value.items()}
        elif key in _SCHEMAS:
            out[key] = _strip(value, refs)
        else:
            out[key] = value
    return out


def _self_contained(schema: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    """The kind's schema with every definition it reaches, in the order the definitions file has them."""
    refs: set[str] = set()
    out = _strip(schema, refs)
    reached: dict[str, Any] = {}
    todo = sorted(refs)
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        found: set[str] = set()
        reached[name] = _strip(definitions[name], found)
        todo.extend(sorted(found - reached.keys()))
    out["$defs"] = {name: reached[name] for name in definitions if name in reached}
    return out


def _dump(data: Any) -> str:
    return json.dumps(data, separators=(",", ":")) + "\n"  # key order kept: it is the order errors come in


def _file_name(kind: str, api_version: str) -> str:
    return f"{api_version.replace('/', '_')}_{kind}.json"


def compiled(versions: tuple[str, ...]) -> dict[Path, str]:
    """Every file of schemas/kubernetes/ and its text (scripts/sync.sh), for Kubernetes `versions`."""
    sources: dict[str, str] = {}
    definitions: dict[str, dict[str, Any]] = {}
    for version in versions:
        path = package_dir() / K8S_SCHEMAS / f"v{version}.0-local-strict" / "_definitions.json"
        data = path.read_bytes()
        sources[f"v{version}.0-local-strict/_definitions.json"] = hashlib.sha256(data).hexdigest()
        definitions[version] = json.loads(data)["$defs"]
    files: dict[Path, str] = {}
    kinds: dict[str, dict[str, Any]] = {}
    for kind, api_version in KINDS:
        groups: dict[str, list[str]] = {}  # schema text -> the versions it is for
        for version in versions:
            path = schema_file(version, kind, api_version)
            if not path.is_file():  # not served by this version
                continue
            data = path.read_bytes()
            sources[f"v{version}.0-local-strict/{path.name}"] = hashlib.sha256(data).hexdigest()
            text = json.dumps(_self_contained(json.loads(data), definitions[version]), separators=(",", ":"))
            groups.setdefault(text, []).append(version)
        name = _file_name(kind, api_version)
        kinds[f"{api_version}/{kind}"] = {"file": name, "versions": [v for vs in groups.values() for v in vs]}
        entries = [f'{{"versions":{json.dumps(vs)},"schema":{text}}}' for text, vs in groups.items()]
        files[COMPILED / name] = "[\n" + ",\n".join(entries) + "\n]\n"
    index = {
        "written_by": "scripts/sync.sh from the installed kubernetes-validate (generator/render/k8s_schema.py); do not edit",
        "kubernetes_validate": installed_version(),
        "kube_versions": list(versions),
        "sources": dict(sorted(sources.items())),
        "kinds": kinds,
    }
    return {INDEX: json.dumps(index, indent=1) + "\n"} | files


@cache
def compiled_index() -> dict[tuple[str, str], str]:
    """(kind, apiVersion) -> its file in schemas/kubernetes/; empty when the installed
    kubernetes-validate is not the release the files were made from (then its own files are read)."""
    try:
        index = json.loads(INDEX.read_text(encoding="utf-8"))
        if index["kubernetes_validate"] != installed_version():
            return {}
    except (OSError, ValueError, KeyError):
        return {}
    out = {}
    for key, entry in index["kinds"].items():
        api_version, _, kind = key.rpartition("/")
        out[(kind, api_version)] = entry["file"]
    return out


@cache
def compiled_schemas(kind: str, api_version: str) -> dict[str, tuple[int, dict[str, Any]]]:
    """Kubernetes version -> (which distinct schema, the schema) of one compiled kind."""
    entries = json.loads((COMPILED / compiled_index()[(kind, api_version)]).read_text(encoding="utf-8"))
    return {version: (i, entry["schema"]) for i, entry in enumerate(entries) for version in entry["versions"]}
