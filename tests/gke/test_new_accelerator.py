"""Adding an accelerator profile is editing the table (profiles.PROFILES) and running
scripts/sync.sh: a made-up profile flows through generate, validate, render (real Helm) and infra."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from generator import cli, sync
from generator.core import schema
from generator.core.paths import CHART_DIR
from generator.gke.profiles import PROFILES, AcceleratorProfile
from generator.helm.runner import Helm
from generator.validate import objects
from generator.validate.findings import ERROR
from generator.validate.values import validate_values
from generator.values.schema_tables import synced_schema_text

X100 = AcceleratorProfile(
    key="x100",
    display_name="Made-up X100",
    machine_type="x9-madeupgpu-8g",
    node_label="nvidia-x100-made-up",
    gpus_per_node=8,
    gpu_memory_gb=96,
    host_vcpus=192,
    host_memory_gib=2048,
    local_ssd_gb=6000,
    nccl_tuner_config_path="/usr/local/gib/configs/tuner_config_x9.txtpb",
    min_gke_version="1.33.1-gke.1000000",
    rdma_nics=4,
    shm_size_gib=200,
)
# What differs between machines, each unlike the real rows: 4 GPUs, Arm, 2 NICs, its own
# installer, no tuner file, a ComputeDomain (so no Autopilot).
X4 = AcceleratorProfile(
    key="x4",
    display_name="Made-up X4",
    machine_type="x9-madeupgpu-4g",
    node_label="nvidia-x4-made-up",
    gpus_per_node=4,
    gpu_memory_gb=120,
    host_vcpus=96,
    host_memory_gib=900,
    local_ssd_gb=6000,
    nccl_tuner_config_path="",
    min_gke_version="1.33.1-gke.1000000",
    rdma_nics=2,
    shm_size_gib=200,
    cpu_arch="arm64",
    gib_installer="nccl-rdma-installer-x9.yaml",
    compute_domain=True,
)


def _clear_schema_caches() -> None:
    schema.load_schema.cache_clear()
    schema._validator.cache_clear()  # built from the schema file


@pytest.fixture
def x100(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """The table with X100 added and the schema as scripts/sync.sh then writes it (in tmp_path)."""
    monkeypatch.setitem(PROFILES, X100.key, X100)
    schema_file = tmp_path / "values.schema.json"
    schema_file.write_text(synced_schema_text(schema.SCHEMA_PATH.read_text(encoding="utf-8")), encoding="utf-8")
    monkeypatch.setattr(schema, "SCHEMA_PATH", schema_file)
    monkeypatch.setattr(sync, "SCHEMA_PATH", schema_file)
    # validate renders the chart: give it the chart as scripts/sync.sh then leaves it (the new schema)
    chart = tmp_path / "synced-chart"
    shutil.copytree(CHART_DIR, chart)
    shutil.copy(schema_file, chart / "values.schema.json")
    monkeypatch.setattr(objects, "CHART_DIR", chart)
    _clear_schema_caches()
    yield schema_file
    _clear_schema_caches()


def _generate(tmp_path: Path, *argv: str) -> tuple[Path, dict[str, Any]]:
    out = tmp_path / "values-x100.yaml"
    assert cli.main(["--gpu", "x100", "-o", str(out), *argv]) == 0
    return out, yaml.safe_load(out.read_text(encoding="utf-8"))


def test_schema_enums_and_sync_targets_come_from_the_table(x100: Path) -> None:
    acc = json.loads(x100.read_text(encoding="utf-8"))["properties"]["accelerator"]
    assert acc["properties"]["type"]["enum"][-1] == "x100"
    assert X100.machine_type in acc["properties"]["machineType"]["enum"]
    assert X100.node_label in acc["properties"]["nodeLabel"]["enum"]
    assert "tuner_config_x9.txtpb for X100" in acc["properties"]["ncclTunerConfigPath"]["description"]
    assert "|x100` from its" in acc["description"]
    names = {p.name for p in sync.targets()}
    assert {"x100-values.yaml", "x100-autopilot-values.yaml", "quickstart-x100.yaml", "tutorial-x100.yaml"} <= names


def test_generate_and_validate(x100: Path, tmp_path: Path) -> None:
    out, values = _generate(tmp_path)
    assert values["accelerator"] == {
        "type": "x100",
        "machineType": X100.machine_type,
        "nodeLabel": X100.node_label,
        "gpusPerNode": 8,
        "ncclTunerConfigPath": X100.nccl_tuner_config_path,
        "minGkeVersion": X100.min_gke_version,
        "cpuArch": "amd64",
        "computeDomain": False,
    }
    assert len(values["network"]["rdma"]) == X100.rdma_nics
    assert values["worker"]["shmSize"] == f"{X100.shm_size_gib}Gi"
    assert [f for f in validate_values(values) if f.level == ERROR] == []
    assert cli.main(["validate", str(out)]) == 0
    # A field of another profile is still caught.
    values["accelerator"]["machineType"] = PROFILES["h200"].machine_type
    assert "accelerator.machineType" in {f.key for f in validate_values(values)}


def test_render_with_helm(x100: Path, tmp_path: Path, helm: Helm) -> None:
    chart = tmp_path / "chart"
    shutil.copytree(CHART_DIR, chart)
    shutil.copy(x100, chart / "values.schema.json")  # what scripts/sync.sh writes into the chart
    out, _ = _generate(tmp_path, "--nodes", "4")
    docs = [d for d in yaml.safe_load_all(helm.template([out], chart=chart)) if d]
    rc = next(d for d in docs if d["kind"] == "RayCluster")
    (group,) = rc["spec"]["workerGroupSpecs"]
    spec = group["template"]["spec"]
    assert spec["nodeSelector"]["cloud.google.com/gke-accelerator"] == X100.node_label
    env = {e["name"]: e.get("value") for e in spec["containers"][0].get("env", [])}
    assert env["NCCL_TUNER_CONFIG_PATH"] == X100.nccl_tuner_config_path
    assert group["replicas"] == 4


def test_infra_script(x100: Path, tmp_path: Path) -> None:
    out = tmp_path / "infra.sh"
    argv = ["infra", "--gpu", "x100", "--project", "my-proj-1", "--region", "us-central1", "--zone", "us-central1-a"]
    assert cli.main([*argv, "-o", str(out)]) == 0
    script = out.read_text(encoding="utf-8")
    assert X100.machine_type in script
    assert X100.node_label in script
    assert X100.min_gke_version in script


@pytest.fixture
def x4(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    monkeypatch.setitem(PROFILES, X4.key, X4)
    schema_file = tmp_path / "values.schema.json"
    schema_file.write_text(synced_schema_text(schema.SCHEMA_PATH.read_text(encoding="utf-8")), encoding="utf-8")
    monkeypatch.setattr(schema, "SCHEMA_PATH", schema_file)
    monkeypatch.setattr(sync, "SCHEMA_PATH", schema_file)
    chart = tmp_path / "synced-chart"
    shutil.copytree(CHART_DIR, chart)
    shutil.copy(schema_file, chart / "values.schema.json")
    monkeypatch.setattr(objects, "CHART_DIR", chart)
    _clear_schema_caches()
    yield chart
    _clear_schema_caches()


@pytest.mark.parametrize("network", ["rdma", "dranet"])
def test_a_four_gpu_arm_row_with_dra_flows_through(x4: Path, tmp_path: Path, helm: Helm, network: str) -> None:
    out = tmp_path / "values-x4.yaml"
    assert cli.main(["--gpu", "x4", "--network", network, "-o", str(out)]) == 0
    values = yaml.safe_load(out.read_text(encoding="utf-8"))
    assert values["accelerator"]["cpuArch"] == "arm64" and values["accelerator"]["computeDomain"] is True
    assert "cluster.gpus_per_node=4" in values["grpo"]["overrides"]
    assert "4n" not in values["grpo"]["recipe"] and "n4g" in values["grpo"]["recipe"]  # NeMo RL's 4-GPU recipe
    assert [f for f in validate_values(values) if f.level == ERROR] == []
    docs = [d for d in yaml.safe_load_all(helm.template([out], chart=x4)) if d]
    kinds = {d["kind"] for d in docs}
    assert "ComputeDomain" in kinds and ("ResourceClaimTemplate" in kinds) == (network == "dranet")
    rc = next(d for d in docs if d["kind"] == "RayCluster")
    head = rc["spec"]["headGroupSpec"]["template"]["spec"]
    (group,) = rc["spec"]["workerGroupSpecs"]
    spec = group["template"]["spec"]
    assert spec["nodeSelector"]["kubernetes.io/arch"] == "arm64"
    assert {"key": "kubernetes.io/arch", "operator": "Equal", "value": "arm64", "effect": "NoSchedule"} in spec["tolerations"]
    claims = {c["name"] for c in spec["resourceClaims"]}
    assert claims == {"compute-domain-channel", *(["rdma"] if network == "dranet" else [])}
    assert {c["name"] for c in spec["containers"][0]["resources"]["claims"]} == claims
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert "resourceClaims" not in head and "kubernetes.io/arch" not in (head.get("nodeSelector") or {})
    # NeMo RL forwards the head's environment to every actor: the same, nothing of the architecture.
    assert head["containers"][0]["env"] == spec["containers"][0]["env"]
    assert not any("arm64" in str(e) or "aarch64" in str(e) for e in head["containers"][0]["env"])
    assert "NCCL_TUNER_CONFIG_PATH" not in {e["name"] for e in head["containers"][0]["env"]}
    annotations = group["template"]["metadata"]["annotations"]
    assert ("networking.gke.io/interfaces" in annotations) == (network == "rdma")
    if network == "rdma":
        assert len(values["network"]["rdma"]) == X4.rdma_nics
        assert annotations["networking.gke.io/interfaces"].count("rdma-") == X4.rdma_nics
    # Autopilot: refused with the reason.
    refused = tmp_path / "values-x4-autopilot.yaml"
    assert cli.main(["--gpu", "x4", "--mode", "autopilot", "-o", str(refused)]) != 0
    assert not refused.exists()


def test_infra_script_takes_the_machines_installer(tmp_path: Path) -> None:
    out = tmp_path / "infra.sh"
    argv = ["infra", "--gpu", "gb200", "--project", "my-proj-1", "--region", "us-central1", "--zone", "us-central1-a"]
    argv += ["--reservation", "a4x-r1"]  # A4X capacity is offered by reservation only
    assert cli.main([*argv, "-o", str(out)]) == 0
    script = out.read_text(encoding="utf-8")
    assert "gpudirect-rdma/nccl-rdma-installer-a4x.yaml" in script and "GPUS_PER_NODE='4'" in script
    assert "nccl-rdma-installer.yaml" not in script  # the x86 one
    # Another gIB version: the arm64 image.
    assert cli.main([*argv, "--gib-version", "v1.1.2", "-o", str(out), "--force"]) == 0
    assert "nccl-plugin-gib-arm64:v1.1.2" in out.read_text(encoding="utf-8")
