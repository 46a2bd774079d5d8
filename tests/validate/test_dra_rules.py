"""A4X and managed DRANET rules of `validate`: what GKE refuses (DRA and DRANET on Autopilot,
DRANET below its GKE floor, an interfaces list beside DRANET) and the machine's own fields."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from generator.gke import versions
from generator.gke.profiles import profile
from generator.gke.provisioning import machine_default
from generator.validate.findings import ERROR
from generator.validate.values import validate_values
from generator.values.build import Options, build
from generator.values.worker_groups import parse_groups


def _opts(gpu: str, **kw: Any) -> Options:
    """The generator's options for the machine: A4X is offered by reservation only, so one is named."""
    reserved = {"reservation": "a4x-r1"} if machine_default(profile(gpu)) == "reservation" else {}
    return Options(gpu=gpu, **reserved | kw)


def _errors(values: dict[str, Any]) -> dict[str, str]:
    return {f.key: f.message for f in validate_values(values) if f.level == ERROR}


@pytest.mark.parametrize(("gpu", "network"), [("gb200", "rdma"), ("gb200", "dranet"), ("h200", "dranet"), ("b200", "dranet")])
def test_generated_files_are_valid(gpu: str, network: str) -> None:
    values = build(_opts(gpu, network=network))
    assert _errors(values) == {}
    want = versions.DRANET.version if network == "dranet" else values["accelerator"]["minGkeVersion"]
    assert values["accelerator"]["minGkeVersion"] == want


def test_a4x_on_autopilot_is_refused_with_the_reason() -> None:
    values = build(_opts("gb200"))
    values["gke"]["mode"] = "autopilot"
    errors = _errors(values)
    assert "DRA does not run on Autopilot" in errors["gke.mode"]


def test_dranet_on_autopilot_and_below_its_floor_is_refused() -> None:
    values = build(Options(gpu="h200", network="dranet"))
    low = copy.deepcopy(values)
    low["accelerator"]["minGkeVersion"] = "1.33.5-gke.1000000"
    assert "below managed DRANET's floor 1.34.1-gke.1829001" in _errors(low)["accelerator.minGkeVersion"]
    auto = copy.deepcopy(values)
    auto["gke"]["mode"] = "autopilot"
    assert "Standard only" in _errors(auto)["network.mode"]


def test_dranet_with_an_interfaces_list_is_refused() -> None:
    values = build(Options(gpu="b200", network="dranet"))
    values["workerGroups"][0]["annotations"] = {"networking.gke.io/interfaces": "[]"}
    assert "default-interface eth0 without an interfaces list" in _errors(values)["workerGroups[0].annotations"]


@pytest.mark.parametrize(("key", "bad"), [("cpuArch", "amd64"), ("computeDomain", False), ("gpusPerNode", 8)])
def test_a4x_fields_belong_to_the_machine(key: str, bad: object) -> None:
    values = build(_opts("gb200"))
    values["accelerator"][key] = bad
    assert f"accelerator.{key}" in _errors(values)
    del values["accelerator"]["cpuArch"]  # absent reads as amd64
    assert "accelerator.cpuArch" in _errors(values)


def test_a4x_presets_fit_four_gpu_nodes() -> None:
    """Tensor parallel of training and vLLM within a 4-GPU node, NeMo RL's 4-GPU recipes."""
    for model in ("gemma3-27b", "llama3.2-1b", "qwen2.5-1.5b"):
        grpo = build(_opts("gb200", model=model))["grpo"]
        ov = dict(o.split("=", 1) for o in grpo["overrides"])
        assert int(ov["policy.dtensor_cfg.tensor_parallel_size"]) <= 4
        assert 4 % int(ov["policy.generation.vllm_cfg.tensor_parallel_size"]) == 0
        assert ov["cluster.gpus_per_node"] == "4"


@pytest.mark.parametrize("gpu", ["gb200", "h200"])
def test_the_dranet_claim_counts_one_nic_per_listed_network(gpu: str) -> None:
    # The chart claims exactly len(network.rdma) NICs (Kueue counts only ExactCount requests): a
    # list shorter or longer than the machine's NICs would claim too few, or never be allocated.
    values = build(_opts(gpu, network="dranet"))
    nics = len(values["network"]["rdma"])
    values["network"]["rdma"] = values["network"]["rdma"][:-1]
    message = _errors(values)["network.rdma"]
    assert f"{nics - 1} RDMA networks listed; the DRANET claim asks for one NIC per entry" in message
    assert f"has {nics}" in message


def test_a4x_is_obtained_by_reservation_and_a_hand_edited_spot_group_is_refused_with_the_source() -> None:
    values = build(_opts("gb200"))
    assert [(g["provisioning"], g["reservationName"]) for g in values["workerGroups"]] == [("reservation", "a4x-r1")]
    values["workerGroups"][0].update(provisioning="spot", reservationName="")
    message = _errors(values)["workerGroups[0].provisioning"]
    assert message.startswith("a4x-highgpu-4g (gb200) is offered as reservation only, not spot")
    assert "https://cloud.google.com/ai-hypercomputer/docs/consumption-models" in message


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({}, "--reservation: a4x-highgpu-4g (gb200) nodes come from a reservation (Google Cloud"),
        ({"provisioning": "spot"}, "--provisioning: a4x-highgpu-4g (gb200) is offered as reservation only, not spot"),
        ({"provisioning": "flex-start", "reservation": ""}, "--provisioning: a4x-highgpu-4g (gb200) is offered as reservation only"),
    ],
)
def test_the_generator_refuses_a4x_capacity_google_does_not_offer(kw: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError) as refused:
        build(Options(gpu="gb200", **kw))
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)


def test_machines_offered_every_way_still_default_to_spot() -> None:
    assert build(Options(gpu="h200"))["workerGroups"][0]["provisioning"] == "spot"
    assert [g["provisioning"] for g in build(Options(gpu="h200", groups=parse_groups("a=2,b=1:on-demand")))["workerGroups"]] == [
        "spot",
        "on-demand",
    ]


def test_a_groups_entry_without_provisioning_takes_the_machines_way() -> None:
    """`--groups a=2` names no provisioning: on A4X that is a reservation (the profile row), never
    a refused Spot, and the entry is told how to name the reservation."""
    with pytest.raises(ValueError) as refused:
        build(Options(gpu="gb200", groups=parse_groups("a=2:reservation:r1,b=2")))
    assert str(refused.value).startswith("--groups: group b: a4x-highgpu-4g (gb200) nodes come from a reservation")
    assert str(refused.value).endswith("give the group as b=N:reservation:RESERVATION") and "spot" not in str(refused.value).split("):")[-1]
