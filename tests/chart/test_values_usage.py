"""Values usage, as cert-manager's chart lints it: every key of the values schema is read by a
template (or listed below as read only by the Python tools, with what reads it), and every
`.Values` path a template reads is in the schema. A key nothing reads, or a template reading a key
users cannot set, fails here."""

from __future__ import annotations

import json
import re
from typing import Any

from generator.core.names import RAYCLUSTER_MAX, RAYCLUSTER_NAME
from generator.core.paths import CHART_DIR
from generator.core.schema import SCHEMA_PATH

# Keys no template reads, each with what reads it instead.
PYTHON_ONLY = {
    "accelerator.minGkeVersion": "validate (rules/accelerator.py) checks it belongs to the profile; the infra script pins the GKE floor",
    "gke.nodePools": "validate's scheduling model (validate/scheduling.py) reads the pools the infra script wrote into values-infra.yaml",
    "global": "Helm's own key for values shared with subcharts; the chart has none",
}
_REFERENCE = re.compile(r"\.Values\.([A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*)")


def _schema_paths() -> set[str]:
    schema = json.loads(SCHEMA_PATH.read_text())
    defs = schema.get("$defs", {})
    out: set[str] = set()

    def walk(node: dict[str, Any], path: str) -> None:
        if "$ref" in node:
            node = {**defs[node["$ref"].rsplit("/", 1)[1]], **{k: v for k, v in node.items() if k != "$ref"}}
        for key, sub in (node.get("properties") or {}).items():
            child = f"{path}.{key}" if path else key
            out.add(child)
            walk(sub, child)
        if isinstance(node.get("items"), dict):
            walk(node["items"], path)  # a list's items are read through the list

    walk(schema, "")
    return out


def _template_references() -> set[str]:
    text = "".join(p.read_text() for p in sorted((CHART_DIR / "templates").rglob("*")) if p.is_file())
    return set(_REFERENCE.findall(text))


def _related(a: str, b: str) -> bool:
    """a and b are the same key, or one holds the other (toYaml of a section reads all of it)."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def test_every_values_key_is_read_by_a_template_or_named_as_python_only():
    refs = _template_references()
    unread = sorted(
        p
        for p in _schema_paths()
        if not any(_related(p, r) for r in refs)
        and not any(p.startswith(k + ".") for k in PYTHON_ONLY)  # a Python-only key's parts are too
    )
    assert unread == sorted(PYTHON_ONLY), f"keys no template reads (read them, or list them in PYTHON_ONLY with their reader): {unread}"


def test_every_values_path_a_template_reads_is_in_the_schema():
    paths = _schema_paths()
    unknown = sorted(r for r in _template_references() if r not in paths)
    assert unknown == [], f"templates read keys the schema does not declare: {unknown}"


def test_the_templates_name_rule_is_the_python_one():
    """_validate.tpl keeps KubeRay's RayCluster name rule for users of plain Helm; the pattern and
    the length it checks are those of generator/core/names.py."""
    text = (CHART_DIR / "templates" / "_validate.tpl").read_text()
    patterns = re.findall(r'regexMatch "\^([^"]+)\$" \$name', text)
    assert patterns == [RAYCLUSTER_NAME.pattern]
    assert f"gt (len $name) {RAYCLUSTER_MAX}" in text
