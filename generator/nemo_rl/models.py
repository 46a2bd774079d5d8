"""Facts about every model the generator offers (run_spec.MODELS), each with its source: the
model's config.json on Hugging Face (values as published there; `None` where the repository found
no published value to cite, so no rule is built on a guess)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelFacts:
    model: str  # the Hugging Face name (policy.model_name)
    attention_heads: int  # num_attention_heads (text_config's for Gemma 3)
    kv_heads: int  # num_key_value_heads
    tokenizer: str  # the tokenizer NeMo RL loads for it (the model's own repository)
    max_positions: int | None  # max_position_embeddings; None: not found published, no rule
    source: str  # where the numbers are published


FACTS: dict[str, ModelFacts] = {
    "google/gemma-3-27b-it": ModelFacts(
        model="google/gemma-3-27b-it",
        attention_heads=32,
        kv_heads=16,
        tokenizer="google/gemma-3-27b-it",
        max_positions=None,  # text_config.max_position_embeddings: no published config.json found to cite
        source="https://huggingface.co/google/gemma-3-27b-it/blob/main/config.json (text_config)",
    ),
    "meta-llama/Llama-3.2-1B-Instruct": ModelFacts(
        model="meta-llama/Llama-3.2-1B-Instruct",
        attention_heads=32,
        kv_heads=8,
        tokenizer="meta-llama/Llama-3.2-1B-Instruct",
        max_positions=131072,
        source="https://huggingface.co/meta-llama/Llama-3.2-1B-Instruct/blob/main/config.json",
    ),
    "Qwen/Qwen2.5-1.5B": ModelFacts(
        model="Qwen/Qwen2.5-1.5B",
        attention_heads=12,
        kv_heads=2,
        tokenizer="Qwen/Qwen2.5-1.5B",
        max_positions=None,  # published figures disagree (32768 / 131072): left out
        source="https://huggingface.co/Qwen/Qwen2.5-1.5B/blob/main/config.json",
    ),
}


def facts(model: str) -> ModelFacts | None:
    return FACTS.get(model)
