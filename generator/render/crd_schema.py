"""Turn a CustomResourceDefinition's openAPIV3Schema into a strict JSON Schema.

The API server prunes (or, with strict field validation, rejects) fields a CRD does not declare;
an older operator silently ignores them. So every object with declared `properties` becomes
`additionalProperties: false` unless it says x-kubernetes-preserve-unknown-fields.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml

_DROP = {
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-validations",
    "x-kubernetes-embedded-resource",
    "nullable",
}


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
