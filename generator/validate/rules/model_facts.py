"""Rules that follow from the model's own facts (generator/nemo_rl/models.py): tensor-parallel sizes
that split the attention and KV heads, the model's own tokenizer, lengths within its positions, and
a GRPO group of more than one generation."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from generator.nemo_rl.models import facts
from generator.validate.findings import Finding, error, warning
from generator.validate.rules.context import Context

TP_KEYS = ("policy.dtensor_cfg.tensor_parallel_size", "policy.generation.vllm_cfg.tensor_parallel_size")
LENGTH_KEYS = ("policy.max_total_sequence_length", "policy.generation.max_new_tokens", "policy.generation.vllm_cfg.max_model_len")


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def check(ctx: Context) -> Iterator[Finding]:
    if not ctx.grpo.get("enabled", True):
        return
    if ctx.recipe_check is None:
        return
    gens = _whole(ctx.setting("grpo.num_generations_per_prompt"))
    if gens == 1:
        key = "grpo.num_generations_per_prompt"
        yield error(
            ctx.where(key),
            "1 generation per prompt: every GRPO advantage (reward minus the group's mean) is 0, the run learns nothing",
            f"set {key}=2 or more (the generator's presets use 16-64)",
        )
    model = ctx.setting("policy.model_name")
    fact = facts(str(model)) if model is not None else None
    if fact is None:
        if isinstance(model, str) and not model.startswith("${"):
            yield warning(
                ctx.where("policy.model_name"),
                f"{model}: validate carries no published facts of this model, so it cannot check that the tensor-parallel sizes"
                " divide its attention and KV heads, that the tokenizer is its own, or the lengths against its positions",
                "check num_attention_heads and num_key_value_heads in its config.json against both tensor_parallel_size overrides",
            )
        return
    for key in TP_KEYS:
        tp = _whole(ctx.setting(key))
        if tp is None or tp < 1:
            continue
        for what, heads in (("attention heads", fact.attention_heads), ("KV heads", fact.kv_heads)):
            if heads % tp:
                ok = [d for d in range(1, heads + 1) if heads % d == 0]
                yield error(
                    ctx.where(key),
                    f"TP {tp} does not divide {fact.model}'s {heads} {what} ({fact.source})",
                    f"use a TP size that divides {heads}: {', '.join(map(str, ok))}",
                )
                break
    tokenizer = ctx.setting("policy.tokenizer.name")
    if tokenizer is not None and str(tokenizer) != fact.tokenizer:
        yield error(
            ctx.where("policy.tokenizer.name"),
            f"{tokenizer} is not {fact.model}'s tokenizer: token ids would not match the model's vocabulary",
            f"drop the override or set policy.tokenizer.name={fact.tokenizer}",
        )
    if fact.max_positions is not None:
        for key in LENGTH_KEYS:
            n = _whole(ctx.setting(key))
            if n is not None and n > fact.max_positions:
                yield error(
                    ctx.where(key),
                    f"{n} is above {fact.model}'s {fact.max_positions} positions (max_position_embeddings, {fact.source}): vLLM refuses it",
                    f"use at most {fact.max_positions}",
                )
