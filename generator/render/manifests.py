"""Validate rendered manifests without a cluster.

- built-in kinds: kubernetes-validate (strict) for every supported Kubernetes version;
- RayCluster/RayJob: both KubeRay CRD sets (an older operator must accept what we render);
- ComputeDomain: the CRD of NVIDIA's DRA driver (vendor/dra-driver-nvidia-gpu);
- GKE networking kinds: the project's own schemas of the documented fields.
A kind with no schema is itself a finding.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import yaml

from generator.core.schema import ROOT, dotted
from generator.render import k8s_schema
from generator.render.crd_schema import compiled_index, compiled_schemas

# Kubernetes minor versions the chart supports: GKE's oldest for H200 RDMA (1.31) up to the
# newest kubernetes-validate knows.
KUBE_VERSIONS: tuple[str, ...] = ("1.31", "1.32", "1.33", "1.34", "1.35", "1.36", "1.37")
OWN_SCHEMAS = (ROOT / "schemas" / "gke-networking", ROOT / "schemas" / "external-secrets")


@dataclass(frozen=True)
class Finding:
    obj: str  # Kind/name
    checker: str  # e.g. k8s-1.31, kuberay-v1.3.2, gke-networking
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.obj} [{self.checker}] {self.path}: {self.message}"


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.load_all(text, Loader=_Loader) if d]


def object_id(obj: dict[str, Any]) -> str:
    return f"{obj.get('kind', '?')}/{obj.get('metadata', {}).get('name', '?')}"


@cache
def _crd_validators(gvk: tuple[str, str, str]) -> list[tuple[str, Any]]:
    """Each CRD set's validator of one KubeRay kind, from the schemas sync compiled once."""
    from jsonschema import Draft202012Validator

    return [(name, Draft202012Validator(schema)) for name, schema in sorted(compiled_schemas(gvk).items())]


@cache
def _own_validators() -> dict[tuple[str, str, str], tuple[str, Any]]:
    from jsonschema import Draft202012Validator

    out = {}
    for path in sorted(p for d in OWN_SCHEMAS for p in d.glob("*.json")):
        schema = json.loads(path.read_text(encoding="utf-8"))  # valid JSON Schema: tests/render holds them to it
        gvks = schema["x-kubernetes-group-version-kind"]
        for gvk in gvks if isinstance(gvks, list) else [gvks]:
            out[(gvk["group"], gvk["version"], gvk["kind"])] = (path.parent.name, Draft202012Validator(schema))
    return out


@cache
def _k8s_registry(version: str) -> Any:
    from referencing import Registry, Resource

    folder = k8s_schema.package_dir() / k8s_schema.K8S_SCHEMAS / f"v{version}.0-local-strict"
    if not folder.is_dir():
        raise FileNotFoundError(f"kubernetes-validate has no schemas for Kubernetes {version}")
    defs = json.loads((folder / "_definitions.json").read_text(encoding="utf-8"))
    return Resource.from_contents(defs) @ Registry()


@cache
def _k8s_validator(version: str, kind: str, api_version: str) -> Any | None:
    """A validator from kubernetes-validate's own files, read once per (version, kind), for a kind
    schemas/kubernetes/ does not hold: kubernetes-validate itself re-reads and re-parses the schema
    files on every call, which made validation 10x slower than Helm."""
    from jsonschema import Draft202012Validator
    from referencing import Resource

    definitions = _k8s_registry(version)  # a version kubernetes-validate lacks is an error, not "not served"
    path = k8s_schema.schema_file(version, kind, api_version)
    if not path.is_file():
        return None
    schema = json.loads(path.read_text(encoding="utf-8"))
    registry = Resource.from_contents(schema) @ definitions
    return Draft202012Validator(schema, registry=registry)


@cache
def _compiled_k8s_validator(kind: str, api_version: str, version: str) -> tuple[int, Any] | None:
    """(which distinct schema, its validator) of a kind schemas/kubernetes/ holds; None when the
    version does not serve the kind."""

    entry = k8s_schema.compiled_schemas(kind, api_version).get(version)
    return None if entry is None else (entry[0], _compiled_validator(kind, api_version, entry[0]))


@cache
def _compiled_validator(kind: str, api_version: str, index: int) -> Any:
    from jsonschema import Draft202012Validator

    versions = k8s_schema.compiled_schemas(kind, api_version)
    schema = next(s for i, s in versions.values() if i == index)
    return Draft202012Validator(schema)


def _gvk(obj: dict[str, Any]) -> tuple[str, str, str]:
    api = str(obj.get("apiVersion", ""))
    group, _, version = api.rpartition("/")
    return group, version, str(obj.get("kind", ""))


def _schema_findings(obj: dict[str, Any], checker: str, validator: Any) -> Iterator[Finding]:
    for e in validator.iter_errors(obj):
        yield Finding(object_id(obj), checker, dotted(e.absolute_path), e.message.splitlines()[0][:300])


def validate_object(obj: dict[str, Any], kube_versions: Iterable[str] = KUBE_VERSIONS) -> list[Finding]:
    gvk = _gvk(obj)
    if gvk in compiled_index():
        return [f for name, v in _crd_validators(gvk) for f in _schema_findings(obj, name, v)]
    if gvk in _own_validators():
        checker, validator = _own_validators()[gvk]
        return list(_schema_findings(obj, checker, validator))
    findings = []
    served = 0
    kind, api_version = str(obj.get("kind", "")), str(obj.get("apiVersion", ""))
    compiled = (kind, api_version) in k8s_schema.compiled_index()
    seen: dict[int, list[Finding]] = {}  # a schema identical for several versions is checked once
    for version in kube_versions:
        if compiled and version in KUBE_VERSIONS:
            found = _compiled_k8s_validator(kind, api_version, version)
            if found is None:
                continue  # not served by this version (see below)
            served += 1
            index, validator = found
            if index not in seen:
                seen[index] = list(_schema_findings(obj, "", validator))
            findings.extend(Finding(f.obj, f"k8s-{version}", f.path, f.message) for f in seen[index])
            continue
        validator = _k8s_validator(version, kind, api_version)
        if validator is None:
            # Not served by this Kubernetes version (resource.k8s.io/v1 is GA from 1.34): what needs
            # it (DRA, managed DRANET) has a GKE floor above that version.
            continue
        served += 1
        findings.extend(_schema_findings(obj, f"k8s-{version}", validator))
    if not served:
        return [Finding(object_id(obj), "schema", "(root)", f"no schema for {obj.get('apiVersion')} {obj.get('kind')}")]
    return findings


# What the chart renders in every configuration, for warm(): (kind, apiVersion).
COMMON_KINDS = (("ConfigMap", "v1"), ("ServiceAccount", "v1"), ("Job", "batch/v1"), ("Pod", "v1"))


def warm() -> None:
    """Load the validators a render of the chart needs (the schemas' JSON is most of the cost), so
    a caller can do it while Helm renders, in a thread: Helm is another process."""
    from jsonschema import Draft202012Validator  # noqa: F401 - its import is part of the cost

    _crd_validators(("ray.io", "v1", "RayCluster"))
    _own_validators()
    compiled = k8s_schema.compiled_index()
    for version in KUBE_VERSIONS:
        for kind, api in COMMON_KINDS:
            if (kind, api) in compiled:
                _compiled_k8s_validator(kind, api, version)
            else:
                _k8s_validator(version, kind, api)


def validate_documents(objs: Iterable[dict[str, Any]], kube_versions: Iterable[str] = KUBE_VERSIONS) -> list[Finding]:
    versions = tuple(kube_versions)
    return [f for obj in objs for f in validate_object(obj, versions)]
