"""NeMo RL's start-up rules as `validate` applies them, each with the release code it follows
(NVIDIA-NeMo/RL at the tag named; read in the source, not copied)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import values_for

from generator.nemo_rl.placement import VENV_RESERVATION_CPUS, placement
from generator.validate.findings import ERROR
from generator.validate.values import validate_values


def errors(values: dict[str, Any]) -> dict[str, str]:
    return {f.key: f.message for f in validate_values(values, objects=False) if f.level == ERROR}


def with_extra(values: dict[str, Any], *overrides: str) -> dict[str, Any]:
    values["grpo"]["extraOverrides"] = list(overrides)
    return values


# --- worker Ray CPUs: the placement groups' bundles + 1 for the per-node virtualenv reservation ----
# nemo_rl/utils/venvs.py create_local_venv_on_each_node (v0.5.0 to v0.7.0): one STRICT_SPREAD
# placement group of {CPU: 1} per alive node, `ray.get(pg.ready())` without a timeout, made by
# RayWorkerGroup (nemo_rl/distributed/worker_groups.py) after the virtual clusters hold their bundles.


@pytest.mark.parametrize(
    ("colocated", "gen_nodes", "gen_gpn", "backend", "need"),
    [
        (True, None, None, "vllm", 2 * 8 + 1),  # {CPU: 2, GPU: 1} per GPU with colocated vLLM
        (True, None, None, "megatron", 8 + 1),  # {CPU: 1, GPU: 1} with Megatron generation
        (False, 1, 8, "vllm", 8 + 1),  # dedicated: {CPU: 1, GPU: 1}
    ],
)
def test_each_gpu_node_needs_one_cpu_beyond_its_bundles(colocated, gen_nodes, gen_gpn, backend, need):
    placed = placement(2, 8, colocated=colocated, generation_nodes=gen_nodes, generation_gpus_per_node=gen_gpn, backend=backend)
    assert placed.worker_ray_cpus() == need and VENV_RESERVATION_CPUS == 1


def test_one_node_split_holds_every_gpu_bundle_of_the_node():
    placed = placement(1, 8, colocated=False, generation_nodes=None, generation_gpus_per_node=3)
    assert placed.node_cpus() == [8] and placed.worker_ray_cpus() == 9


SEED_SPLIT = {"generation_nodes": 1}  # the seed tutorial's 1 vLLM node + 1 training node


@pytest.mark.parametrize(
    ("opts", "cpus", "refused"),
    [
        (SEED_SPLIT, 8, True),
        (SEED_SPLIT, 9, False),
        ({}, 16, True),  # the default: colocated on 2 nodes, as NeMo RL's Gemma 3 27B recipe
        ({}, 17, False),
        ({"model": "qwen2.5-1.5b", "nodes": 1}, 16, True),
    ],
)
def test_validate_counts_the_reservation_with_dedicated_and_colocated_generation(opts, cpus, refused):
    values = values_for(**opts)
    values["worker"]["rayStartParams"] = {"num-cpus": str(cpus)}
    found = errors(values).get("worker.rayStartParams.num-cpus", "")
    assert bool(found) == refused, found
    if refused:
        assert "STRICT_SPREAD {CPU: 1}" in found and "waits forever" in found


# --- make_sequence_length_divisible_by: NeMo RL pads up to a multiple of it ------------------------
# nemo_rl/data/llm_message_utils.py batched_message_log_to_flat_message (v0.7.0) rounds the batch's
# longest sequence up to a multiple of it; no assert ties it to TP. The base configs default it to
# ${policy.dtensor_cfg.tensor_parallel_size}.


@pytest.mark.parametrize(("value", "refused"), [(8, False), (16, False), (64, False), (4, True), (12, True)])
def test_sequence_divisor_is_any_multiple_of_tp(value, refused):
    found = errors(with_extra(values_for(), f"policy.make_sequence_length_divisible_by={value}"))
    assert ("grpo.overrides[policy.make_sequence_length_divisible_by]" in found) == refused


# --- vLLM TP x PP may span nodes ----------------------------------------------------------------
# nemo_rl/models/generation/vllm/vllm_generation.py VllmGeneration.__init__ (v0.5.0 to v0.7.0):
# `needs_cross_node_parallelism = model_parallel_size > cluster.num_gpus_per_node` builds one
# unified placement group over the nodes; it asserts only world_size % (TP x PP) == 0.


def test_vllm_tp_over_two_generation_nodes_is_accepted():
    values = with_extra(values_for(nodes=4, generation_nodes=2), "policy.generation.vllm_cfg.tensor_parallel_size=16")
    assert not [k for k in errors(values) if "vllm_cfg" in k]


def test_vllm_tp_larger_than_the_generation_gpus_is_refused():
    values = with_extra(values_for(**SEED_SPLIT), "policy.generation.vllm_cfg.tensor_parallel_size=16")  # 1 generation node
    assert "not divisible by vLLM TP 16" in errors(values)["grpo.overrides[policy.generation.vllm_cfg.tensor_parallel_size]"]


def test_vllm_tp_within_a_node_must_divide_it():
    values = with_extra(values_for(nodes=4, generation_nodes=3), "policy.generation.vllm_cfg.tensor_parallel_size=3")
    assert "does not divide the 8 GPUs of a node" in errors(values)["grpo.overrides[policy.generation.vllm_cfg.tensor_parallel_size]"]


# --- force_on_policy_ratio lifts the TP >= 4 micro/logprob rule -----------------------------------
# nemo_rl/models/policy/lm_policy.py Policy.__init__ (v0.6.0, v0.7.0) asserts
# train_micro_batch_size == logprob_batch_size with TP >= 4 unless NRL_IGNORE_TP_ACCURACY_CHECK is
# set; nemo_rl/algorithms/grpo.py setup sets it when loss_fn.force_on_policy_ratio is true (before
# the policy is built) after asserting train_global_batch_size == prompts x generations.


def test_force_on_policy_ratio_lifts_the_tp_rule():
    refused = errors(with_extra(values_for(), "policy.logprob_batch_size=2"))
    assert "grpo.overrides[policy.logprob_batch_size]" in refused
    lifted = with_extra(
        values_for(), "loss_fn.force_on_policy_ratio=true", "policy.train_global_batch_size=1024", "policy.logprob_batch_size=2"
    )
    assert errors(lifted) == {}


def test_force_on_policy_ratio_needs_the_whole_step_in_one_batch():
    found = errors(with_extra(values_for(), "loss_fn.force_on_policy_ratio=true"))
    assert "equal the 1024 samples per step" in found["grpo.overrides[policy.train_global_batch_size]"]


# --- dedicated generation on one node: num_nodes null or 1 ---------------------------------------
# nemo_rl/algorithms/grpo.py setup (v0.5.0 to v0.7.0), `policy_nodes == 1`: "num_nodes must be 1 or
# set to null when policy_nodes = 1 and inference is non-colocated"; gpus_per_node > 0 and below
# the node's GPUs ("No enough GPUs for training").


@pytest.mark.parametrize(("gen_nodes", "refused"), [("null", False), ("1", False), ("2", True), ("0", True)])
def test_one_node_generation_takes_null_or_one_node(gen_nodes, refused):
    values = with_extra(
        values_for(model="qwen2.5-1.5b", nodes=1),
        "policy.generation.colocated.enabled=false",
        f"policy.generation.colocated.resources.num_nodes={gen_nodes}",
        "policy.generation.colocated.resources.gpus_per_node=4",
    )
    found = errors(values)
    assert ("grpo.overrides[policy.generation.colocated.resources.num_nodes]" in found) == refused, found


# --- several nodes: training keeps at least one --------------------------------------------------
# v0.7.0 nemo_rl/algorithms/grpo.py setup: "Non-colocated mode requires train_nodes > 0 and
# inference_nodes > 0"; v0.5.0/v0.6.0 build an empty training cluster instead (rehearse words both).


def test_generation_on_every_node_is_refused():
    found = errors(with_extra(values_for(**SEED_SPLIT), "policy.generation.colocated.resources.num_nodes=2"))
    assert "training gets the rest" in found["grpo.overrides[policy.generation.colocated.resources.num_nodes]"]


# --- cluster.segment_size -----------------------------------------------------------------------
# v0.7.0's examples/configs/grpo_math_1B.yaml sets `cluster.segment_size: null`; with a size,
# grpo.setup calls prepare_segment_topology (nemo_rl/distributed/virtual_cluster.py), which finds
# no NVLink domains on GKE's KubeRay nodes and falls back to unordered placement.


def test_segment_size_left_to_the_recipe_is_null_and_not_reported():
    values = values_for()
    values["grpo"]["overrides"] = [o for o in values["grpo"]["overrides"] if not o.startswith("cluster.segment_size=")]
    assert not [f for f in validate_values(values, objects=False) if "segment_size" in f.key]


def test_a_segment_size_is_a_warning_naming_the_base_value():
    found = [f for f in validate_values(with_extra(values_for(), "cluster.segment_size=4"), objects=False) if "segment_size" in f.key]
    assert [f.level for f in found] == ["warning"] and "the base config's value" in found[0].fix
