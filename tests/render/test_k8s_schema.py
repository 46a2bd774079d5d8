"""schemas/kubernetes/ (kubernetes-validate's schemas prepared once by scripts/sync.sh) judges every
object exactly as kubernetes-validate's own files do, and stays what sync would write."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from generator.render import k8s_schema, manifests

SNAPSHOTS = Path(__file__).resolve().parent.parent / "chart" / "snapshots"
CUSTOM_GROUPS = ("ray.io", "networking.gke.io", "resource.nvidia.com", "external-secrets.io")


def _builtin_objects() -> list[dict[str, Any]]:
    """One rendered object of each built-in kind, from the chart's rendered snapshots."""
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(SNAPSHOTS.glob("*.yaml")):
        for obj in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if obj and not str(obj["apiVersion"]).startswith(CUSTOM_GROUPS):
                seen.setdefault((obj["kind"], obj["apiVersion"]), obj)
    return list(seen.values())


OBJECTS = _builtin_objects()


def _mistakes(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The object as rendered and with typical mistakes: an unknown field, a wrong type, a field
    of the wrong shape deep down, a missing required field."""
    out = [obj]
    bad = copy.deepcopy(obj)
    bad["spec" if "spec" in bad else "metadata"]["unknownField"] = 1
    out.append(bad)
    bad = copy.deepcopy(obj)
    bad["metadata"]["name"] = 5
    bad["metadata"]["labels"] = ["not", "a", "map"]
    out.append(bad)
    text = json.dumps(obj)
    if '"containers"' in text:  # a Pod, a Job: deep in the pod spec
        bad = json.loads(text.replace('"image":', '"imagee":', 1).replace('"name":', '"name": 7, "x":', 1))
        out.append(bad)
    bad = copy.deepcopy(obj)
    bad.pop("kind")
    out.append(bad)
    return out


def test_every_builtin_kind_the_chart_renders_is_compiled():
    assert {(o["kind"], o["apiVersion"]) for o in OBJECTS} <= set(k8s_schema.KINDS)
    assert set(k8s_schema.compiled_index()) == set(k8s_schema.KINDS)


@pytest.mark.parametrize("obj", OBJECTS, ids=lambda o: f"{o['kind']}-{o['apiVersion']}")
def test_compiled_schemas_find_what_kubernetes_validates_files_find(obj, monkeypatch):
    compiled = [manifests.validate_object(o) for o in _mistakes(obj)]
    assert compiled[0] == []
    assert all(found for found in compiled[1:]), "every mistake is found"
    monkeypatch.setattr(k8s_schema, "compiled_index", dict)  # kubernetes-validate's own files
    assert [manifests.validate_object(o) for o in _mistakes(obj)] == compiled


def test_a_version_that_does_not_serve_the_kind_is_skipped_as_before():
    (obj,) = [o for o in OBJECTS if o["kind"] == "ResourceClaimTemplate"] or [None]
    if obj is None:
        pytest.skip("no snapshot renders a ResourceClaimTemplate")
    bad = copy.deepcopy(obj)
    bad["spec"]["unknownField"] = 1
    checkers = [f.checker for f in manifests.validate_object(bad)]
    assert checkers and "k8s-1.31" not in checkers and "k8s-1.37" in checkers


def test_the_compiled_files_are_what_sync_writes_from_the_installed_release():
    index = json.loads(k8s_schema.INDEX.read_text(encoding="utf-8"))
    assert index["kubernetes_validate"] == k8s_schema.installed_version()
    stale = [p.name for p, text in k8s_schema.compiled(manifests.KUBE_VERSIONS).items() if p.read_text(encoding="utf-8") != text]
    assert stale == [], "run scripts/sync.sh"


def test_another_kubernetes_validate_release_reads_its_own_files(monkeypatch):
    monkeypatch.setattr(k8s_schema, "installed_version", lambda: "0.0.0")
    k8s_schema.compiled_index.cache_clear()
    try:
        assert k8s_schema.compiled_index() == {}
    finally:
        k8s_schema.compiled_index.cache_clear()


@pytest.mark.parametrize("path", sorted(p for d in manifests.OWN_SCHEMAS for p in d.glob("*.json")), ids=lambda p: p.name)
def test_the_projects_own_schemas_are_valid_json_schema(path):
    # render no longer checks them on every call (it was a third of its schema loading)
    Draft202012Validator.check_schema(json.loads(path.read_text(encoding="utf-8")))
