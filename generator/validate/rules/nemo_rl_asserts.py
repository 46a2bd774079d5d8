"""NeMo RL's start-up asserts on config values that the placement and batch rules (nemo_rl.py) do
not reach: the training backend, batching modes, precision, context parallelism, vLLM's settings,
the loss function, GRPO's own options, the data keys and the first checkpoint.

Each rule reads the config NeMo RL runs with (the release's recipe merged with every override:
`Context.setting`) and names the values entry that sets the key (`Context.where`). Each cites the
release code it follows (NVIDIA-NeMo/RL at the tags named, carried under vendor/nemo-rl-src/ and
read, not copied); generator/validate/assert_decisions.py maps every start-up assert to the rule
that covers it or to the reason none does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from generator.validate.findings import Finding, error
from generator.validate.rules.context import Context

MEGATRON = "policy.megatron_cfg.enabled"
DTENSOR = "policy.dtensor_cfg.enabled"
V2 = "policy.dtensor_cfg._v2"
DYNAMIC_BATCHING = "policy.dynamic_batching.enabled"
SEQUENCE_PACKING = "policy.sequence_packing.enabled"
CP = "policy.dtensor_cfg.context_parallel_size"
TP = "policy.dtensor_cfg.tensor_parallel_size"
VLLM = "policy.generation.vllm_cfg"
ASYNC_ENGINE = f"{VLLM}.async_engine"
PRECISIONS = ("float32", "bfloat16", "float16")


def _setting(ctx: Context, key: str) -> Any:
    """The value NeMo RL runs with, mappings and lists as plain Python."""
    return ctx.section(key)


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _on(ctx: Context, key: str) -> bool:
    return _setting(ctx, key) is True


def _tag_at_least(ctx: Context, tag: str) -> bool:
    rel = ctx.release
    return rel is not None and tuple(map(int, rel.tag[1:].split("."))) >= tuple(map(int, tag[1:].split(".")))


def _dtensor_v2(ctx: Context) -> bool:
    """The DTensor worker v2 (Automodel) trains, not v1: `policy.dtensor_cfg._v2` (lm_policy.py)."""
    return not _on(ctx, MEGATRON) and _on(ctx, V2)


def _train_gpus(ctx: Context) -> int | None:
    placed = ctx.placement
    return placed.train_gpus if placed is not None and not placed.issues else None


def _generation(ctx: Context) -> Iterator[Finding]:
    """examples/run_grpo.py main (run_grpo_math.py at v0.5.0) and nemo_rl/algorithms/grpo.py setup,
    v0.5.0 to v0.7.0: GRPO refuses a policy without a generation config."""
    if ctx.recipe_check is None:
        return
    if _setting(ctx, "policy.generation") is None:
        yield error(ctx.where("policy.generation"), "null: GRPO needs a generation config and refuses to start", "drop the override")


def _backend(ctx: Context) -> Iterator[Finding]:
    """nemo_rl/models/policy/lm_policy.py Policy.__init__: one training backend (v0.5.0 to v0.7.0);
    the v1 DTensor worker has no LoRA (v0.5.0 to v0.7.0) and no HSDP replication (v0.7.0); a draft
    model needs Megatron and no sequence packing (v0.6.0, v0.7.0)."""
    megatron, dtensor = _on(ctx, MEGATRON), _on(ctx, DTENSOR)
    if megatron and dtensor:
        yield error(ctx.where(MEGATRON), "true with policy.dtensor_cfg.enabled true: NeMo RL takes one training backend", "disable one")
    elif not megatron and not dtensor and ctx.recipe_check is not None:
        yield error(
            ctx.where(DTENSOR), "no training backend: policy.dtensor_cfg.enabled and policy.megatron_cfg.enabled are false", "enable one"
        )
    if dtensor and not megatron and not _on(ctx, V2):
        if _on(ctx, "policy.dtensor_cfg.lora_cfg.enabled"):
            yield error(
                ctx.where("policy.dtensor_cfg.lora_cfg.enabled"),
                "LoRA with the v1 DTensor worker (policy.dtensor_cfg._v2 false), which has none",
                "set policy.dtensor_cfg._v2=true or disable LoRA",
            )
        replicate = _whole(_setting(ctx, "policy.dtensor_cfg.dp_replicate_size"))
        if _tag_at_least(ctx, "v0.7.0") and replicate is not None and replicate > 1:
            yield error(
                ctx.where("policy.dtensor_cfg.dp_replicate_size"),
                f"{replicate} with the v1 DTensor worker (policy.dtensor_cfg._v2 false), which has no HSDP",
                "set policy.dtensor_cfg._v2=true or dp_replicate_size=1",
            )
    if megatron and not dtensor:
        yield from _megatron_world(ctx)
    if _tag_at_least(ctx, "v0.6.0") and _on(ctx, "policy.draft.enabled"):
        if not megatron:
            yield error(ctx.where("policy.draft.enabled"), "a draft model needs the Megatron backend", "disable policy.draft")
        if _on(ctx, SEQUENCE_PACKING):
            yield error(ctx.where("policy.draft.enabled"), "a draft model does not support sequence packing", "disable one of them")


def _megatron_world(ctx: Context) -> Iterator[Finding]:
    """Policy.__init__'s world-size checks with the Megatron backend: the training GPUs at least,
    and a multiple of, PP x CP x TP from policy.megatron_cfg (nemo_rl.py's rules check DTensor's)."""
    train = _train_gpus(ctx)
    sizes = {
        k: _whole(_setting(ctx, f"policy.megatron_cfg.{k}")) or 1
        for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size")
    }
    model = sizes["tensor_model_parallel_size"] * sizes["pipeline_model_parallel_size"] * sizes["context_parallel_size"]
    if train and train % model:
        yield error(
            ctx.where("policy.megatron_cfg.tensor_model_parallel_size"),
            f"{train} training GPUs are not a multiple of Megatron TP x PP x CP = {model}",
            "change the parallel sizes or the node split",
        )


def _batching(ctx: Context) -> Iterator[Finding]:
    """nemo_rl/models/policy/lm_policy.py Policy.__init__ (v0.5.0 to v0.7.0): dynamic batching and
    sequence packing exclude each other; dynamic batching needs one pipeline stage (Megatron PP 1)."""
    if not _on(ctx, DYNAMIC_BATCHING):
        return
    if _on(ctx, SEQUENCE_PACKING):
        yield error(
            ctx.where(SEQUENCE_PACKING),
            "true with policy.dynamic_batching.enabled true: NeMo RL allows one of them",
            "disable sequence packing or dynamic batching",
        )
    pp = _whole(_setting(ctx, "policy.megatron_cfg.pipeline_model_parallel_size"))
    if _on(ctx, MEGATRON) and pp is not None and pp > 1:
        yield error(
            ctx.where("policy.megatron_cfg.pipeline_model_parallel_size"),
            f"{pp} with dynamic batching, which needs one pipeline stage",
            "set it to 1 or disable policy.dynamic_batching",
        )


def _dtensor_worker(ctx: Context) -> Iterator[Finding]:
    """The DTensor workers' start-up: nemo_rl/models/policy/workers/dtensor_policy_worker.py
    DTensorPolicyWorker.__init__ (DTensorPolicyWorkerImpl.__init__ at v0.6.0+) and, for v2,
    dtensor_policy_worker_v2.py DTensorPolicyWorkerV2.__init__ (v0.5.0) or
    nemo_rl/models/automodel/setup.py validate_and_prepare_config, setup_distributed and
    setup_model_and_optimizer (v0.6.0+): the precision, context parallelism with sequence packing,
    sequence parallelism or Gemma 3, LoRA's Triton kernels with TP > 1, CPU offload on one GPU, the
    HSDP replication size, the attention kernel sequence packing needs, and a list-form
    policy.scheduler whose entries name a scheduler or give its milestones."""
    if _on(ctx, MEGATRON) or not _on(ctx, DTENSOR):
        return
    precision = _setting(ctx, "policy.precision")
    if precision is not None and precision not in PRECISIONS:
        yield error(
            ctx.where("policy.precision"), f"{precision!r} is not a training precision NeMo RL knows", f"use one of {', '.join(PRECISIONS)}"
        )
    cp, tp = _whole(_setting(ctx, CP)) or 1, _whole(_setting(ctx, TP)) or 1
    if cp > 1:
        if _on(ctx, SEQUENCE_PACKING):
            yield error(
                ctx.where(CP),
                f"{cp} with sequence packing: the DTensor workers do not support both",
                "set it to 1 or disable sequence packing",
            )
        if tp > 1 and _on(ctx, "policy.dtensor_cfg.sequence_parallel"):
            yield error(
                ctx.where(CP),
                f"{cp} with sequence parallelism and TP {tp}: the DTensor workers refuse the combination",
                "set it to 1 or policy.dtensor_cfg.sequence_parallel=false",
            )
        model = str(_setting(ctx, "policy.model_name") or "").lower()
        if "gemma-3" in model or "gemma3" in model:
            yield error(
                ctx.where(CP),
                f"{cp} with {_setting(ctx, 'policy.model_name')}: context parallelism does not support Gemma 3",
                "set it to 1",
            )
    if (
        tp > 1
        and _on(ctx, "policy.dtensor_cfg.lora_cfg.enabled")
        and _on(ctx, "policy.dtensor_cfg.lora_cfg.use_triton")
        and _dtensor_v2(ctx)
    ):
        yield error(
            ctx.where("policy.dtensor_cfg.lora_cfg.use_triton"),
            f"true with TP {tp}: LoRA's Triton kernels need tensor_parallel_size 1",
            "set policy.dtensor_cfg.lora_cfg.use_triton=false",
        )
    scheduler = _setting(ctx, "policy.scheduler")
    if isinstance(scheduler, list):
        for i, part in enumerate(scheduler):
            if not isinstance(part, dict) or ("name" not in part and "milestones" not in part):
                yield error(
                    ctx.where("policy.scheduler"), f"entry {i} has neither a name nor milestones", "see the recipe's policy.scheduler"
                )
    if not _dtensor_v2(ctx) or not _tag_at_least(ctx, "v0.6.0"):
        return
    train = _train_gpus(ctx)
    if train == 1 and _on(ctx, "policy.dtensor_cfg.cpu_offload"):
        yield error(
            ctx.where("policy.dtensor_cfg.cpu_offload"),
            "true on one training GPU: Automodel's CPU offload does not run there",
            "set it to false",
        )
    replicate = _whole(_setting(ctx, "policy.dtensor_cfg.dp_replicate_size"))
    if (
        _tag_at_least(ctx, "v0.7.0")
        and train
        and replicate
        and replicate > 1
        and train % (tp * cp) == 0
        and (train // (tp * cp)) % replicate
    ):
        yield error(
            ctx.where("policy.dtensor_cfg.dp_replicate_size"),
            f"{replicate} does not divide the data-parallel size {train // (tp * cp)} ({train} training GPUs / TP {tp} / CP {cp})",
            "use a divisor of the data-parallel size",
        )
    attn = _setting(ctx, "policy.dtensor_cfg.automodel_kwargs.attn_implementation")
    if _tag_at_least(ctx, "v0.7.0") and _on(ctx, SEQUENCE_PACKING) and attn is not None and attn != "flash_attention_2":
        yield error(
            ctx.where("policy.dtensor_cfg.automodel_kwargs.attn_implementation"),
            f"{attn!r} with sequence packing, which needs 'flash_attention_2'",
            "drop it or set it to flash_attention_2",
        )


def _vllm(ctx: Context) -> Iterator[Finding]:
    """nemo_rl/models/generation/vllm/vllm_generation.py VllmGeneration.__init__ (v0.5.0 to v0.7.0):
    pipeline parallelism needs the async engine; expert parallelism a multiple of TP, and without
    the async engine when EP != TP; top_k and top_p within what the release accepts (v0.5.0: top_k
    >= 8000 and top_p >= 0.99, as its vLLM V1 engine returns no logprobs after filtering; v0.6.0+:
    top_k -1, null or >= 1, top_p in (0, 1]). nemo_rl/algorithms/grpo.py setup: FP8 generation
    needs importance-sampling correction; an FP8 KV cache needs FP8 weights, the Megatron backend
    with one pipeline stage, and no async rollouts (the DTensor workers refuse it again at refit:
    dtensor_policy_worker.py DTensorPolicyWorker and DTensorPolicyWorkerImpl, dtensor_policy_worker_v2.py
    DTensorPolicyWorkerV2 and DTensorPolicyWorkerV2Impl)."""
    if _setting(ctx, "policy.generation.backend") != "vllm":
        return
    tp = _whole(_setting(ctx, f"{VLLM}.tensor_parallel_size")) or 1
    pp = _whole(_setting(ctx, f"{VLLM}.pipeline_parallel_size")) or 1
    ep = _whole(_setting(ctx, f"{VLLM}.expert_parallel_size")) or 1
    async_engine = _on(ctx, ASYNC_ENGINE)
    if pp > 1 and not async_engine:
        yield error(ctx.where(f"{VLLM}.pipeline_parallel_size"), f"{pp} needs the async engine", f"set {ASYNC_ENGINE}=true")
    if ep > 1 and ep % tp:
        yield error(ctx.where(f"{VLLM}.expert_parallel_size"), f"{ep} is not a multiple of vLLM TP {tp}", f"use a multiple of {tp}")
    elif ep > 1 and ep != tp and async_engine:
        yield error(ctx.where(ASYNC_ENGINE), f"true with expert parallel {ep} != TP {tp} (data parallelism inside vLLM)", "set it to false")
    yield from _sampling(ctx)
    precision = _setting(ctx, f"{VLLM}.precision")
    if precision == "fp8" and not _on(ctx, "loss_fn.use_importance_sampling_correction"):
        yield error(
            ctx.where("loss_fn.use_importance_sampling_correction"),
            "false with FP8 vLLM generation, which NeMo RL runs only with importance-sampling correction",
            "set loss_fn.use_importance_sampling_correction=true",
        )
    kv = _setting(ctx, f"{VLLM}.kv_cache_dtype")
    if isinstance(kv, str) and kv.startswith("fp8"):
        key = ctx.where(f"{VLLM}.kv_cache_dtype")
        if precision != "fp8":
            yield error(key, f"{kv} needs FP8 weights ({VLLM}.precision is {precision!r})", f"set {VLLM}.precision=fp8 or drop it")
        if _on(ctx, DTENSOR):
            yield error(
                key, f"{kv} with the DTensor backend, which does not support an FP8 KV cache", "use the Megatron backend or drop it"
            )
        if async_engine:
            yield error(key, f"{kv} with async rollouts ({ASYNC_ENGINE} true), which do not support it", "drop one of them")
        mpp = _whole(_setting(ctx, "policy.megatron_cfg.pipeline_model_parallel_size"))
        if mpp is not None and mpp != 1:
            yield error(
                key,
                f"{kv} with Megatron pipeline parallel {mpp}; an FP8 KV cache needs 1",
                "set policy.megatron_cfg.pipeline_model_parallel_size=1",
            )


def _sampling(ctx: Context) -> Iterator[Finding]:
    top_k, top_p = _setting(ctx, "policy.generation.top_k"), _number(_setting(ctx, "policy.generation.top_p"))
    k = _whole(top_k)
    old = not _tag_at_least(ctx, "v0.6.0")
    if k is not None and k != -1 and (k < 8000 if old else k < 1):
        yield error(
            ctx.where("policy.generation.top_k"),
            f"{k}: {ctx.release.tag if ctx.release else 'this release'} accepts null, -1 or "
            + ("at least 8000 (its vLLM engine returns no logprobs after top-k filtering)" if old else "at least 1"),
            "set it to null",
        )
    if top_p is not None and (top_p < 0.99 if old else not 0 < top_p <= 1):
        yield error(
            ctx.where("policy.generation.top_p"),
            f"{top_p:g}: {ctx.release.tag if ctx.release else 'this release'} accepts "
            + ("0.99 to 1.0 (its vLLM engine returns no logprobs after top-p filtering)" if old else "a value in (0, 1]"),
            "set it to 1.0",
        )


def _loss(ctx: Context) -> Iterator[Finding]:
    """ClippedPGLossFn.__init__ (nemo_rl/algorithms/loss_functions.py at v0.5.0,
    nemo_rl/algorithms/loss/loss_functions.py at v0.6.0+): sequence-level importance ratios need
    sequence-level loss; truncated importance sampling (on when its ratio is set before v0.7.0,
    when its type is set at v0.7.0) needs the correction on, a ratio > 0, a known type (v0.6.0+),
    a minimum <= the ratio and, for icepop and seq-mask-tis, a minimum (v0.7.0), and seq-mask-tis
    no sequence-level ratios (v0.6.0+); CISPO (v0.7.0) excludes disable_ppo_ratio,
    force_on_policy_ratio, sequence-level ratios and dual clipping, and needs token-level loss.
    nemo_rl/algorithms/utils.py calculate_kl, at the first training step: a KL type k1, k2 or k3."""
    if ctx.recipe_check is None:
        return
    seq_ratios = _on(ctx, "loss_fn.sequence_level_importance_ratios")
    token_loss = _setting(ctx, "loss_fn.token_level_loss") is not False
    if seq_ratios and token_loss:
        yield error(
            ctx.where("loss_fn.sequence_level_importance_ratios"),
            "true with token-level loss: sequence-level importance ratios need loss_fn.token_level_loss=false",
            "set loss_fn.token_level_loss=false or drop it",
        )
    kl_type = _setting(ctx, "loss_fn.reference_policy_kl_type")
    if _number(_setting(ctx, "loss_fn.reference_policy_kl_penalty")) and kl_type is not None and kl_type not in ("k1", "k2", "k3"):
        yield error(
            ctx.where("loss_fn.reference_policy_kl_type"),
            f"{kl_type!r}: the KL penalty knows k1, k2 and k3, and fails at the first training step",
            "use k3 (the recipe's)",
        )
    v7, v6 = _tag_at_least(ctx, "v0.7.0"), _tag_at_least(ctx, "v0.6.0")
    kind = _setting(ctx, "loss_fn.truncated_importance_sampling_type")
    ratio = _setting(ctx, "loss_fn.truncated_importance_sampling_ratio")
    low = _setting(ctx, "loss_fn.truncated_importance_sampling_ratio_min")
    on = kind is not None if v7 else ratio is not None
    if on:
        what = "loss_fn.truncated_importance_sampling_type" if v7 else "loss_fn.truncated_importance_sampling_ratio"
        if not _on(ctx, "loss_fn.use_importance_sampling_correction"):
            yield error(
                ctx.where(what),
                "truncated importance sampling needs loss_fn.use_importance_sampling_correction=true",
                "set it, or drop the truncation",
            )
        r = _number(ratio)
        if r is None or r <= 0:
            yield error(
                ctx.where("loss_fn.truncated_importance_sampling_ratio"),
                f"{ratio}: truncated importance sampling needs a ratio > 0",
                "e.g. 2.0",
            )
        if v6 and kind not in ("tis", "icepop", "seq-mask-tis"):
            yield error(
                ctx.where("loss_fn.truncated_importance_sampling_type"), f"{kind!r} is not tis, icepop or seq-mask-tis", "use one of them"
            )
        if v7 and _number(low) is not None and r is not None and _number(low) > r:  # type: ignore[operator]
            yield error(
                ctx.where("loss_fn.truncated_importance_sampling_ratio_min"), f"{low} is above the ratio {ratio}", f"use at most {ratio}"
            )
        if v7 and kind in ("icepop", "seq-mask-tis") and low is None:
            yield error(
                ctx.where("loss_fn.truncated_importance_sampling_ratio_min"), f"not set; {kind} needs a minimum ratio", "set one, e.g. 0.5"
            )
        if v6 and kind == "seq-mask-tis" and seq_ratios:
            yield error(
                ctx.where("loss_fn.sequence_level_importance_ratios"), "true with seq-mask-tis, which excludes it", "set it to false"
            )
    if v7 and _on(ctx, "loss_fn.use_cispo"):
        clash = [k for k in ("disable_ppo_ratio", "force_on_policy_ratio", "sequence_level_importance_ratios") if _on(ctx, f"loss_fn.{k}")]
        if _setting(ctx, "loss_fn.ratio_clip_c") is not None:
            clash.append("ratio_clip_c")
        if not token_loss:
            clash.append("token_level_loss=false")
        if clash:
            yield error(ctx.where("loss_fn.use_cispo"), f"CISPO excludes {', '.join(clash)}", "drop them or loss_fn.use_cispo")


def _grpo(ctx: Context) -> Iterator[Finding]:
    """nemo_rl/algorithms/grpo.py setup, v0.5.0 to v0.7.0 unless named: batch_multiplier only with
    dynamic sampling; with several dataloaders, prompts per step a multiple of
    data.num_prompts_per_dataloader (v0.6.0+); dedicated generation not with the Megatron
    generation backend (v0.5.0, v0.6.0) nor with SGLang (refit_policy_generation at the first step,
    v0.6.0+); skipping the reference logprobs only without a KL penalty
    (v0.7.0 in setup; v0.6.0 asserts it in grpo_train); an advantage estimator the release has
    (_create_advantage_estimator, v0.6.0+); dynamic sampling with at least one batch
    (dynamic_sampling, at the first step); grpo_train and async_grpo_train, at its first checkpoint: a metric_name
    of 'train:...' or 'val:...'."""
    if ctx.recipe_check is None:
        return
    mult = _number(_setting(ctx, "grpo.batch_multiplier"))
    if mult is not None and mult != 1 and not _on(ctx, "grpo.use_dynamic_sampling"):
        yield error(
            ctx.where("grpo.batch_multiplier"),
            f"{mult:g} without dynamic sampling, which it needs",
            "set it to 1 or grpo.use_dynamic_sampling=true",
        )
    if _tag_at_least(ctx, "v0.6.0") and _on(ctx, "data.use_multiple_dataloader"):
        per = _whole(_setting(ctx, "data.num_prompts_per_dataloader"))
        prompts = _whole(_setting(ctx, "grpo.num_prompts_per_step"))
        if per and prompts and mult is not None and _on(ctx, "grpo.use_dynamic_sampling"):
            prompts, per = int(prompts * mult), int(per * mult)
        if per and prompts and prompts % per:
            yield error(
                ctx.where("data.num_prompts_per_dataloader"), f"{per} does not divide grpo.num_prompts_per_step {prompts}", "use a divisor"
            )
    rel = ctx.release
    dedicated = _setting(ctx, "policy.generation.colocated.enabled") is False
    if rel is not None and rel.tag in ("v0.5.0", "v0.6.0") and dedicated and _setting(ctx, "policy.generation.backend") == "megatron":
        yield error(
            ctx.where("policy.generation.colocated.enabled"),
            f"false with the Megatron generation backend, which {rel.tag} runs only colocated",
            "use vLLM or colocated generation",
        )
    if _tag_at_least(ctx, "v0.6.0") and dedicated and _setting(ctx, "policy.generation.backend") == "sglang":
        yield error(
            ctx.where("policy.generation.colocated.enabled"),
            "false with the SGLang generation backend, which runs only colocated",
            "use vLLM or colocated generation",
        )
    if _tag_at_least(ctx, "v0.6.0") and _on(ctx, "grpo.skip_reference_policy_logprobs_calculation"):
        kl = _number(_setting(ctx, "loss_fn.reference_policy_kl_penalty"))
        if kl:
            yield error(
                ctx.where("grpo.skip_reference_policy_logprobs_calculation"),
                f"true with loss_fn.reference_policy_kl_penalty {kl:g}: the KL penalty needs the reference logprobs",
                "set loss_fn.reference_policy_kl_penalty=0 or drop it",
            )
    most = _whole(_setting(ctx, "grpo.dynamic_sampling_max_gen_batches"))
    if _on(ctx, "grpo.use_dynamic_sampling") and most is not None and most <= 0:
        yield error(
            ctx.where("grpo.dynamic_sampling_max_gen_batches"), f"{most}: dynamic sampling needs at least 1", "e.g. 10 (the recipe's)"
        )
    names = {"v0.6.0": ("gdpo", "grpo", "reinforce_plus_plus"), "v0.7.0": ("gdpo", "grpo", "opd", "reinforce_plus_plus")}
    estimator = _setting(ctx, "grpo.adv_estimator.name")
    if rel is not None and rel.tag in names and _setting(ctx, "grpo.adv_estimator") is not None and estimator not in names[rel.tag]:
        yield error(
            ctx.where("grpo.adv_estimator.name"),
            f"{estimator!r} is no advantage estimator of {rel.tag}",
            f"use one of {', '.join(names[rel.tag])}",
        )
    metric = _setting(ctx, "checkpointing.metric_name")
    if _on(ctx, "checkpointing.enabled") and metric is not None and not str(metric).startswith(("train:", "val:")):
        yield error(
            ctx.where("checkpointing.metric_name"),
            f"{metric!r}: NeMo RL stops at the first checkpoint unless it starts with 'train:' or 'val:'",
            "e.g. val:accuracy",
        )


def _validation_data(ctx: Context) -> Iterator[Finding]:
    """nemo_rl/algorithms/grpo.py setup (v0.5.0 to v0.7.0) asserts a validation dataset when
    validation is on (grpo.val_period > 0, val_at_start or val_at_end); grpo.py validate asserts it
    again. The datasets the generator writes get one only from the config: v0.5.0's
    ResponseDataset from data.val_data_path (response_datasets/response_dataset.py), v0.6.0+'s gsm8k
    from data.validation (nemo_rl/data/utils.py setup_response_data; GSM8KDataset in gsm8k.py never
    splits its training set, whatever data.train.split_validation_size says).
    Other datasets may split their own, which validate cannot see, so they are not judged."""
    if ctx.recipe_check is None or ctx.release is None:
        return
    period = _whole(_setting(ctx, "grpo.val_period")) or 0
    if not (period > 0 or _on(ctx, "grpo.val_at_start") or _on(ctx, "grpo.val_at_end")):
        return
    why = "grpo.val_period" if period > 0 else "grpo.val_at_start" if _on(ctx, "grpo.val_at_start") else "grpo.val_at_end"
    if ctx.release.data_layout == "flat":
        if _setting(ctx, "data.dataset_name") == "ResponseDataset" and not _setting(ctx, "data.val_data_path"):
            yield error(
                ctx.where("data.val_data_path"),
                f"not set, but validation is on ({why}): ResponseDataset then has no validation set and NeMo RL refuses to start",
                "set +data.val_data_path to the validation JSONL, or grpo.val_period=0",
            )
        return
    if _setting(ctx, "data.train.dataset_name") == "gsm8k" and _setting(ctx, "data.validation") is None:
        yield error(
            ctx.where("data.validation"),
            f"no validation dataset, but validation is on ({why}): gsm8k splits none and NeMo RL refuses to start",
            "add +data.validation.dataset_name=gsm8k and +data.validation.split=test (the generator writes both), or grpo.val_period=0",
        )


def _data(ctx: Context) -> Iterator[Finding]:
    """v0.5.0's nemo_rl/data/datasets/response_datasets/__init__.py load_response_dataset:
    ResponseDataset needs data.train_data_path; v0.6.0+'s nemo_rl/data/utils.py
    setup_response_data needs a data.train section."""
    rel = ctx.release
    if ctx.recipe_check is None or rel is None:
        return
    if rel.data_layout == "flat":
        if _setting(ctx, "data.dataset_name") == "ResponseDataset" and not _setting(ctx, "data.train_data_path"):
            yield error(
                ctx.where("data.train_data_path"), "not set: ResponseDataset reads its training data from it", "set +data.train_data_path"
            )
    elif _setting(ctx, "data.train") is None:
        yield error(
            ctx.where("data.train"), f"missing: {rel.tag} reads its training data from the data.train section", "regenerate for the release"
        )


def _async_grpo(ctx: Context) -> Iterator[Finding]:
    """examples/run_grpo.py main (run_grpo_math.py at v0.5.0): async GRPO refuses dynamic
    sampling, reward scaling and reward shaping, and several dataloaders (v0.6.0+).
    nemo_rl/algorithms/grpo.py async_grpo_train, before its first step (v0.5.0 to v0.7.0): it
    needs async rollouts (the vLLM async engine; v0.7.0 also Megatron's), importance-sampling
    correction and dedicated generation, and (v0.7.0) no router replay with the data plane."""
    if not _on(ctx, "grpo.async_grpo.enabled"):
        return
    clash = [k for k in ("grpo.use_dynamic_sampling", "grpo.reward_scaling.enabled", "grpo.reward_shaping.enabled") if _on(ctx, k)]
    if _tag_at_least(ctx, "v0.6.0") and _on(ctx, "data.use_multiple_dataloader"):
        clash.append("data.use_multiple_dataloader")
    for key in clash:
        yield error(ctx.where(key), "true with grpo.async_grpo.enabled, which does not support it", "disable one of them")
    if not _async_rollouts(ctx):
        yield error(
            ctx.where("grpo.async_grpo.enabled"),
            "true without async rollouts: async GRPO needs the generation backend's async engine",
            f"set {ASYNC_ENGINE}=true",
        )
    if not _on(ctx, "loss_fn.use_importance_sampling_correction"):
        yield error(
            ctx.where("loss_fn.use_importance_sampling_correction"),
            "false with async GRPO, which needs importance-sampling correction for its off-policy samples",
            "set loss_fn.use_importance_sampling_correction=true",
        )
    if _setting(ctx, "policy.generation.colocated.enabled") is not False:
        yield error(
            ctx.where("policy.generation.colocated.enabled"),
            "colocated generation with async GRPO, which needs dedicated generation",
            "python -m generator --generation-nodes N writes it",
        )
    if _tag_at_least(ctx, "v0.7.0") and _on(ctx, "policy.router_replay.enabled") and _on(ctx, "data_plane.enabled"):
        yield error(ctx.where("policy.router_replay.enabled"), "true with async GRPO and data_plane.enabled", "disable one of them")


def _async_rollouts(ctx: Context) -> bool:
    """grpo.py _should_use_async_rollouts: the vLLM (or, v0.7.0, Megatron) async engine."""
    backend = _setting(ctx, "policy.generation.backend")
    if backend == "vllm":
        return _on(ctx, ASYNC_ENGINE)
    return backend == "megatron" and _tag_at_least(ctx, "v0.7.0") and _on(ctx, "policy.generation.mcore_generation_config.async_engine")


def _nemo_gym(ctx: Context) -> Iterator[Finding]:
    """nemo_rl/algorithms/grpo.py _should_use_nemo_gym (v0.5.0 to v0.7.0): NeMo-Gym needs async
    rollouts and the generation server exposed over HTTP; v0.7.0's
    _resolve_message_level_advantage_penalties: the invalid-tool-call and malformed-thinking
    advantages need NeMo-Gym."""
    gym = _on(ctx, "env.should_use_nemo_gym")
    if gym and not _async_rollouts(ctx):
        yield error(ctx.where("env.should_use_nemo_gym"), "true without async rollouts, which NeMo-Gym needs", f"set {ASYNC_ENGINE}=true")
    elif gym and _setting(ctx, "policy.generation.backend") == "vllm" and not _on(ctx, f"{VLLM}.expose_http_server"):
        yield error(ctx.where("env.should_use_nemo_gym"), "true, but vLLM's server is not exposed", f"set {VLLM}.expose_http_server=true")
    if _tag_at_least(ctx, "v0.7.0") and not gym:
        for key in ("grpo.invalid_tool_call_advantage", "grpo.malformed_thinking_advantage"):
            if _setting(ctx, key) is not None:
                yield error(ctx.where(key), "set, but it applies only on the NeMo-Gym path (env.should_use_nemo_gym)", "set it to null")


def _math_env(ctx: Context) -> Iterator[Finding]:
    """nemo_rl/environments/math_environment.py (v0.5.0 to v0.7.0): MathEnvironment.__init__
    (BaseMathEnvironment.__init__ at v0.6.0+) takes a string verifier_type; HFVerifyWorker.verify,
    at the first step's rewards, knows hf_math_verify and dapo_math_verify."""
    impl = _setting(ctx, "env.math.math_verify_impl")
    if impl is not None and impl not in ("hf_math_verify", "dapo_math_verify"):
        yield error(
            ctx.where("env.math.math_verify_impl"),
            f"{impl!r}: the math environment knows hf_math_verify and dapo_math_verify, and fails at the first step's rewards",
            "use hf_math_verify (the recipe's)",
        )
    verifier = _setting(ctx, "env.math.verifier_type")
    if verifier is not None and not isinstance(verifier, str):
        yield error(ctx.where("env.math.verifier_type"), f"{verifier!r} is not a name", "drop it")


def _tokenizer(ctx: Context) -> Iterator[Finding]:
    """nemo_rl/algorithms/utils.py get_tokenizer (v0.5.0 to v0.7.0; and Automodel's copy,
    nemo_rl/models/automodel/setup.py get_tokenizer, v0.6.0+): chat_template_kwargs is a mapping."""
    kwargs = _setting(ctx, "policy.tokenizer.chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        yield error(
            ctx.where("policy.tokenizer.chat_template_kwargs"), f"{kwargs!r} is not a mapping", "write {enable_thinking:true} or null"
        )


def _checkpoint(ctx: Context) -> Iterator[Finding]:
    """nemo_rl/models/policy/lm_policy.py Policy.save_checkpoint (v0.5.0 to v0.7.0), at the first
    checkpoint grpo_train saves: the v1 DTensor worker takes no checkpointing.model_save_format
    (the Gemma 3 recipe sets null)."""
    if not _on(ctx, "checkpointing.enabled") or _on(ctx, MEGATRON) or not _on(ctx, DTENSOR) or _on(ctx, V2):
        return
    fmt = _setting(ctx, "checkpointing.model_save_format")
    if fmt is not None:
        yield error(
            ctx.where("checkpointing.model_save_format"),
            f"{fmt!r} with the v1 DTensor worker (policy.dtensor_cfg._v2 false): NeMo RL fails at the first checkpoint",
            "set it to null",
        )


def _cluster_settings(ctx: Context) -> Iterator[Finding]:
    """nemo_rl/distributed/virtual_cluster.py RayVirtualCluster._init_placement_groups (v0.5.0 to
    v0.7.0): NRL_VIRTUAL_CLUSTER_MAX_RETRIES a whole number > 0."""
    for env in ctx.values.get("extraEnv") or []:
        if env.get("name") == "NRL_VIRTUAL_CLUSTER_MAX_RETRIES":
            value = str(env.get("value", ""))
            if not value.isdigit() or int(value) < 1:
                yield error(
                    "extraEnv[NRL_VIRTUAL_CLUSTER_MAX_RETRIES]", f"{value!r}: NeMo RL needs a whole number > 0", "e.g. 6 (its default)"
                )


RULES = (
    _generation,
    _backend,
    _batching,
    _dtensor_worker,
    _vllm,
    _loss,
    _grpo,
    _validation_data,
    _data,
    _async_grpo,
    _nemo_gym,
    _math_env,
    _tokenizer,
    _checkpoint,
    _cluster_settings,
)


def check(ctx: Context) -> Iterator[Finding]:
    if not ctx.grpo.get("enabled", True) or ctx.recipe_check is None:
        return
    for rule in RULES:
        yield from rule(ctx)
