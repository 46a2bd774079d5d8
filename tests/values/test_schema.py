"""The one values contract: schemas/values.schema.json, enforced by Helm and Python alike."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import yaml
from conftest import CHART, render_text, values_for, with_changes
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from generator import sync
from generator.core.schema import SCHEMA_PATH, dotted, go_regexp, iter_errors, load_schema, resolve_ref, validator_class
from generator.helm.runner import HelmError
from generator.validate.values import validate_values
from generator.values.merge import as_helm_sees_it

ROOT = Path(__file__).resolve().parents[2]


def test_chart_ships_an_identical_copy_of_the_schema():
    assert (CHART / "values.schema.json").read_bytes() == SCHEMA_PATH.read_bytes()


def test_derived_files_are_in_sync_with_their_sources():
    stale = [str(p.relative_to(ROOT)) for p in sync.drifted()]
    assert stale == [], f"run scripts/sync.sh: {stale}"


def test_schema_is_valid_2020_12_and_self_contained():
    schema = load_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)
    refs = [r for r in _walk_values(schema, "$ref")]
    assert refs and all(r.startswith("#/") for r in refs)


def _walk_values(node, key):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == key:
                yield v
            yield from _walk_values(v, key)
    elif isinstance(node, list):
        for v in node:
            yield from _walk_values(v, key)


def _properties(node, path=""):
    if isinstance(node, dict):
        for name, child in node.get("properties", {}).items():
            yield f"{path}.{name}" if path else name, child
            yield from _properties(child, f"{path}.{name}" if path else name)
        for k in ("items", "additionalProperties"):
            if isinstance(node.get(k), dict):
                yield from _properties(node[k], f"{path}[]")
        for name, child in node.get("$defs", {}).items():
            yield from _properties(child, f"$defs.{name}")


def test_every_key_has_a_description():
    missing = [p for p, node in _properties(load_schema()) if "description" not in node]
    assert missing == []


def test_objects_users_type_into_reject_unknown_keys():
    # rayStartParams: any `ray start` flag, a few of which (num-cpus, ...) are checked
    open_maps = {"global", "commonLabels", "serviceAccount.annotations", "nccl.extraEnv", "head.rayStartParams", "worker.rayStartParams"}
    loose = []
    for path, raw in _properties(load_schema()):
        node = resolve_ref(raw)
        if node.get("type") == "object" and "properties" in node and node.get("additionalProperties") is not False:
            loose.append(path)
    assert [p for p in loose if p not in open_maps] == []


@pytest.mark.parametrize("gpu", ["b200", "h200"])
@pytest.mark.parametrize("nodes", [1, 2, 8, 64])
def test_generated_values_satisfy_the_schema(gpu, nodes):
    assert list(iter_errors(values_for(gpu, nodes=nodes))) == []


BAD = {
    "sample-typo-values-prefix": ({"values": {"additionalWorkerGroups": {"worker-grp-0": {"replicas": 2}}}}, "values"),
    "unknown-nested-key": (
        {"workerGroups": [{"name": "gpu", "replicas": 2, "provisioning": "spot", "replica": 3}]},
        "workerGroups[0].replica",
    ),
    "latest-tag": ({"image": {"repository": "nvcr.io/nvidia/nemo-rl", "tag": "latest"}}, "image.tag"),
    "bad-accelerator": ({"accelerator": {**values_for()["accelerator"], "type": "a100"}}, "accelerator.type"),
    "replicas-zero": ({"workerGroups": [{"name": "gpu", "replicas": 0, "provisioning": "spot"}]}, "workerGroups[0].replicas"),
    "provisioning-enum": (
        {"workerGroups": [{"name": "gpu", "replicas": 1, "provisioning": "preemptible"}]},
        "workerGroups[0].provisioning",
    ),
    "replicas-string": ({"workerGroups": [{"name": "gpu", "replicas": "2", "provisioning": "spot"}]}, "workerGroups[0].replicas"),
    "bad-ip": (
        {"storage": {**values_for()["storage"], "lustre": {**values_for()["storage"]["lustre"], "ip": "10.0.0"}}},
        "storage.lustre.ip",
    ),
    "relative-mount": ({"storage": {**values_for()["storage"], "mountPath": "data"}}, "storage.mountPath"),
    "network-mode": ({"network": {**values_for()["network"], "mode": "infiniband"}}, "network.mode"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_python_rejects_bad_values_naming_the_key(case):
    change, key = BAD[case]
    doc = {**values_for(), **change}
    errors = list(iter_errors(doc))
    assert errors, case
    assert any(e.path == key for e in errors), [f"{e.path}: {e.message}" for e in errors]


@pytest.mark.parametrize("case", sorted(BAD))
def test_helm_rejects_the_same_bad_values(helm_major, case, tmp_path):
    change, _ = BAD[case]
    with pytest.raises(HelmError, match="values don't meet the specifications of the schema"):
        render_text(helm_major, [change], tmp_dir=tmp_path)


def test_sample_set_typo_fails_in_helm(helm_major):
    with pytest.raises(HelmError, match="values"):
        render_text(helm_major, set_values=["values.additionalWorkerGroups.worker-grp-0.replicas=2"])


def test_unknown_top_level_key_message_lists_allowed_keys():
    (e,) = [e for e in iter_errors({**values_for(), "workerGroup": []})]
    assert e.path == "workerGroup"
    assert "workerGroups" in e.message


def test_schema_json_is_formatted_for_review():
    # One source, kept readable: valid JSON and ends with a newline.
    text = SCHEMA_PATH.read_text()
    json.loads(text)
    assert text.endswith("}\n")


def test_a_valid_change_still_renders(helm_major):
    v = with_changes(values_for(), {"nccl.debug": True})
    assert "NCCL_DEBUG" in render_text(helm_major, [v])


@pytest.mark.parametrize("key", sorted(load_schema()["properties"]))
def test_a_nulled_section_fails_in_helm_exactly_when_validate_reports_it(helm_major, key, tmp_path):
    # `key: null` in a values file deletes the chart's default. Either the chart still renders and
    # validate is content, or Helm's schema check names the key and validate reports it too: never
    # a template crash that validate waved through.
    doc = {**values_for(), key: None}
    try:
        render_text(helm_major, [doc], tmp_dir=tmp_path)
        helm_error = ""
    except HelmError as e:
        helm_error = str(e)
    errors = [f.key for f in validate_values(as_helm_sees_it(doc)) if f.level == "error"]
    if not helm_error:
        assert errors == []
    else:
        assert "values don't meet the specifications of the schema" in helm_error, helm_error[-300:]
        assert re.search(rf"\b{key}\b", helm_error.split("schema", 1)[1]), helm_error[-300:]
        assert errors == [key]


# Helm 3 checks values with a draft-07 validator: keywords that only 2020-12 knows would be skipped
# there silently, and draft-07 ignores every keyword beside a `$ref`.
NEWER_THAN_DRAFT_07 = {
    "prefixItems", "unevaluatedProperties", "unevaluatedItems", "dependentRequired", "dependentSchemas",
    "minContains", "maxContains", "$anchor", "$dynamicRef", "$dynamicAnchor", "$recursiveRef",
}  # fmt: skip
ANNOTATIONS = {"description", "title", "default", "examples", "$comment"}


def _schemas(node, path="#"):
    if isinstance(node, dict):
        yield path, node
        for k, v in node.items():
            yield from _schemas(v, f"{path}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _schemas(v, f"{path}/{i}")


def test_schema_uses_only_keywords_helm_3_also_enforces():
    for path, node in _schemas(load_schema()):
        if path.endswith("/properties") or path.endswith("/$defs"):
            continue  # keys here are names, not keywords
        assert not NEWER_THAN_DRAFT_07 & set(node), (path, NEWER_THAN_DRAFT_07 & set(node))
        if "$ref" in node:
            assert set(node) - {"$ref"} <= ANNOTATIONS, (path, sorted(node))


# --- patterns match as Helm's Go regexps do --------------------------------------------------

PATTERNS = sorted({p for _, node in _schemas(load_schema()) if isinstance(p := node.get("pattern"), str)})


@pytest.mark.parametrize("pattern", PATTERNS)
@settings(max_examples=25, deadline=None, derandomize=True)
@given(data=st.data())
def test_every_schema_pattern_refuses_a_trailing_newline_as_go_does(pattern, data):
    # Go's `$` is the end of the text; Python's re also matches it before a final "\n". Helm would
    # refuse "value\n" for every anchored pattern, so Python's check must as well.
    assert pattern.startswith("^") and pattern.endswith("$"), pattern
    value = data.draw(st.from_regex(pattern, fullmatch=True).filter(lambda s: "\n" not in s))
    check = validator_class()({"type": "string", "pattern": pattern})
    assert check.is_valid(value), value
    assert not check.is_valid(value + "\n"), value


@pytest.mark.parametrize(
    ("pattern", "value", "go"),
    [("^a$", "a", True), ("^a$", "a\n", False), (r"^a\$$", "a$", True), ("^[$]$", "$", True), ("^[]$]+$", "]$", True)],
)
def test_go_regexp_rewrites_only_the_end_anchor(pattern, value, go):
    assert bool(go_regexp(pattern).search(value)) is go


TRAILING_NEWLINE = {
    "fullnameOverride": {"fullnameOverride": "myrun\n"},
    "image.tag": {"image": {"tag": "v0.7.0\n"}},
    "storage.mountPath": {"storage": {"mountPath": "/data\n"}},
    "grpo.runName": {"grpo": {"runName": "run\n"}},
    "nccl.extraEnv": {"nccl": {"extraEnv": {"NCCL_X\n": "1"}}},
}


@pytest.mark.parametrize("key", sorted(TRAILING_NEWLINE))
def test_a_trailing_newline_fails_validate_exactly_as_it_fails_helm(helm_major, key, tmp_path):
    change = TRAILING_NEWLINE[key]
    with pytest.raises(HelmError, match="values don't meet the specifications of the schema"):
        render_text(helm_major, [change], tmp_dir=tmp_path)
    errors = [f.key for f in validate_values(as_helm_sees_it(change)) if f.level == "error"]
    assert errors and all(e.startswith(key) for e in errors), errors


# --- a nulled map fails validate whenever it fails Helm --------------------------------------


def _everything_on() -> dict:
    """A generated file with every optional feature the templates branch on switched on."""
    return with_changes(
        values_for(),
        {
            "logging.fluentBit.enabled": True,
            "access.networkPolicy.allowFrom": [{"podSelector": {"matchLabels": {"team": "ml"}}}],
            "kueue": {"enabled": True, "queueName": "gpu"},
            "secrets": {"source": "external", "existingSecret": "", "hfTokenKey": "HF_TOKEN",
                        "external": {"storeName": "gsm", "hfTokenRemoteKey": "hf-token"}},
            "image.preload": {"diskImage": "nemo-rl-disk", "project": "my-project"},
        },
    )  # fmt: skip


def _nested_containers(node, path=()):
    """Paths of every map or list below the top level (top-level sections have their own test)."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for k, v in items:
        if isinstance(v, dict | list):
            if path and isinstance(node, dict):
                yield (*path, k)
            yield from _nested_containers(v, (*path, k))


def test_a_nulled_nested_map_fails_validate_whenever_helm_fails(helms, tmp_path):
    # `key: null` deletes the chart's default; a template that reads the map then crashes. Null
    # each nested map and list in turn: whenever real Helm fails, validate must report the key
    # (or one below it), so no broken file passes validate.
    helm = helms[0]
    waved_through = []
    for name, base in (("generated", values_for()), ("everything-on", _everything_on())):
        assert [f for f in validate_values(base) if f.level == "error"] == [], name
        for path in _nested_containers(base):
            doc = copy.deepcopy(base)
            node = doc
            for part in path[:-1]:
                node = node[part]
            node[path[-1]] = None
            file = tmp_path / f"{name}-{'.'.join(map(str, path))}.yaml"
            file.write_text(yaml.safe_dump(doc))
            try:
                helm.template([file])
                continue
            except HelmError as e:
                helm_error = str(e).splitlines()[0]
            key = dotted(path)
            errors = [f.key for f in validate_values(as_helm_sees_it(doc)) if f.level == "error"]
            if not any(e == key or e.startswith((key + ".", key + "[")) for e in errors):
                waved_through.append(f"{name}: {key}: helm: {helm_error[:160]}; validate: {errors}")
    assert waved_through == []
