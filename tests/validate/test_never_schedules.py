"""Issue 25 class 2, what never schedules beyond node selectors: a Kueue `required` topology level
smaller than one pod set (generator/validate/kueue_topology.py), Autopilot compute classes that do
not exist, and the pools a user's values-infra.yaml describes (generator/validate/scheduling.py)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from generator.validate.findings import Finding
from generator.validate.values import validate_values
from generator.values.merge import as_helm_sees_it

ROOT = Path(__file__).resolve().parents[2]
Edit = Callable[[dict[str, Any]], Any]
HOST = "cloud.google.com/gce-topology-host"
SUBBLOCK = "cloud.google.com/gce-topology-subblock"
BLOCK = "cloud.google.com/gce-topology-block"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"


def example(name: str) -> dict[str, Any]:
    return as_helm_sees_it(yaml.safe_load((ROOT / "examples" / name).read_text()))


def findings(values: dict[str, Any], edit: Edit) -> list[Finding]:
    v = copy.deepcopy(values)
    edit(v)
    return validate_values(v)


def queued(mode: str, level: str) -> Edit:
    def edit(v: dict[str, Any]) -> None:
        v["kueue"].update(enabled=True, queueName="gpu-queue", topology={"mode": mode, "level": level})

    return edit


def group_annotation(annotation: str, level: str, replicas: int | None = None) -> Edit:
    def edit(v: dict[str, Any]) -> None:
        queued("none", BLOCK)(v)
        v["workerGroups"][0]["annotations"] = {annotation: level}
        if replicas is not None:
            v["workerGroups"][0]["replicas"] = replicas

    return edit


def _at(found: list[Finding], key: str) -> list[Finding]:
    return [f for f in found if f.key == key]


# --- Kueue topology-aware scheduling -------------------------------------------------------------


@pytest.mark.parametrize("level", [HOST, "kubernetes.io/hostname"])
def test_a_required_level_of_one_node_never_admits_two_workers(level: str) -> None:
    found = _at(findings(example("tutorial-h200.yaml"), queued("required", level)), "kueue.topology.level")
    assert [f.level for f in found] == ["error"], found
    assert "2 pod(s)" in found[0].message and "1 a3-ultragpu-8g node(s)" in found[0].message
    assert "tas_flavor_snapshot.go" in found[0].message


def test_a_group_of_one_fits_one_host_and_preferred_or_block_always_pass() -> None:
    tutorial = example("tutorial-h200.yaml")
    assert _at(findings(tutorial, group_annotation(REQUIRED, HOST, replicas=1)), f"workerGroups[0].annotations.{REQUIRED}") == []
    for edit in (queued("preferred", HOST), queued("required", BLOCK), queued("required", SUBBLOCK)):
        assert [f for f in findings(tutorial, edit) if "kueue" in f.key] == []


def test_the_users_own_annotation_is_named_and_its_group_counted() -> None:
    found = findings(example("tutorial-h200.yaml"), group_annotation(REQUIRED, HOST, replicas=3))
    [f] = _at(found, f"workerGroups[0].annotations.{REQUIRED}")
    assert f.level == "error" and "3 pod(s)" in f.message


def test_an_a4x_sub_block_holds_eighteen_nodes() -> None:
    gb200 = example("tutorial-gb200.yaml")
    assert _at(findings(gb200, group_annotation(REQUIRED, SUBBLOCK, replicas=18)), f"workerGroups[0].annotations.{REQUIRED}") == []
    [f] = _at(findings(gb200, group_annotation(REQUIRED, SUBBLOCK, replicas=19)), f"workerGroups[0].annotations.{REQUIRED}")
    assert f.level == "error" and "18 a4x-highgpu-4g node(s)" in f.message


def test_without_kueue_the_annotations_are_not_judged() -> None:
    def edit(v: dict[str, Any]) -> None:
        group_annotation(REQUIRED, HOST, replicas=3)(v)
        v["kueue"]["enabled"] = False

    assert _at(findings(example("tutorial-h200.yaml"), edit), f"workerGroups[0].annotations.{REQUIRED}") == []


def test_two_topology_annotations_are_refused_by_kueues_webhook() -> None:
    def edit(v: dict[str, Any]) -> None:
        queued("required", BLOCK)(v)
        v["workerGroups"][0]["annotations"] = {PREFERRED: HOST}

    [f] = _at(findings(example("tutorial-h200.yaml"), edit), f"workerGroups[0].annotations.{PREFERRED}")
    assert f.level == "error" and "more than one topology annotation" in f.message


def test_a_level_the_infra_topology_lacks_is_a_warning() -> None:
    found = findings(example("tutorial-h200.yaml"), group_annotation(REQUIRED, "topology.kubernetes.io/zone"))
    assert [f.level for f in _at(found, f"workerGroups[0].annotations.{REQUIRED}")] == ["warning"]


# --- Autopilot compute classes -------------------------------------------------------------------


def autopilot() -> dict[str, Any]:
    v = example("tutorial-h200.yaml")
    v["gke"].update(mode="autopilot", headComputeClass="Balanced", gpuComputeClass="")
    return v


def gpu_class(name: str) -> Edit:
    return lambda v: v["gke"].update(gpuComputeClass=name)


@pytest.mark.parametrize("name", ["Accelerator", "Performance", "autopilot", "autopilot-spot", "Scale-Out", "Balanced"])
def test_every_built_in_class_is_accepted(name: str) -> None:
    assert _at(findings(autopilot(), gpu_class(name)), "gke.gpuComputeClass") == []


@pytest.mark.parametrize(("name", "level", "hint"), [("performance", "warning", "use Performance"), ("Perfomance", "error", "built-in")])
def test_a_class_that_is_not_built_in_is_named_with_its_fix(name: str, level: str, hint: str) -> None:
    [f] = _at(findings(autopilot(), gpu_class(name)), "gke.gpuComputeClass")
    assert f.level == level and hint in f.fix and repr(name) in f.message


def test_a_custom_class_a_cluster_may_hold_is_a_warning_on_the_head_too() -> None:
    [f] = _at(findings(autopilot(), lambda v: v["gke"].update(headComputeClass="team-cpu")), "gke.headComputeClass")
    assert f.level == "warning" and "kubectl get computeclasses" in f.message
