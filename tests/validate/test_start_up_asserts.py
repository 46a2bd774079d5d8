"""The rules of generator/validate/rules/nemo_rl_asserts.py: for each class of start-up assert a
values file that breaks it is refused with the values key to change, and one that obeys it passes.
The release code each follows is cited in the rule (vendor/nemo-rl-src/<tag>/)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import values_for

from generator.validate.findings import ERROR
from generator.validate.values import validate_values


def errors(values: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for f in validate_values(values, objects=False):
        if f.level == ERROR:
            out[f.key] = f"{out[f.key]} | {f.message}" if f.key in out else f.message
    return out


def run(*overrides: str, release: str = "v0.7.0", **opts: Any) -> dict[str, str]:
    """A generated file (Llama 3.2 1B unless `model` is given) with the overrides added."""
    values = values_for(release=release, **{"model": "llama3.2-1b", **opts})
    values["grpo"]["extraOverrides"] = list(overrides)
    return errors(values)


def where(key: str) -> str:
    return f"grpo.extraOverrides[{key}]"


# (id, release, generator options, overrides, the key refused, words of its message)
REFUSED = [
    ("no-generation", "v0.7.0", {}, ["policy.generation=null"], where("policy.generation"), "needs a generation config"),
    ("two-backends", "v0.6.0", {}, ["policy.megatron_cfg.enabled=true"], where("policy.megatron_cfg.enabled"), "one training backend"),
    ("no-backend", "v0.5.0", {}, ["policy.dtensor_cfg.enabled=false"], where("policy.dtensor_cfg.enabled"), "no training backend"),
    (
        "v1-lora",
        "v0.7.0",
        {"model": "gemma3-27b"},
        ["policy.dtensor_cfg.lora_cfg.enabled=true"],
        where("policy.dtensor_cfg.lora_cfg.enabled"),
        "v1 DTensor worker",
    ),
    (
        "v1-hsdp",
        "v0.7.0",
        {"model": "gemma3-27b"},
        ["++policy.dtensor_cfg.dp_replicate_size=2"],
        where("policy.dtensor_cfg.dp_replicate_size"),
        "no HSDP",
    ),
    ("draft-dtensor", "v0.6.0", {}, ["++policy.draft.enabled=true"], where("policy.draft.enabled"), "needs the Megatron backend"),
    (
        "packing-and-dynamic",
        "v0.7.0",
        {},
        ["policy.dynamic_batching.enabled=true", "policy.sequence_packing.enabled=true"],
        where("policy.sequence_packing.enabled"),
        "allows one of them",
    ),
    (
        "megatron-world",
        "v0.7.0",
        {"generation_nodes": 1},
        ["policy.dtensor_cfg.enabled=false", "policy.megatron_cfg.enabled=true", "policy.megatron_cfg.tensor_model_parallel_size=16"],
        where("policy.megatron_cfg.tensor_model_parallel_size"),
        "not a multiple of Megatron",
    ),
    (
        "scheduler",
        "v0.6.0",
        {},
        ["policy.scheduler=[{name:torch.optim.lr_scheduler.ConstantLR,kwargs:{}},{steps:[10]}]"],
        where("policy.scheduler"),
        "neither a name nor milestones",
    ),
    ("kl-type", "v0.5.0", {}, ["loss_fn.reference_policy_kl_type=k4"], where("loss_fn.reference_policy_kl_type"), "k1, k2 and k3"),
    (
        "sglang-dedicated",
        "v0.7.0",
        {"generation_nodes": 1},
        ["policy.generation.backend=sglang"],
        "grpo.overrides[policy.generation.colocated.enabled]",
        "SGLang",
    ),
    ("precision", "v0.5.0", {}, ["policy.precision=fp16"], where("policy.precision"), "not a training precision"),
    (
        "cp-packing",
        "v0.7.0",
        {},
        ["policy.dtensor_cfg.context_parallel_size=2", "policy.sequence_packing.enabled=true", "policy.dynamic_batching.enabled=false"],
        where("policy.dtensor_cfg.context_parallel_size"),
        "sequence packing",
    ),
    (
        "cp-sequence-parallel",
        "v0.6.0",
        {"model": "qwen2.5-1.5b"},
        [
            "policy.dtensor_cfg.context_parallel_size=2",
            "policy.dtensor_cfg.tensor_parallel_size=2",
            "policy.dtensor_cfg.sequence_parallel=true",
        ],
        where("policy.dtensor_cfg.context_parallel_size"),
        "sequence parallelism",
    ),
    (
        "cp-gemma3",
        "v0.7.0",
        {"model": "gemma3-27b"},
        ["policy.dtensor_cfg.context_parallel_size=2"],
        where("policy.dtensor_cfg.context_parallel_size"),
        "Gemma 3",
    ),
    (
        "lora-triton-tp",
        "v0.6.0",
        {"model": "qwen2.5-1.5b"},
        [
            "policy.dtensor_cfg.tensor_parallel_size=2",
            "policy.make_sequence_length_divisible_by=2",
            "policy.dtensor_cfg.lora_cfg.enabled=true",
        ],
        "grpo.overrides[policy.dtensor_cfg.lora_cfg.use_triton]",
        "Triton",
    ),
    (
        "seq-packing-attention",
        "v0.7.0",
        {},
        [
            "policy.sequence_packing.enabled=true",
            "policy.dynamic_batching.enabled=false",
            "++policy.dtensor_cfg.automodel_kwargs.attn_implementation=sdpa",
        ],
        where("policy.dtensor_cfg.automodel_kwargs.attn_implementation"),
        "flash_attention_2",
    ),
    (
        "vllm-pp-sync",
        "v0.7.0",
        {"nodes": 4, "generation_nodes": 2},
        ["policy.generation.vllm_cfg.pipeline_parallel_size=2"],
        where("policy.generation.vllm_cfg.pipeline_parallel_size"),
        "async engine",
    ),
    (
        "vllm-ep",
        "v0.6.0",
        {},
        ["policy.generation.vllm_cfg.tensor_parallel_size=2", "policy.generation.vllm_cfg.expert_parallel_size=3"],
        where("policy.generation.vllm_cfg.expert_parallel_size"),
        "not a multiple of vLLM TP",
    ),
    ("top-k-old", "v0.5.0", {}, ["policy.generation.top_k=50"], where("policy.generation.top_k"), "at least 8000"),
    ("top-k", "v0.7.0", {}, ["policy.generation.top_k=0"], where("policy.generation.top_k"), "at least 1"),
    ("top-p-old", "v0.5.0", {}, ["policy.generation.top_p=0.9"], where("policy.generation.top_p"), "0.99 to 1.0"),
    ("top-p", "v0.6.0", {}, ["policy.generation.top_p=0.0"], where("policy.generation.top_p"), "(0, 1]"),
    (
        "fp8-without-is",
        "v0.7.0",
        {},
        ["policy.generation.vllm_cfg.precision=fp8"],
        "grpo.overrides[loss_fn.use_importance_sampling_correction]",
        "importance-sampling correction",
    ),
    (
        "fp8-kv-cache",
        "v0.6.0",
        {},
        ["policy.generation.vllm_cfg.kv_cache_dtype=fp8"],
        where("policy.generation.vllm_cfg.kv_cache_dtype"),
        "needs FP8 weights",
    ),
    (
        "seq-ratios-token-loss",
        "v0.5.0",
        {},
        ["loss_fn.sequence_level_importance_ratios=true"],
        where("loss_fn.sequence_level_importance_ratios"),
        "token_level_loss=false",
    ),
    (
        "tis-without-correction",
        "v0.6.0",
        {},
        ["loss_fn.truncated_importance_sampling_ratio=2.0"],
        where("loss_fn.truncated_importance_sampling_ratio"),
        "use_importance_sampling_correction=true",
    ),
    (
        "tis-ratio",
        "v0.5.0",
        {},
        ["loss_fn.use_importance_sampling_correction=true", "loss_fn.truncated_importance_sampling_ratio=0.0"],
        where("loss_fn.truncated_importance_sampling_ratio"),
        "ratio > 0",
    ),
    (
        "icepop-min",
        "v0.7.0",
        {},
        [
            "loss_fn.use_importance_sampling_correction=true",
            "loss_fn.truncated_importance_sampling_type=icepop",
            "loss_fn.truncated_importance_sampling_ratio=2.0",
        ],
        "grpo.overrides[loss_fn.truncated_importance_sampling_ratio_min]",
        "needs a minimum",
    ),
    ("cispo", "v0.7.0", {}, ["loss_fn.use_cispo=true", "loss_fn.ratio_clip_c=3.0"], where("loss_fn.use_cispo"), "ratio_clip_c"),
    ("batch-multiplier", "v0.7.0", {}, ["grpo.batch_multiplier=2"], where("grpo.batch_multiplier"), "without dynamic sampling"),
    (
        "dataloader-prompts",
        "v0.6.0",
        {},
        ["data.use_multiple_dataloader=true", "++data.num_prompts_per_dataloader=3"],
        where("data.num_prompts_per_dataloader"),
        "does not divide",
    ),
    (
        "megatron-dedicated",
        "v0.6.0",
        {"nodes": 4, "generation_nodes": 1},
        ["policy.generation.backend=megatron"],
        "grpo.overrides[policy.generation.colocated.enabled]",
        "only colocated",
    ),
    (
        "skip-reference",
        "v0.7.0",
        {},
        ["++grpo.skip_reference_policy_logprobs_calculation=true"],
        where("grpo.skip_reference_policy_logprobs_calculation"),
        "KL penalty",
    ),
    ("estimator", "v0.6.0", {}, ["grpo.adv_estimator.name=opd"], where("grpo.adv_estimator.name"), "no advantage estimator"),
    ("metric-name", "v0.5.0", {}, ["checkpointing.metric_name=val_reward"], where("checkpointing.metric_name"), "first checkpoint"),
    (
        "no-validation-set",
        "v0.7.0",
        {},
        ["data.validation=null"],
        where("data.validation"),
        "no validation dataset",
    ),
    ("no-val-path", "v0.5.0", {}, ["data.val_data_path=null"], where("data.val_data_path"), "no validation set"),
    ("no-train-path", "v0.5.0", {}, ["data.train_data_path=null"], where("data.train_data_path"), "reads its training data"),
    (
        "async-dynamic-sampling",
        "v0.7.0",
        {},
        ["grpo.async_grpo.enabled=true", "grpo.use_dynamic_sampling=true"],
        where("grpo.use_dynamic_sampling"),
        "async_grpo",
    ),
    (
        "async-colocated",
        "v0.5.0",
        {},
        ["grpo.async_grpo.enabled=true", "policy.generation.vllm_cfg.async_engine=true", "loss_fn.use_importance_sampling_correction=true"],
        "grpo.overrides[policy.generation.colocated.enabled]",
        "needs dedicated generation",
    ),
    (
        "async-sync-engine",
        "v0.7.0",
        {"generation_nodes": 1},
        ["grpo.async_grpo.enabled=true", "loss_fn.use_importance_sampling_correction=true"],
        where("grpo.async_grpo.enabled"),
        "async engine",
    ),
    (
        "async-without-is",
        "v0.6.0",
        {"generation_nodes": 1},
        ["grpo.async_grpo.enabled=true", "policy.generation.vllm_cfg.async_engine=true"],
        "grpo.overrides[loss_fn.use_importance_sampling_correction]",
        "importance-sampling correction",
    ),
    ("nemo-gym-sync", "v0.6.0", {}, ["++env.should_use_nemo_gym=true"], where("env.should_use_nemo_gym"), "async rollouts"),
    (
        "nemo-gym-http",
        "v0.5.0",
        {},
        ["++env.should_use_nemo_gym=true", "policy.generation.vllm_cfg.async_engine=true"],
        where("env.should_use_nemo_gym"),
        "not exposed",
    ),
    ("tool-advantage", "v0.7.0", {}, ["grpo.invalid_tool_call_advantage=-5.0"], where("grpo.invalid_tool_call_advantage"), "NeMo-Gym"),
    ("verify-impl", "v0.6.0", {}, ["env.math.math_verify_impl=sympy"], where("env.math.math_verify_impl"), "first step"),
    ("verifier-type", "v0.7.0", {}, ["++env.math.verifier_type=3"], where("env.math.verifier_type"), "not a name"),
    (
        "dynamic-sampling-batches",
        "v0.7.0",
        {},
        ["grpo.use_dynamic_sampling=true", "grpo.dynamic_sampling_max_gen_batches=0"],
        where("grpo.dynamic_sampling_max_gen_batches"),
        "at least 1",
    ),
    (
        "chat-template-kwargs",
        "v0.6.0",
        {},
        ["policy.tokenizer.chat_template_kwargs=thinking"],
        where("policy.tokenizer.chat_template_kwargs"),
        "not a mapping",
    ),
    (
        "v1-save-format",
        "v0.7.0",
        {"model": "gemma3-27b"},
        ["checkpointing.model_save_format=safetensors"],
        where("checkpointing.model_save_format"),
        "first checkpoint",
    ),
]


@pytest.mark.parametrize(("release", "opts", "overrides", "key", "words"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_a_file_that_breaks_a_start_up_assert_is_refused(release, opts, overrides, key, words):
    found = run(*overrides, release=release, **opts)
    assert key in found, found
    assert words in found[key]


# (id, release, generator options, overrides): each the legitimate side of a rule above
OBEYED = [
    ("v2-lora", "v0.7.0", {}, ["policy.dtensor_cfg.lora_cfg.enabled=true"]),
    ("dynamic-batching-alone", "v0.6.0", {}, ["policy.dynamic_batching.enabled=true", "policy.sequence_packing.enabled=false"]),
    ("float32", "v0.5.0", {}, ["policy.precision=float32"]),
    (
        "megatron",
        "v0.7.0",
        {"generation_nodes": 1},
        ["policy.dtensor_cfg.enabled=false", "policy.megatron_cfg.enabled=true", "policy.megatron_cfg.tensor_model_parallel_size=2"],
    ),
    ("scheduler-milestones", "v0.6.0", {}, ["policy.scheduler=[{name:torch.optim.lr_scheduler.ConstantLR,kwargs:{}},{milestones:[10]}]"]),
    ("kl-type", "v0.7.0", {}, ["loss_fn.reference_policy_kl_type=k1"]),
    ("cp-alone", "v0.7.0", {}, ["policy.dtensor_cfg.context_parallel_size=2"]),
    (
        "lora-tp-without-triton",
        "v0.6.0",
        {"model": "qwen2.5-1.5b"},
        [
            "policy.dtensor_cfg.tensor_parallel_size=2",
            "policy.make_sequence_length_divisible_by=2",
            "policy.dtensor_cfg.lora_cfg.enabled=true",
            "policy.dtensor_cfg.lora_cfg.use_triton=false",
        ],
    ),
    (
        "vllm-pp-async",
        "v0.7.0",
        {"nodes": 4, "generation_nodes": 2},
        ["policy.generation.vllm_cfg.pipeline_parallel_size=2", "policy.generation.vllm_cfg.async_engine=true"],
    ),
    ("top-k-high", "v0.5.0", {}, ["policy.generation.top_k=8000", "policy.generation.top_p=0.99"]),
    ("top-k-new", "v0.7.0", {}, ["policy.generation.top_k=20", "policy.generation.top_p=0.9"]),
    ("fp8-with-is", "v0.7.0", {}, ["policy.generation.vllm_cfg.precision=fp8", "loss_fn.use_importance_sampling_correction=true"]),
    (
        "tis",
        "v0.7.0",
        {},
        [
            "loss_fn.use_importance_sampling_correction=true",
            "loss_fn.truncated_importance_sampling_type=icepop",
            "loss_fn.truncated_importance_sampling_ratio=2.0",
            "loss_fn.truncated_importance_sampling_ratio_min=0.5",
        ],
    ),
    ("seq-ratios-seq-loss", "v0.6.0", {}, ["loss_fn.sequence_level_importance_ratios=true", "loss_fn.token_level_loss=false"]),
    ("cispo", "v0.7.0", {}, ["loss_fn.use_cispo=true"]),
    ("dynamic-sampling-multiplier", "v0.7.0", {}, ["grpo.use_dynamic_sampling=true", "grpo.batch_multiplier=2"]),
    (
        "skip-reference-without-kl",
        "v0.7.0",
        {},
        ["++grpo.skip_reference_policy_logprobs_calculation=true", "loss_fn.reference_policy_kl_penalty=0"],
    ),
    ("estimator", "v0.7.0", {}, ["grpo.adv_estimator.name=reinforce_plus_plus"]),
    ("metric-name", "v0.6.0", {}, ["checkpointing.metric_name=train:loss"]),
    ("no-validation", "v0.7.0", {}, ["data.validation=null", "grpo.val_period=0"]),
    ("no-val-path", "v0.5.0", {}, ["data.val_data_path=null", "grpo.val_period=0"]),
    (
        "async",
        "v0.6.0",
        {"generation_nodes": 1},
        ["grpo.async_grpo.enabled=true", "policy.generation.vllm_cfg.async_engine=true", "loss_fn.use_importance_sampling_correction=true"],
    ),
    (
        "nemo-gym",
        "v0.7.0",
        {},
        [
            "++env.should_use_nemo_gym=true",
            "policy.generation.vllm_cfg.async_engine=true",
            "++policy.generation.vllm_cfg.expose_http_server=true",
            "grpo.invalid_tool_call_advantage=-5.0",
        ],
    ),
    ("dapo-verify", "v0.5.0", {}, ["env.math.math_verify_impl=dapo_math_verify"]),
    ("dynamic-sampling", "v0.6.0", {}, ["grpo.use_dynamic_sampling=true", "grpo.dynamic_sampling_max_gen_batches=1"]),
    ("chat-template-kwargs", "v0.6.0", {}, ["policy.tokenizer.chat_template_kwargs={enable_thinking:true}"]),
    ("v1-save-format-null", "v0.7.0", {"model": "gemma3-27b"}, ["checkpointing.save_period=5"]),
    ("v2-save-format", "v0.7.0", {}, ["checkpointing.model_save_format=torch_save"]),
]


@pytest.mark.parametrize(("release", "opts", "overrides"), [r[1:] for r in OBEYED], ids=[r[0] for r in OBEYED])
def test_a_file_that_obeys_it_passes(release, opts, overrides):
    assert run(*overrides, release=release, **opts) == {}


def test_the_retries_variable_is_a_whole_number_above_zero():
    values = values_for()
    values["extraEnv"] = [{"name": "NRL_VIRTUAL_CLUSTER_MAX_RETRIES", "value": "0"}]
    assert "whole number > 0" in errors(values)["extraEnv[NRL_VIRTUAL_CLUSTER_MAX_RETRIES]"]
    values["extraEnv"] = [{"name": "NRL_VIRTUAL_CLUSTER_MAX_RETRIES", "value": "12"}]
    assert errors(values) == {}
