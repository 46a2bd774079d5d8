"""Helm's way of combining a values file with the chart's defaults (what `helm install -f`
validates and renders): maps merge key by key, lists and scalars replace, null deletes."""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import yaml

from generator.core.paths import CHART_DIR


def coalesce(defaults: Any, override: Any) -> Any:
    if not isinstance(defaults, dict) or not isinstance(override, dict):
        return copy.deepcopy(override)
    out = copy.deepcopy(defaults)
    for key, value in override.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = coalesce(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@cache
def _chart_defaults_text() -> str:
    return (CHART_DIR / "values.yaml").read_text(encoding="utf-8")


def chart_defaults() -> dict[str, Any]:
    return yaml.load(_chart_defaults_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader


def as_helm_sees_it(doc: Any) -> Any:
    """The values Helm would use for `helm install -f <doc>`."""
    if not isinstance(doc, dict):
        return doc
    merged = coalesce(chart_defaults(), doc)
    if "global" in doc and doc["global"] is None:
        merged["global"] = None  # Helm (3.17 and 4) keeps a null `global`, and its schema check rejects it
    return merged
