"""Validate one values document: the schema first, then (when the shape is right) the rules."""

from __future__ import annotations

from typing import Any

from generator.core.schema import iter_errors
from generator.validate.findings import Finding, error


def helm_key(key: Any) -> str:
    """A YAML mapping key as Helm sees it: its YAML-to-JSON step turns every key into a string."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    return str(key)


def with_helm_keys(node: Any) -> Any:
    """`node` with every mapping key a string, as Helm's schema check and templates see it."""
    if isinstance(node, dict):
        return {helm_key(k): with_helm_keys(v) for k, v in node.items()}
    if isinstance(node, list):
        return [with_helm_keys(v) for v in node]
    return node


def validate_values(
    doc: Any, release_name: str = "nemo-rl", set_file_keys: frozenset[str] = frozenset(), *, objects: bool = True
) -> list[Finding]:
    """The schema; then the rules on the values and (with `objects`) on every object the chart renders."""
    return validate_rendered(doc, release_name, set_file_keys, objects=objects)[0]


def validate_rendered(
    doc: Any, release_name: str = "nemo-rl", set_file_keys: frozenset[str] = frozenset(), *, objects: bool = True
) -> tuple[list[Finding], list[dict[str, Any]]]:
    """validate_values' findings, and the objects Helm rendered for them ([] when it could not)."""
    doc = with_helm_keys(doc)
    rendering = None
    if objects and isinstance(doc, dict):
        from generator.validate.objects import Rendering

        rendering = Rendering(doc, release_name)  # Helm renders while the schema and the rules load and run
    schema = [error(e.path, e.message, e.fix) for e in iter_errors(doc)]
    if schema:
        if rendering is not None:
            rendering.rendered()  # the objects only: the rules on them assume schema-valid values
        return schema, rendering.objects if rendering is not None else []
    from generator.validate.rules import run_checks  # imported while Helm renders (a tenth of a second)

    findings = run_checks(doc, release_name, set_file_keys)
    if rendering is None:
        return findings, []
    from generator.validate import api_rules, kueue_topology, scheduling

    found = rendering.findings()
    found += api_rules.check(rendering.objects, doc) + scheduling.check(rendering.objects, doc)
    found += kueue_topology.check(rendering.objects, doc)
    named = {f.key for f in findings}
    for f in found:
        if f.key not in named:
            named.add(f.key)
            findings.append(f)
    return findings, rendering.objects
