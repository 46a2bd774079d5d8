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


# Models beyond the generator's presets: heads and positions as their Hugging Face config.json
# files read, copied whole into github.com/citsjtu2020/LLM-Prof sglang/Model_Config.md (commit
# 8434c8d19c396b2f95d92a67845a7c0a0e0dd512). Only the exact names read there: an -Instruct variant
# is another repository, not carried until its own config.json is read.
_READ = "Hugging Face config.json of {model}, as copied in github.com/citsjtu2020/LLM-Prof sglang/Model_Config.md@8434c8d"
_BEYOND = (
    # model, num_attention_heads, num_key_value_heads, max_position_embeddings
    ("meta-llama/Llama-3.1-8B", 32, 8, 131072),
    ("meta-llama/Llama-3.2-3B", 24, 8, 131072),
    ("Qwen/Qwen2.5-3B", 16, 2, 32768),
    ("Qwen/Qwen2.5-7B", 28, 4, 131072),
    ("Qwen/Qwen2.5-14B", 40, 8, 131072),
    ("Qwen/Qwen2.5-32B", 40, 8, 131072),
    ("Qwen/Qwen3-4B", 32, 8, 40960),
    ("Qwen/Qwen3-8B", 32, 8, 40960),
    ("Qwen/Qwen3-14B", 40, 8, 40960),
    ("Qwen/Qwen3-32B", 64, 8, 40960),
    ("Qwen/Qwen3-30B-A3B", 32, 4, 40960),
)
FACTS.update(
    {
        name: ModelFacts(
            model=name, attention_heads=heads, kv_heads=kv, tokenizer=name, max_positions=positions, source=_READ.format(model=name)
        )
        for name, heads, kv, positions in _BEYOND
    }
)


def facts(model: str) -> ModelFacts | None:
    return FACTS.get(model)
