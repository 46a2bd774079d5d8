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


# --- the pools of the user's values-infra.yaml ---------------------------------------------------


def infra_overlay(tmp_path: Path, *args: str) -> Path:
    """The values-infra.yaml the script `python -m generator infra ARGS` writes: the heredoc its
    overlay step fills, with the Lustre address the script reads from gcloud."""
    from generator import cli

    script = tmp_path / "infra.sh"
    base = ["infra", "--project", "my-project", "--region", "us-central1", "--zone", "us-central1-b"]
    assert cli.main([*base, *args, "-o", str(script), "--force"]) == 0
    text = script.read_text()
    start = text.index('overlay="$(\n  cat <<EOF\n') + len('overlay="$(\n  cat <<EOF\n')
    body = text[start : text.index("\nEOF\n", start)]
    out = tmp_path / "values-infra.yaml"
    out.write_text(body.replace("$lustre_ip", "10.90.0.5").replace("$lustre_fs", "lfs") + "\n")
    return out


def validate_with(values: Path, overlay: Path, *sets: str) -> list[Finding]:
    from generator.values.layers import configurations

    [config] = configurations([values], [overlay], [("--set", s) for s in sets], True)
    return validate_values(config.values, "nemo-rl", config.set_file_keys)


def test_the_overlay_describes_the_pools_the_script_creates(tmp_path: Path) -> None:
    overlay = yaml.safe_load(infra_overlay(tmp_path, "--gpu", "h200", "--provisioning", "on-demand").read_text())
    pools = {p["name"]: p for p in overlay["gke"]["nodePools"]}
    assert list(pools) == ["default-pool", "gpu-h200"]
    assert pools["gpu-h200"]["machineType"] == "a3-ultragpu-8g"
    assert pools["gpu-h200"]["labels"]["cloud.google.com/gke-accelerator"] == "nvidia-h200-141gb"
    assert "cloud.google.com/gke-spot" not in pools["gpu-h200"]["labels"]
    assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"} in pools["gpu-h200"]["taints"]
    autopilot = yaml.safe_load(infra_overlay(tmp_path, "--gpu", "h200", "--mode", "autopilot").read_text())
    assert "gke" not in autopilot  # Autopilot has no node pools


def test_the_example_validates_with_the_overlay_of_its_cluster(tmp_path: Path) -> None:
    overlay = infra_overlay(tmp_path, "--gpu", "h200", "--nodes", "2")
    found = validate_with(ROOT / "examples" / "tutorial-h200.yaml", overlay)
    assert [f for f in found if f.level == "error"] == []


def test_a_group_the_cluster_has_no_pool_for_is_found_only_with_the_overlay(tmp_path: Path) -> None:
    # The cluster's GPU pool is on-demand; the values still ask for Spot nodes (the generator's default).
    overlay = infra_overlay(tmp_path, "--gpu", "h200", "--provisioning", "on-demand")
    values = ROOT / "examples" / "tutorial-h200.yaml"
    assert yaml.safe_load(values.read_text())["workerGroups"][0]["provisioning"] == "spot"
    found = [f for f in validate_with(values, overlay) if f.level == "error"]
    assert [f.key for f in found] == ["workerGroups[0].provisioning"], found
    assert "gke-spot" in found[0].message
    assert any("gke.nodePools" in f.message for f in found)


def test_a_node_pool_name_the_overlay_does_not_create_is_an_error(tmp_path: Path) -> None:
    overlay = infra_overlay(tmp_path, "--gpu", "h200")
    values = ROOT / "examples" / "tutorial-h200.yaml"
    wrong = validate_with(values, overlay, "workerGroups[0].nodeSelector.cloud\\.google\\.com/gke-nodepool=gpu-pool")
    [f] = [f for f in wrong if f.key == "workerGroups[0].nodeSelector.cloud.google.com/gke-nodepool"]
    assert f.level == "error" and "gpu-h200" in f.fix
    right = validate_with(values, overlay, "workerGroups[0].nodeSelector.cloud\\.google\\.com/gke-nodepool=gpu-h200")
    assert [f for f in right if "gke-nodepool" in f.key] == []
    # without the overlay, a pool name validate does not know may be the user's own: a warning
    alone = findings(
        example("tutorial-h200.yaml"), lambda v: v["workerGroups"][0]["nodeSelector"].update({"cloud.google.com/gke-nodepool": "gpu-pool"})
    )
    assert [f.level for f in alone if "gke-nodepool" in f.key] == ["warning"]


@pytest.mark.parametrize(
    ("caps", "level"), [(["DAC_OVERRIDE"], None), (["NET_RAW"], "error"), (["SYS_ADMIN"], "error"), (["SYS_PTRACE"], "warning")]
)
def test_autopilot_judges_the_heads_capabilities_too(caps: list[str], level: str | None) -> None:
    found = _at(
        findings(autopilot(), lambda v: v["head"]["securityContext"]["capabilities"].update(add=caps)),
        "head.securityContext.capabilities.add",
    )
    assert [f.level for f in found] == ([level] if level else [])


def test_a_reservation_the_cluster_does_not_consume_names_the_groups_reservation(tmp_path: Path) -> None:
    overlay = infra_overlay(tmp_path, "--gpu", "h200", "--provisioning", "reservation", "--reservation", "r1")
    values = ROOT / "examples" / "tutorial-h200.yaml"
    sets = ("workerGroups[0].provisioning=reservation", "workerGroups[0].reservationName=r2")
    found = [f for f in validate_with(values, overlay, *sets) if f.level == "error"]
    assert [f.key for f in found] == ["workerGroups[0].reservationName"], found
    assert [f for f in validate_with(values, overlay, sets[0], "workerGroups[0].reservationName=r1") if f.level == "error"] == []
