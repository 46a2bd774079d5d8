"""A schema error says what the key takes in the key's own words, never a regular expression, and
names the file of the values table when it points there; one mistake gets one fix."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from generator.core.paths import ROOT
from generator.core.schema import VALUES_TABLE
from generator.validate.values import validate_values
from generator.values.build import Options, build
from generator.values.merge import as_helm_sees_it

SCHEMA = json.loads((ROOT / "schemas" / "values.schema.json").read_text(encoding="utf-8"))


def _patterns(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = []
    if isinstance(node, dict):
        if "pattern" in node:
            found.append((path, node))
        for k, v in node.items():
            found += _patterns(v, f"{path}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found += _patterns(v, f"{path}/{i}")
    return found


PATTERNS = _patterns(SCHEMA)


@pytest.mark.parametrize(("where", "node"), PATTERNS, ids=[p for p, _ in PATTERNS])
def test_every_pattern_in_the_schema_is_described_in_words(where, node):
    """The message of a value that fails a pattern is the description beside it (or of the key
    that refers to it): without one it would have nothing to say but the regular expression."""
    assert node.get("description"), f"{where}: a pattern without a description"


def _findings(**changes: Any) -> list[Any]:
    values = build(Options(gpu="h200"))
    for dotted, value in changes.items():
        node = values
        *parents, last = dotted.split("__")
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return [f for f in validate_values(as_helm_sees_it(yaml.safe_load(yaml.safe_dump(values))), objects=False) if f.level == "error"]


# (the change, the key named, words of the key's own description the fix gives)
MISTAKES = [
    ({"storage__lustre__ip": "10.0.0"}, "storage.lustre.ip", "IPv4 address of the instance's mount point"),
    ({"grpo__overrides": ["not an override"]}, "grpo.overrides[0]", "KEY=VALUE, or +KEY=VALUE"),
    ({"grpo__overrides": ["cluster.num_nodes = 2"]}, "grpo.overrides[0]", "no space, quote or backslash"),
    ({"fullnameOverride": "Bad_Name"}, "fullnameOverride", "a DNS-1035 label"),
    ({"workerGroups__0__name": "X_y"}, "workerGroups[0].name", "lowercase letters, digits and '-'"),
    ({"nccl__extraEnv": {"nccl_debug": "INFO"}}, "nccl.extraEnv", "An environment variable name"),
    ({"worker__rayStartParams": {"Num_Cpus": "8"}}, "worker.rayStartParams", "A ray start option"),
    ({"secrets__hfTokenKey": "HF TOKEN"}, "secrets.hfTokenKey", "A Secret key"),
    ({"storage__mountPath": "data"}, "storage.mountPath", "An absolute path"),
]


@pytest.mark.parametrize(("changes", "key", "words"), MISTAKES, ids=[m[1] for m in MISTAKES])
def test_a_value_in_the_wrong_form_gets_the_keys_own_words_not_a_regular_expression(changes, key, words):
    findings = _findings(**changes)
    assert [f.key for f in findings] == [key], findings
    f = findings[0]
    for node_path, node in PATTERNS:
        assert node["pattern"] not in f.message + f.fix, f"{node_path}'s regular expression printed: {f}"
    assert "^" not in f.message + f.fix and "$" not in f.fix
    assert words in f.fix and f.fix.startswith(f"{key} takes: "), f


def test_a_pointer_to_the_values_table_names_its_file():
    findings = _findings(gke__mode="x", kueue__enabled="yes", commonLabels={"a": 1})
    assert [f.key for f in findings] == ["commonLabels.a", "gke.mode", "kueue.enabled"], findings
    assert findings[1].fix == "set gke.mode to one of: standard, autopilot"
    assert findings[2].fix.startswith("kueue.enabled takes: ")  # its own description
    assert findings[0].fix == f"see the values table in {VALUES_TABLE}"  # a map's entry has no description of its own
    assert (ROOT / VALUES_TABLE).is_file()
    for f in findings:
        assert "see the chart's values table" not in f.fix


@pytest.mark.parametrize(
    ("key", "value", "want"),
    [
        ("gpusPerNode", 4, 8),
        ("machineType", "a4-highgpu-8g", "a3-ultragpu-8g"),
        ("nodeLabel", "nvidia-b200", "nvidia-h200-141gb"),
    ],
)
def test_an_accelerator_field_changed_is_one_mistake_with_one_fix(key, value, want):
    """accelerator.gpusPerNode 4 on an 8-GPU machine used to add cluster.gpus_per_node 'set it to 4'
    (and a GPU count fix) beside 'set gpusPerNode back to 8': the fixes contradicted each other."""
    findings = _findings(**{f"accelerator__{key}": value})
    assert [f.key for f in findings] == [f"accelerator.{key}"], findings
    assert findings[0].fix.endswith(f"or set it to {want!r}")
