"""NeMo RL values that start a run which trains nothing, or that stop it after the GPU workers
started, beyond the start-up asserts (nemo_rl_asserts.py). Each cites the code it follows
(NVIDIA-NeMo/RL at the tags named, vendor/nemo-rl-src/, read, not copied) or the library's docs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from generator.validate.findings import Finding, error
from generator.validate.release_source import registered_datasets, vllm_explicit_kwargs
from generator.validate.rules.context import Context

# torch.optim's algorithms (pytorch.org/docs/stable/optim.html, "Algorithms"), as
# hydra.utils.get_class imports them in DTensorPolicyWorker(V2)'s optimizer set-up.
TORCH_OPTIMIZERS = frozenset(
    [
        "Adadelta",
        "Adafactor",
        "Adagrad",
        "Adam",
        "AdamW",
        "SparseAdam",
        "Adamax",
        "ASGD",
        "LBFGS",
        "NAdam",
        "RAdam",
        "RMSprop",
        "Rprop",
        "SGD",
        "Muon",
    ]
)
DATASET_KEYS = ("data.dataset_name", "data.train.dataset_name", "data.validation.dataset_name", "data.default.dataset_name")


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _sampling(ctx: Context) -> Iterator[Finding]:
    """A temperature of 0 is greedy decoding in vLLM (SamplingParams): every generation of a prompt is
    the same, so each GRPO group's rewards are equal and every advantage (reward minus the group's
    baseline, nemo_rl/algorithms/grpo.py) is 0: the run trains nothing. vLLM refuses a negative one."""
    key = "policy.generation.temperature"
    t = _number(ctx.setting(key))
    if t is not None and t <= 0:
        yield error(
            ctx.where(key),
            f"{t:g}: greedy decoding gives every generation of a prompt the same answer, so every GRPO advantage is 0"
            if t == 0
            else f"{t:g}: vLLM refuses a negative temperature",
            "use 1.0 (the recipe's) or another value above 0",
        )
    key = "policy.generation.max_new_tokens"
    n = ctx.setting(key)
    if isinstance(n, int) and not isinstance(n, bool) and n < 1:
        yield error(
            ctx.where(key), f"{n}: no token is generated, every reward is 0", "use ${policy.max_total_sequence_length} or a positive count"
        )


def _checkpointing(ctx: Context) -> Iterator[Finding]:
    """grpo.py grpo_train (v0.5.0 to v0.7.0) saves when (step + 1) % checkpointing.save_period == 0:
    a period of 0 raises ZeroDivisionError at the end of the first step."""
    if ctx.setting("checkpointing.enabled") is not True:
        return
    key = "checkpointing.save_period"
    period = ctx.setting(key)
    if isinstance(period, int) and not isinstance(period, bool) and period < 1:
        yield error(ctx.where(key), f"{period}: NeMo RL divides the step by it and stops after the first step", "use 1 or more, e.g. 10")


def _optimizer(ctx: Context) -> Iterator[Finding]:
    """DTensorPolicyWorker and DTensorPolicyWorkerV2 (nemo_rl/models/policy/workers/, v0.5.0 to
    v0.7.0) build the optimizer with hydra.utils.get_class(policy.optimizer.name): a full import path."""
    if ctx.setting("policy.dtensor_cfg.enabled") is not True or ctx.setting("policy.megatron_cfg.enabled") is True:
        return
    key = "policy.optimizer.name"
    name = ctx.setting(key)
    if isinstance(name, str) and not name.startswith("${"):
        module, _, cls = name.rpartition(".")
        if not module:
            yield error(ctx.where(key), f"{name}: get_class needs a full import path", f"use torch.optim.{_near(name)}")
        elif (module == "torch.optim" and cls not in TORCH_OPTIMIZERS) or (module.startswith("torch.") and module != "torch.optim"):
            yield error(
                ctx.where(key),
                f"{name} is not a class of torch.optim; the policy workers stop importing it",
                f"use torch.optim.{_near(cls)}",
            )
    lr = _number(ctx.setting("policy.optimizer.kwargs.lr"))
    if lr is not None and lr <= 0:
        yield error(ctx.where("policy.optimizer.kwargs.lr"), f"{lr:g}: the weights never change", "use the recipe's, e.g. 5.0e-06")


def _near(name: str) -> str:
    for known in TORCH_OPTIMIZERS:
        if known.lower() == name.lower():
            return known
    return "AdamW"


def _at_least(tag: str, floor: str) -> bool:
    def parts(t: str) -> tuple[int, ...]:
        return tuple(int(p) for p in t.lstrip("v").split(".") if p.isdigit())

    return parts(tag) >= parts(floor)


def _datasets(ctx: Context) -> Iterator[Finding]:
    """load_response_dataset (nemo_rl/data/datasets/response_datasets/__init__.py) raises "Unsupported
    dataset_name" for a name it does not register (v0.5.0, v0.6.0), or that is neither registered
    nor a dotted import path (v0.7.0)."""
    rel = ctx.release
    if rel is None:
        return
    for key in DATASET_KEYS:
        name = ctx.setting(key)
        if not isinstance(name, str) or name.startswith("${"):
            continue
        known = registered_datasets(rel.tag)
        if not known or name in known or (_at_least(rel.tag, "v0.7.0") and "." in name):
            continue
        near = [k for k in sorted(known) if k.lower().replace("-", "").replace("_", "") == name.lower().replace("-", "").replace("_", "")]
        yield error(
            ctx.where(key),
            f"{name!r} is not a dataset {rel.tag} registers; load_response_dataset stops with 'Unsupported dataset_name'",
            f"use {near[0]}" if near else "use a registered name (e.g. gsm8k, OpenMathInstruct-2) or ResponseDataset with a data path",
        )


def _vllm_kwargs(ctx: Context) -> Iterator[Finding]:
    """vllm_worker.py (v0.5.0 to v0.7.0) builds vLLM's arguments as dict(model=..., tensor_parallel_size=...,
    ..., **vllm_kwargs): a key it already passes raises TypeError ('got multiple values for keyword
    argument') in every vLLM worker."""
    rel = ctx.release
    given = ctx.section("policy.generation.vllm_kwargs")  # plain Python as written
    if rel is None or not isinstance(given, dict):
        return
    twice = sorted(set(given) & vllm_explicit_kwargs(rel.tag))
    for key in twice:
        cfg = f"policy.generation.vllm_cfg.{key}"
        yield error(
            ctx.where(f"policy.generation.vllm_kwargs.{key}"),
            f"NeMo RL {rel.tag} already passes {key} to vLLM; given twice, every vLLM worker stops with a TypeError",
            f"remove it; set {cfg} where the recipe has it" if ctx.setting(cfg) is not None else "remove it",
        )


# Counts NeMo RL divides by or loops over (v0.5.0 to v0.7.0): below 1 the run stops or trains nothing.
COUNTS = {
    "policy.train_micro_batch_size": "lm_policy.py Policy.train cuts each batch into micro-batches of this size",
    "policy.train_global_batch_size": "the samples of one optimizer step; GRPO divides the step's samples by it",
    "policy.logprob_batch_size": "lm_policy.py Policy.get_logprobs cuts each batch into chunks of this size",
    "grpo.max_num_epochs": "grpo.py grpo_train runs while the epoch is below it: no step runs",
    "env.math.num_workers": "math_environment.py MathEnvironment spreads every reward batch over this many workers (modulo it)",
}


def _counts(ctx: Context) -> Iterator[Finding]:
    for key, why in COUNTS.items():
        n = ctx.setting(key)
        if isinstance(n, int) and not isinstance(n, bool) and n < 1:
            yield error(ctx.where(key), f"{n}: {why}", "use 1 or more (the recipe's value)")
    if isinstance(period := ctx.setting("grpo.val_period"), int) and period > 0:
        n = ctx.setting("grpo.val_batch_size")
        if isinstance(n, int) and not isinstance(n, bool) and n < 1:
            yield error(
                ctx.where("grpo.val_batch_size"), f"{n}: validation runs every {period} steps in batches of this size", "use 1 or more"
            )
    kl = _number(ctx.setting("loss_fn.reference_policy_kl_penalty"))
    if kl is not None and kl < 0:
        yield error(
            ctx.where("loss_fn.reference_policy_kl_penalty"),
            f"{kl:g}: a negative KL penalty rewards moving away from the reference model (ClippedPGLossFn adds penalty x KL to the loss)",
            "use 0 (no penalty) or the recipe's 0.01",
        )
    length, total = ctx.setting("policy.generation.vllm_cfg.max_model_len"), ctx.setting("policy.max_total_sequence_length")
    if isinstance(length, int) and isinstance(total, int) and not isinstance(length, bool) and 0 < length < total:
        yield error(
            ctx.where("policy.generation.vllm_cfg.max_model_len"),
            f"{length} is below policy.max_total_sequence_length {total}: vLLM refuses a prompt longer than its maximum model"
            " length and the generation step stops",
            "use ${policy.max_total_sequence_length} (the recipe's)",
        )


def check(ctx: Context) -> Iterator[Finding]:
    if not ctx.grpo.get("enabled", True) or ctx.recipe_check is None:  # run_config is None exactly then; building it costs omegaconf
        return
    yield from _sampling(ctx)
    yield from _checkpointing(ctx)
    yield from _optimizer(ctx)
    yield from _datasets(ctx)
    yield from _vllm_kwargs(ctx)
    yield from _counts(ctx)
