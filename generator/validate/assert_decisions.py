"""What `validate` does about each assert and raise on NeMo RL's GRPO start-up path
(generator/nemo_rl/startup_asserts.json, listed by generator/nemo_rl/asserts.py from the source
under vendor/nemo-rl-src/): the rule that refuses a values file that would trip it, or the reason
no rule does. Hand-written, the one home of these decisions; tests/nemo_rl/test_startup_asserts.py
fails when an assert of a supported release has none.

`DECISIONS[(file, function)]` maps the start of a statement's text (`assert CONDITION` or
`raise EXCEPTION`, as the table writes it) to a decision; the longest start that matches wins, so
`""` decides every statement of a function that runs only after start-up (a training step, another
algorithm), and longer starts single out the ones that check a config value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from generator.nemo_rl.asserts import Found
from generator.validate.rules import nemo_rl, recipe, resources, training
from generator.validate.rules import nemo_rl_asserts as na


@dataclass(frozen=True)
class Rule:
    """Covered: these validate rules refuse every values file that would trip the assert."""

    rules: tuple[Callable[..., Iterator[object]], ...]
    note: str = ""

    def names(self) -> list[str]:
        return [f"{r.__module__.removeprefix('generator.validate.rules.')}.{r.__name__}" for r in self.rules]


@dataclass(frozen=True)
class Excluded:
    """Not a rule: why validate cannot or need not check it before the run."""

    reason: str


Decision = Rule | Excluded


def rule(*rules: Callable[..., Iterator[object]], note: str = "") -> Rule:
    return Rule(tuple(rules), note)


# The reasons shared by many statements.
STEP = Excluded("runs in a training step, after start-up: checks batches, tensors or results, not a config value")
INTERNAL = Excluded("an argument NeMo RL's own code passes (an internal contract), not a config value")
STATE = Excluded("runtime state of Ray, the nodes or the network, not a config value")
IMAGE = Excluded("what the release's image installs and sets (vLLM, Automodel, virtualenvs, TORCH_CUDA_ARCH_LIST), not a config value")
OTHER = Excluded("another algorithm's code (DPO, SFT, distillation, reward models), which GRPO does not build")
MODEL = Excluded(
    "the model's own architecture (VLM, MoE, YaRN RoPE, Qwen3.5, quantized GPT-OSS or Mistral 3, custom adapters): "
    "validate knows the facts of its three text models only, none of which trips it"
)
RERAISE = Excluded("re-raises an error a worker raised: its cause is decided where it is raised")
SCHEDULER = rule(na._dtensor_worker, note="list-form policy.scheduler entries")
PRECISION = rule(na._dtensor_worker)
CP = rule(na._dtensor_worker)

GRPO = "nemo_rl/algorithms/grpo.py"
LOSS = ("nemo_rl/algorithms/loss_functions.py", "nemo_rl/algorithms/loss/loss_functions.py")  # moved at v0.6.0
V1 = "nemo_rl/models/policy/workers/dtensor_policy_worker.py"
V2 = "nemo_rl/models/policy/workers/dtensor_policy_worker_v2.py"
VLLM_GEN = "nemo_rl/models/generation/vllm/vllm_generation.py"
VLLM_WORKER = "nemo_rl/models/generation/vllm/vllm_worker.py"
CLUSTER = "nemo_rl/distributed/virtual_cluster.py"
GROUPS = "nemo_rl/distributed/worker_groups.py"
AUTOMODEL = "nemo_rl/models/automodel/setup.py"
ENTRY = ("examples/run_grpo_math.py", "examples/run_grpo.py")

_ENTRY_MAIN: dict[str, Decision] = {
    "assert config": rule(na._generation),  # config['policy']['generation'] (v0.5.0, v0.6.0), config.policy[...] (v0.7.0)
    "raise NotImplementedError(f'{feature} is not supported with async GRPO')": rule(na._async_grpo),
    "raise NotImplementedError('use_multiple_dataloader is not supported with async GRPO')": rule(na._async_grpo),
}

_GRPO_SETUP: dict[str, Decision] = {
    "assert generation_config is not None": rule(na._generation),
    "assert batch_multiplier == 1": rule(na._grpo),
    "assert num_prompts_per_step % dataloader_batch_size == 0": rule(na._grpo),
    "assert val_dataset is not None": rule(
        na._validation_data, note="for the datasets the generator writes (gsm8k, ResponseDataset); others may split their own"
    ),
    "assert policy_nodes > 0": Excluded(
        "cluster.num_nodes less the reward-model environment's nodes (env.reward_model): the math example has no such "
        "environment, and nemo_rl._cluster already ties cluster.num_nodes to the worker nodes"
    ),
    "assert policy_nodes > 0 #2": Excluded(
        "cluster.num_nodes less on-policy-distillation teacher nodes (v0.7.0 OPD): validate does not model the teachers' clusters"
    ),
    "assert _should_use_async_rollouts(master_config)": Excluded(
        "non-colocated on-policy-distillation teachers (v0.7.0 OPD): validate does not model the teachers' clusters"
    ),
    "assert policy_gpus_per_node > 0": rule(nemo_rl._cluster, note="cluster.gpus_per_node must equal each worker pod's GPUs"),
    "assert generation_config['backend'] != 'megatron'": rule(na._grpo),
    "assert inference_gpus_per_node": rule(nemo_rl._placement_and_parallelism),
    "assert inference_nodes": rule(nemo_rl._placement_and_parallelism),
    "assert train_gpus_per_node > 0": rule(nemo_rl._placement_and_parallelism),
    "assert train_nodes > 0 and inference_nodes > 0": rule(nemo_rl._placement_and_parallelism),
    "assert num_alive_nodes >= required_nodes": rule(
        nemo_rl._cluster, note="the worker groups give cluster.num_nodes nodes once every worker pod is up"
    ),
    "assert loss_config": rule(na._vllm),  # FP8 generation needs importance-sampling correction (v0.5.0 to v0.7.0 spellings)
    "assert generation_config['vllm_cfg']['precision'] == 'fp8'": rule(na._vllm),
    "assert policy_config['dtensor_cfg']['enabled'] == False": rule(na._vllm),
    "assert not _should_use_async_rollouts(master_config)": rule(na._vllm),
    "assert policy_config['megatron_cfg']['pipeline_model_parallel_size'] == 1": rule(na._vllm),
    "assert grpo_config['num_prompts_per_step'] * grpo_config['num_generations_per_prompt']": rule(nemo_rl._batches),
    "assert loss_config.reference_policy_kl_penalty == 0": rule(na._grpo),
}

_LOSS_INIT: dict[str, Decision] = {"": rule(na._loss)}
_LOSS_CALL: dict[str, Decision] = {"": STEP}

_DTENSOR_INIT: dict[str, Decision] = {
    'raise ValueError(f"Unknown precision': PRECISION,
    "assert not self.is_vlm": MODEL,
    "raise NotImplementedError('Sequence packing is not supported for reward models')": OTHER,
    "raise ValueError(f'Unknown reward model type": OTHER,
    "raise ValueError('Context parallel is not supported for sequence packing": CP,
    "assert world_size == dp_size * tp_size * cp_size": rule(nemo_rl._placement_and_parallelism),
    "assert not isinstance(self.model, Gemma3ForCausalLM)": CP,
    "assert not self.is_gemma3": CP,
    "assert not (tp_size > 1 and sequence_parallel_enabled)": CP,
    "assert not lora_cfg['use_triton']": rule(na._dtensor_worker),
    "assert self.tp_size == 1": MODEL,  # custom MoE implementations
    "assert self.cp_size == 1": MODEL,
    "assert 'milestones' in scheduler_cfg": SCHEDULER,
}
# Methods of the training workers that run in steps and refits, after start-up.
_WORKER_STEP: dict[str, Decision] = {
    "": STEP,
    "raise NotImplementedError('FP8 kvcache is not currently supported for DTensor path": rule(
        na._vllm, note="grpo.setup refuses an FP8 KV cache with DTensor before a refit reaches this"
    ),
}
_WORKER_METHODS = (
    "train",
    "get_logprobs",
    "score",
    "get_topk_logits",
    "calibrate_qkv_fp8_scales",
    "stream_weights_via_ipc_zmq",
    "broadcast_weights_for_collective",
)
# v0.6.0+ moved the v2 worker's training code to nemo_rl/models/automodel/; these stayed.
_V2_IMPL_METHODS = ("calibrate_qkv_fp8_scales", "stream_weights_via_ipc_zmq", "broadcast_weights_for_collective", "stream_weights_via_http")
_VLLM_WORKER_METHODS = (
    "generate",
    "generate_text",
    "report_device_id",
    "update_weights_via_ipc_zmq",
    "update_weights_from_collective",
    "reset_prefix_cache",
    "sleep",
    "wake_up",
)

DECISIONS: dict[tuple[str, str], dict[str, Decision]] = {
    # --- the entry script --------------------------------------------------------------------------------
    **{(path, "main"): _ENTRY_MAIN for path in ENTRY},
    # --- configuration -----------------------------------------------------------------------------------
    ("nemo_rl/utils/config.py", "load_config_with_inheritance"): {
        "": rule(recipe.check, note="a recipe that is not a mapping is refused when validate merges it")
    },
    ("nemo_rl/utils/config.py", "parse_hydra_overrides"): {"": rule(recipe.check, nemo_rl._syntax)},
    ("nemo_rl/algorithms/utils.py", "get_tokenizer"): {"": rule(na._tokenizer)},
    (AUTOMODEL, "get_tokenizer"): {"": rule(na._tokenizer)},
    # --- logging -----------------------------------------------------------------------------------------
    ("nemo_rl/utils/logger.py", "RayGpuMonitorLogger.start"): {
        "": Excluded("the order NeMo RL's own code starts Ray and the GPU monitor in, not a config value")
    },
    ("nemo_rl/utils/logger.py", "RayGpuMonitorLogger._collect"): {"": INTERNAL},
    ("nemo_rl/utils/logger.py", "Logger.log_plot_per_worker_timeline_metrics"): {
        "": Excluded("a plotting helper GRPO's start-up and first step do not call; its interval is an argument, not a config value")
    },
    ("nemo_rl/utils/logger.py", "print_message_log_samples"): {"": STEP},
    ("nemo_rl/algorithms/utils.py", "calculate_kl"): {"": rule(na._loss, note="loss_fn.reference_policy_kl_type")},
    ("nemo_rl/algorithms/utils.py", "print_performance_metrics"): {"": STEP},
    # --- GRPO --------------------------------------------------------------------------------------------
    (GRPO, "setup"): _GRPO_SETUP,
    (GRPO, "dynamic_sampling"): {
        "assert dynamic_sampling_max_gen_batches > 0": rule(na._grpo),
        "raise ValueError(f'Dynamic sampling has reached the maximum": Excluded(
            "how many generation batches dynamic sampling needs depends on the rewards, known only while training"
        ),
    },
    (GRPO, "_should_use_nemo_gym"): {"": rule(na._nemo_gym)},
    (GRPO, "_resolve_message_level_advantage_penalties"): {"": rule(na._nemo_gym)},
    (GRPO, "_create_advantage_estimator"): {"": rule(na._grpo)},
    (GRPO, "_pad_teacher_logprobs"): {"": OTHER},
    (GRPO, "refit_policy_generation"): {
        "raise RuntimeError(error_message)": STATE,
        "raise NotImplementedError(\"SGLang haven't implemented non-colocated": rule(na._grpo),
    },
    (GRPO, "grpo_train"): {
        "assert policy_generation is not None": INTERNAL,
        "assert full_metric_name.startswith('train:')": rule(na._grpo),
        "raise ValueError(f'Metric {metric_name} not found in {prefix} metrics')": Excluded(
            "which metrics a step logs is known at the first save; validate checks only the train:/val: form"
        ),
        "assert master_config['loss_fn']['reference_policy_kl_penalty'] == 0": rule(na._grpo),
    },
    (GRPO, "validate"): {"": rule(na._validation_data, note="grpo.setup's assert on the validation dataset fires first")},
    (GRPO, "async_grpo_train"): {
        "assert policy_generation is not None": INTERNAL,
        "assert _should_use_async_rollouts(master_config)": rule(na._async_grpo),
        "assert backend in ('vllm', 'megatron') and _should_use_async_rollouts(master_config)": rule(na._async_grpo),
        "assert master_config": rule(na._async_grpo),  # importance-sampling correction (both spellings)
        "assert not colocated_inference": rule(na._async_grpo),
        "raise AssertionError(f'Configuration error: (num_prompts_per_step * num_generations_per_prompt)": rule(
            nemo_rl._batches, note="samples per step divisible by the global batch, and that by the data-parallel size"
        ),
        "assert full_metric_name.startswith('train:')": rule(na._grpo),
        "raise ValueError(f'Metric {metric_name} not found in {prefix} metrics')": Excluded(
            "which metrics a step logs is known at the first save; validate checks only the train:/val: form"
        ),
        "raise NotImplementedError('policy.router_replay.enabled=true with async GRPO": rule(na._async_grpo),
    },
    # --- the loss function -------------------------------------------------------------------------------
    **{(path, "ClippedPGLossFn.__init__"): _LOSS_INIT for path in LOSS},
    **{(path, "ClippedPGLossFn.__call__"): _LOSS_CALL for path in LOSS},
    **{
        (path, fn): {"": OTHER}
        for path, fns in (
            (
                LOSS[0],
                (
                    "NLLLoss.__call__",
                    "DPOLossFn._dpo_loss",
                    "DPOLossFn.__call__",
                    "DistillationLossFn.__init__",
                    "DistillationLossFn.__call__",
                ),
            ),
            (
                LOSS[1],
                (
                    "DPOLossFn.__call__",
                    "DistillationLossFn.__init__",
                    "CrossTokenizerDistillationLossFn.__init__",
                    "CrossTokenizerDistillationLossFn.__call__",
                    "CrossTokenizerDistillationLossFn._compute_teacher_kd",
                    "CrossTokenizerDistillationLossFn._sum_kd",
                    "CrossTokenizerDistillationLossFn._averaged_logits_kd",
                    "CrossTokenizerDistillationLossFn._teacher_weight_score",
                ),
            ),
        )
        for fn in fns
    },
    # --- the cluster and its worker groups ---------------------------------------------------------------
    (CLUSTER, "RayVirtualCluster.__init__"): {
        "assert num_gpus_per_node > 0": rule(nemo_rl._cluster, note="cluster.gpus_per_node must equal each worker pod's GPUs"),
        "assert len(node_resource_constraints) == len(bundle_ct_per_node_list)": INTERNAL,
    },
    (CLUSTER, "RayVirtualCluster._init_placement_groups"): {
        "assert max_retries > 0": rule(na._cluster_settings, note="extraEnv NRL_VIRTUAL_CLUSTER_MAX_RETRIES"),
        "raise ResourceInsufficientError": rule(nemo_rl._cluster, resources._worker_ray_cpus, note="the GPUs and Ray CPUs asked for"),
    },
    (CLUSTER, "RayVirtualCluster._create_placement_groups_internal"): {
        "raise ResourceInsufficientError(f'Not enough GPUs available": rule(nemo_rl._cluster),
        "raise ResourceInsufficientError(f'Not enough CPUs available": rule(resources._worker_ray_cpus),
        "raise TimeoutError": STATE,
    },
    (CLUSTER, "RayVirtualCluster.get_placement_groups"): {"": INTERNAL},
    (CLUSTER, "RayVirtualCluster.get_available_address_and_port"): {"": STATE},
    (CLUSTER, "RayVirtualCluster.get_master_address_and_port"): {"": STATE},
    (CLUSTER, "_bind_socket_in_range"): {"": STATE},
    (CLUSTER, "RayVirtualCluster._get_sorted_bundle_indices"): {
        "raise ValueError('Placement groups must be initialized": INTERNAL,
        "assert len(reordered_bundle_indices) == num_bundles": Excluded(
            "the NVLink domains the nodes report at run time (GKE's KubeRay nodes report none: nemo_rl._release warns on a segment size)"
        ),
    },
    (CLUSTER, "select_segment_nodes"): {
        "": Excluded(
            "reached only when the nodes report NVLink domains (prepare_segment_topology); GKE's KubeRay nodes report none, "
            "so a segment size falls back to unordered placement, which nemo_rl._release warns of"
        )
    },
    (CLUSTER, "_sort_bundle_indices_by_topology"): {
        "": rule(nemo_rl.check, note="cluster.gpus_per_node is a required override; the generator always writes it")
    },
    (GROUPS, "RayWorkerGroup.__init__"): {"": INTERNAL},
    **{
        (GROUPS, f"RayWorkerGroup.{fn}"): {"": INTERNAL}
        for fn in ("get_dp_leader_worker_idx", "run_all_workers_sharded_data", "run_all_workers_sharded_data._map_nested_value_list")
    },
    **{
        (GROUPS, f"RayWorkerGroup.{fn}"): {"": INTERNAL, "raise e": RERAISE}
        for fn in ("run_single_worker_single_data", "run_all_workers_multiple_data", "run_all_workers_single_data")
    },
    ("nemo_rl/utils/venvs.py", "create_local_venv_on_each_node"): {"": IMAGE},
    ("nemo_rl/distributed/ray_actor_environment_registry.py", "get_actor_python_env"): {
        "": Excluded("actor classes NeMo RL's own code names (its registry), not a config value")
    },
    # --- the training policy -----------------------------------------------------------------------------
    ("nemo_rl/models/policy/lm_policy.py", "Policy.__init__"): {
        "raise ValueError('Configure either Megatron": rule(na._backend),
        "raise ValueError('Please either set policy.megatron_cfg.enabled=true": rule(na._backend),
        "raise ValueError('policy.draft.enabled=true": rule(na._backend),
        "raise ValueError('dp_replicate_size > 1 requires": rule(na._backend),
        "assert config['dtensor_cfg'].get('lora_cfg', {}).get('enabled', False) is False": rule(na._backend),
        'raise RuntimeError("TORCH_CUDA_ARCH_LIST is not set': IMAGE,
        "raise ValueError(f'World size ({actual_world_size}) is insufficient": rule(
            nemo_rl._placement_and_parallelism, na._backend, note="DTensor's TP x CP; Megatron's TP x PP x CP"
        ),
        "raise ValueError(f'World size ({actual_world_size}) must be divisible": rule(
            nemo_rl._placement_and_parallelism, na._backend, note="DTensor's TP x CP; Megatron's TP x PP x CP"
        ),
        "assert config['train_micro_batch_size'] == config['logprob_batch_size']": rule(
            nemo_rl._placement_and_parallelism, note="_tp_accuracy, with DTensor's TP; Megatron's TP >= 4 is not checked"
        ),
        "assert pp_size == 1": rule(na._batching),
        "assert not config['sequence_packing']['enabled']": rule(na._batching),
        "assert not config['dynamic_batching']['enabled']": rule(na._batching),
    },
    ("nemo_rl/models/policy/lm_policy.py", "Policy.generate"): {"": STEP},
    ("nemo_rl/models/policy/lm_policy.py", "Policy.score"): {"": STEP},
    ("nemo_rl/models/policy/lm_policy.py", "Policy.get_full_logits_ipc"): {"": OTHER},
    ("nemo_rl/models/policy/lm_policy.py", "Policy.save_checkpoint"): {"": rule(na._checkpoint)},
    (V1, "DTensorPolicyWorker.__init__"): _DTENSOR_INIT,
    (V1, "DTensorPolicyWorkerImpl.__init__"): _DTENSOR_INIT,
    (V2, "DTensorPolicyWorkerV2.__init__"): _DTENSOR_INIT,
    **{
        (path, f"{cls}.{fn}"): _WORKER_STEP
        for path, cls in ((V1, "DTensorPolicyWorker"), (V1, "DTensorPolicyWorkerImpl"), (V2, "DTensorPolicyWorkerV2"))
        for fn in _WORKER_METHODS
    },
    **{(V2, f"DTensorPolicyWorkerV2Impl.{fn}"): _WORKER_STEP for fn in _V2_IMPL_METHODS},
    (AUTOMODEL, "<module>"): {"": IMAGE},
    (AUTOMODEL, "_maybe_set_force_hf"): {"": MODEL},
    (AUTOMODEL, "validate_and_prepare_config"): {
        "raise ValueError(f'Unknown precision": PRECISION,
        "raise ValueError('Sequence packing is not supported for VLM models": MODEL,
        "assert rope_scaling.get('rope_type') != 'yarn'": MODEL,
        "raise NotImplementedError('Sequence packing is not supported for reward models')": OTHER,
        "raise ValueError(f'Unknown reward model type": OTHER,
        "raise ValueError('Context parallel is not supported for sequence packing": CP,
    },
    (AUTOMODEL, "setup_distributed"): {"": rule(na._dtensor_worker)},
    (AUTOMODEL, "setup_model_and_optimizer"): {
        "raise AssertionError('Context parallel is not supported for Gemma3ForCausalLM": CP,
        "raise AssertionError(\"It's a known issue that context parallel": CP,
        "raise AssertionError('Context parallel is yet not supported for VLM models": MODEL,
        "raise AssertionError('Context parallel is not supported for Qwen3.5": MODEL,
        "raise ImportError('Qwen3.5 MoE requires flash-linear-attention": MODEL,
        "assert not lora_cfg['use_triton']": rule(na._dtensor_worker),
        "assert 'milestones' in scheduler_cfg": SCHEDULER,
        "raise ValueError(f\"sequence_packing requires attn_implementation='flash_attention_2'": rule(na._dtensor_worker),
    },
    # --- vLLM ---------------------------------------------------------------------------------------------
    (VLLM_GEN, "VllmGeneration.__init__"): {
        "assert cluster.world_size() % self.model_parallel_size == 0": rule(nemo_rl._placement_and_parallelism),
        "assert self.cfg['vllm_cfg']['async_engine']": rule(na._vllm),
        "assert self.ep_size % self.tp_size == 0": rule(na._vllm),
        "assert not self.cfg['vllm_cfg']['async_engine']": rule(na._vllm),
        "raise ValueError(f'top_k": rule(na._vllm),
        "raise ValueError(f'top_p": rule(na._vllm),
        "assert not missing_keys": Excluded(
            "every key VllmConfig requires is in each release's recipe, and validate refuses removing one (a ~key override)"
        ),
        "assert self.dp_size == self.worker_group.dp_size": INTERNAL,
    },
    (VLLM_GEN, "VllmGeneration._get_tied_worker_bundle_indices"): {"": INTERNAL},
    (VLLM_GEN, "VllmGeneration._get_tied_worker_bundle_indices.get_node_bundles"): {"": STATE},
    (VLLM_GEN, "VllmGeneration._get_tied_worker_bundle_indices.allocate_worker_groups"): {"": INTERNAL},
    (VLLM_GEN, "VllmGeneration.init_collective"): {"": INTERNAL},
    **{
        (VLLM_GEN, f"VllmGeneration.{fn}"): {"": STEP}
        for fn in (
            "generate",
            "generate_text",
            "_async_generate_base",
            "generate_async.validate_generate_data",
            "update_weights_via_ipc_zmq",
            "update_weights_from_collective",
        )
    },
    (VLLM_WORKER, "BaseVllmGenerationWorker.__init__._get_vllm_file"): {"": IMAGE},
    **{
        (VLLM_WORKER, f"BaseVllmGenerationWorker.{fn}"): {
            "raise ImportError('vLLM is not installed": IMAGE,
            "assert load_format == 'dummy'": MODEL,
        }
        for fn in ("__init__", "_load_model")
    },
    **{
        (VLLM_WORKER, f"{cls}.{fn}"): {"": STEP}
        for cls in ("VllmGenerationWorker", "VllmGenerationWorkerImpl")
        for fn in _VLLM_WORKER_METHODS
    },
    # --- data and the math environment -------------------------------------------------------------------
    ("nemo_rl/data/utils.py", "setup_response_data"): {"": rule(na._data)},
    ("nemo_rl/data/utils.py", "setup_preference_data"): {"": OTHER},
    ("nemo_rl/data/datasets/response_datasets/__init__.py", "load_response_dataset"): {
        "raise ValueError('train_data_path is required": rule(na._data),
        # 'Unsupported dataset_name=...' (the one other raise of the function): the names each release
        # registers are read from its own code (generator/validate/release_source.py)
        "raise ValueError(f": rule(training._datasets),
    },
    ("nemo_rl/data/datasets/raw_dataset.py", "RawDataset.__init__"): {"": INTERNAL},
    ("nemo_rl/data/datasets/raw_dataset.py", "RawDataset.set_processor"): {
        "": Excluded(
            "processor names are registered by the release's code; the GSM8K entries use its default, which every release registers"
        )
    },
    ("nemo_rl/environments/utils.py", "create_env"): {
        "": Excluded("environment names are registered by the release's code; the GSM8K entries name math, which every release registers")
    },
    ("nemo_rl/environments/utils.py", "register_env"): {"": INTERNAL},
    ("nemo_rl/environments/math_environment.py", "MathEnvironment.__init__"): {"": rule(na._math_env)},
    ("nemo_rl/environments/math_environment.py", "BaseMathEnvironment.__init__"): {"": rule(na._math_env)},
    ("nemo_rl/environments/math_environment.py", "HFVerifyWorker.verify"): {
        "": STEP,
        'raise ValueError(f"Unknown math_verify_impl': rule(na._math_env),
    },
    ("nemo_rl/environments/math_environment.py", "HFMultiRewardVerifyWorker.verify"): {
        "": Excluded("the multi-reward math environment (math_multi_reward, v0.6.0+), which the GSM8K entries do not name")
    },
}


def decide(found: Found) -> Decision | None:
    """The decision for one listed statement: the longest matching start in its function's table."""
    table = DECISIONS.get((found.file, found.function), {})
    statement = found.key.split(":", 2)[2]  # "assert CONDITION" or "raise EXCEPTION", with " #N" for a repeat
    best = max((start for start in table if statement.startswith(start)), key=len, default=None)
    return None if best is None else table[best]
