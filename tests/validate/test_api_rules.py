"""The API server's refusals (generator/validate/api_rules.py) and the pods no node pool holds
(generator/validate/scheduling.py), each reported once with the values key that causes it; the
legitimate edits beside them pass. tests/cluster/test_differential.py holds both to the real judges."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from generator.infra.options import InfraOptions
from generator.validate import api_rules, scheduling
from generator.validate.values import validate_values
from generator.values.merge import as_helm_sees_it
from testbed import nodes as bed_nodes

ROOT = Path(__file__).resolve().parents[2]
Edit = Callable[[dict[str, Any]], Any]


def tutorial() -> dict[str, Any]:
    return as_helm_sees_it(yaml.safe_load((ROOT / "examples" / "tutorial-h200.yaml").read_text()))


def _errors(edit: Edit) -> list[tuple[str, str]]:
    v = copy.deepcopy(tutorial())
    edit(v)
    return [(f.key, f.message) for f in validate_values(v) if f.level == "error"]


def _fluent_bit_limit(v: dict[str, Any]) -> None:
    v["logging"]["fluentBit"]["enabled"] = True
    v["logging"]["fluentBit"]["resources"]["limits"]["memory"] = "64Mi"


REFUSED: list[tuple[str, Edit, str]] = [
    ("label-key-prefix", lambda v: v.update(commonLabels={"Team.com/x": "a"}), "commonLabels.Team.com/x"),
    ("label-value-space", lambda v: v.update(commonLabels={"team": "a b"}), "commonLabels.team"),
    ("name-override-label", lambda v: v.update(nameOverride="My App"), "nameOverride"),
    (
        "kubectl-taint-syntax",
        lambda v: v["workerGroups"][0].update(tolerations=[{"key": "nvidia.com/gpu=present:NoSchedule", "operator": "Exists"}]),
        "workerGroups[0].tolerations[0].key",
    ),
    (
        "peer-ipblock-and-selector",
        lambda v: v["access"]["networkPolicy"].update(
            allowFrom=[{"ipBlock": {"cidr": "10.0.0.0/8"}, "namespaceSelector": {"matchLabels": {"a": "b"}}}]
        ),
        "access.networkPolicy.allowFrom[0]",
    ),
    (
        "peer-selector-value",
        lambda v: v["access"]["networkPolicy"].update(allowFrom=[{"namespaceSelector": {"matchLabels": {"team": "a/b"}}}]),
        "access.networkPolicy.allowFrom[0].namespaceSelector.matchLabels.team",
    ),
    ("sidecar-limit-below-request", _fluent_bit_limit, "logging.fluentBit.resources.limits.memory"),
    ("service-account-name", lambda v: v["serviceAccount"].update(create=True, name="My_SA"), "serviceAccount.name"),
    (
        "instance-type-no-pool-has",
        lambda v: v["workerGroups"][0]["nodeSelector"].update({"node.kubernetes.io/instance-type": "a3-highgpu-8g"}),
        "workerGroups[0].nodeSelector.node.kubernetes.io/instance-type",
    ),
    (
        "driver-version",
        lambda v: v["workerGroups"][0]["nodeSelector"].update({"cloud.google.com/gke-gpu-driver-version": "default"}),
        "workerGroups[0].nodeSelector.cloud.google.com/gke-gpu-driver-version",
    ),
    (
        "gpu-label-on-the-cpu-head",
        lambda v: v["head"]["nodeSelector"].update({"cloud.google.com/gke-accelerator": "nvidia-h200-141gb"}),
        "head.nodeSelector.cloud.google.com/gke-accelerator",
    ),
    (
        "head-above-cpu-pool",
        lambda v: v["head"]["resources"].update(requests={"cpu": "20", "memory": "24Gi"}, limits={"cpu": "20", "memory": "36Gi"}),
        "head.resources.requests.cpu",
    ),
]


@pytest.mark.parametrize(("edit", "key"), [pytest.param(e, k, id=i) for i, e, k in REFUSED])
def test_each_refusal_is_one_error_naming_its_key(edit: Edit, key: str) -> None:
    errors = _errors(edit)
    assert [k for k, _ in errors] == [key], errors


ACCEPTED: list[tuple[str, Edit]] = [
    ("label-with-prefix", lambda v: v.update(commonLabels={"example.com/team": "ML_team-1.a"})),
    ("empty-label-value", lambda v: v.update(commonLabels={"team": ""})),
    ("toleration-with-key", lambda v: v["head"].update(tolerations=[{"key": "dedicated", "operator": "Equal", "value": "ml"}])),
    ("peer-ipblock-alone", lambda v: v["access"]["networkPolicy"].update(allowFrom=[{"ipBlock": {"cidr": "10.0.0.0/8"}}])),
    ("the-gpu-pool-by-name", lambda v: v["workerGroups"][0]["nodeSelector"].update({"cloud.google.com/gke-nodepool": "gpu-h200"})),
    ("the-cpu-pool-by-name", lambda v: v["head"]["nodeSelector"].update({"cloud.google.com/gke-nodepool": "default-pool"})),
    (
        "head-on-a-gpu-node-it-tolerates",
        lambda v: v["head"].update(
            nodeSelector={"cloud.google.com/gke-accelerator": "nvidia-h200-141gb"},
            tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        ),
    ),
]


@pytest.mark.parametrize("edit", [pytest.param(e, id=i) for i, e in ACCEPTED])
def test_legitimate_edits_pass(edit: Edit) -> None:
    assert _errors(edit) == []


@pytest.mark.parametrize(("label", "value"), [("example.com/team", "ml"), ("cloud.google.com/gke-nodepool", "system")])
def test_a_label_or_pool_of_the_users_own_is_a_warning_not_an_error(label: str, value: str) -> None:
    v = copy.deepcopy(tutorial())
    v["head"]["nodeSelector"] = {label: value}
    found = [f for f in validate_values(v) if f.key == f"head.nodeSelector.{label}"]
    assert [f.level for f in found] == ["warning"], found


def test_the_pools_validate_assumes_are_the_nodes_the_test_bed_builds() -> None:
    """One home for node labels and taints: validate's model and the simulated nodes agree on each label and taint."""
    values = tutorial()
    o = InfraOptions(gpu="h200", project="p", region="us-central1", zone="us-central1-b", nodes=2)
    nodes = bed_nodes.cluster_nodes(o)
    pools = {p.name: p for p in scheduling.node_pools(values)}
    assert len(pools) == 2
    for node in nodes:
        labels = node["metadata"]["labels"]
        pool = pools[labels["cloud.google.com/gke-nodepool"]]
        model = {k: v for k, v in pool.labels.items() if v is not None}
        assert {k: labels[k] for k in model} == model
        assert set(labels) <= set(pool.labels) | {"kubernetes.io/hostname"}
        assert sorted((t.key, t.value, t.effect) for t in pool.taints) == sorted(
            (t["key"], t["value"], t["effect"]) for t in node["spec"]["taints"]
        )


@pytest.mark.parametrize(
    ("key", "problem"),
    [("a/b/c", True), ("example.com/x", False), ("Example.com/x", True), ("x" * 64, True), ("-x", True), ("a_b.c-d", False), ("/x", True)],
)
def test_label_keys_as_is_qualified_name_judges_them(key: str, problem: bool) -> None:
    assert bool(api_rules.label_key_problem(key)) is problem


def test_extended_resources_cannot_be_overcommitted() -> None:
    assert api_rules.overcommit_allowed("cpu") and api_rules.overcommit_allowed("example.kubernetes.io/x")
    assert not api_rules.overcommit_allowed("nvidia.com/gpu") and not api_rules.overcommit_allowed("hugepages-2Mi")
