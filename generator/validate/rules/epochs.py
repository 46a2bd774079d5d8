"""A synchronous GRPO run on GSM8K's train split whose grpo.max_num_steps is beyond what its
grpo.max_num_epochs passes over the data give (generator/nemo_rl/epochs.py has NeMo RL's code
for it): NeMo RL ends the run normally when the data is spent, short of the steps asked for."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from generator.nemo_rl import epochs
from generator.validate.findings import Finding, error
from generator.validate.rules.context import Context


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _trains_on_gsm8k_train(ctx: Context) -> bool:
    """Whether the run's training data is GSM8K's whole train split, as the generator writes it."""
    rel = ctx.release
    if rel is None:
        return False
    if rel.data_layout == "flat":
        jsonl = (ctx.values.get("prepare") or {}).get("gsm8kJsonlDir") or ""
        return (
            bool(jsonl)
            and ctx.setting("data.dataset_name") == "ResponseDataset"
            and ctx.setting("data.train_data_path") == f"{jsonl.rstrip('/')}/train.jsonl"
        )
    if ctx.setting("data.use_multiple_dataloader"):
        return False  # v0.6.0+: max_num_epochs is ignored with several dataloaders
    return ctx.setting("data.train.dataset_name") == "gsm8k" and ctx.setting("data.train.split") in (None, "train")


def check(ctx: Context) -> Iterator[Finding]:
    if not ctx.grpo.get("enabled", True) or ctx.recipe_check is None:
        return
    if ctx.setting("grpo.async_grpo.enabled") or ctx.setting("grpo.use_dynamic_sampling"):
        return  # async_grpo_train counts steps alone; dynamic sampling takes several batches a step
    if not _trains_on_gsm8k_train(ctx):
        return
    steps = _whole(ctx.setting("grpo.max_num_steps"))
    n_epochs = _whole(ctx.setting("grpo.max_num_epochs"))
    prompts = _whole(ctx.setting("grpo.num_prompts_per_step"))
    if not steps or n_epochs is None or n_epochs < 1 or not prompts or prompts < 1:
        return
    got = epochs.reach(steps, prompts, n_epochs)
    if not got.short_of(steps):
        return
    rows = epochs.GSM8K_TRAIN_ROWS
    if not got.per_epoch:
        yield error(
            ctx.where("grpo.num_prompts_per_step"),
            f"{prompts} prompts per step is more than GSM8K's {rows} train rows: the dataloader drops the partial batch "
            f"and the run trains no step ({epochs.GRPO_PY})",
            f"set grpo.num_prompts_per_step to {rows} or fewer",
        )
        return
    need = epochs.epochs_needed(steps, prompts)
    yield error(
        ctx.where("grpo.max_num_steps"),
        f"{steps} steps, but {n_epochs} epoch(s) of GSM8K's {rows} train rows at {prompts} prompts per step are "
        f"{got.steps} steps ({got.per_epoch} per epoch, the last partial batch dropped): NeMo RL ends the run at step "
        f"{got.steps} ({epochs.GRPO_PY})",
        f"set grpo.max_num_epochs={need}, or grpo.max_num_steps={got.steps}",
    )
