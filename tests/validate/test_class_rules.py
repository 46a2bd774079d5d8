"""The judges behind issue 25's class 4-10 rules, one by one: the image reference grammar, the facts
read from each release's own code, and the model facts beyond the presets with their sources."""

from __future__ import annotations

import pytest

from generator.nemo_rl.models import FACTS, facts
from generator.validate.release_source import (
    read_registered_datasets,
    read_vllm_explicit_kwargs,
    registered_datasets,
    vllm_explicit_kwargs,
)
from generator.validate.rules.images import reference_problem

VALID_REFERENCES = [
    "nvcr.io/nvidia/nemo-rl",
    "us-docker.pkg.dev/my-proj/mirror/nemo-rl",
    "localhost:5000/nvidia/nemo-rl",
    "registry.example.com:443/a/b/c",
    "fluent/fluent-bit",
    "ubuntu",
    "a/b__c/d.e/f-g/h---i",
    "[2001:db8::1]:5000/nemo-rl",
]
INVALID_REFERENCES = [
    "nvcr.io/NVIDIA/nemo-rl",  # upper case in a path component
    "Fluent/fluent-bit",  # upper case: read as a registry host without a dot
    "nvcr.io/nvidia/nemo-rl:v0.7.0",  # a tag inside the repository
    "nvcr.io//nvidia/nemo-rl",  # an empty component
    "nvcr.io/nvidia/nemo-rl/",  # a trailing slash
    "nvcr.io/nvidia/nemo-rl-",  # a trailing separator
    "nvcr.io/nvidia/-nemo-rl",  # a leading separator
    "nvcr.io/nvidia/nemo___rl",  # three underscores
    "https://nvcr.io/nvidia/nemo-rl",  # a scheme
    "nvcr.io/nvidia/nemo-rl@sha256:" + "a" * 64,  # a digest inside the repository
    "-bad.io/nemo-rl",  # a registry host starting with '-'
    "x" * 256,  # above the grammar's 255 characters
]


@pytest.mark.parametrize("ref", VALID_REFERENCES)
def test_references_the_grammar_accepts(ref):
    assert reference_problem(ref) is None


@pytest.mark.parametrize("ref", INVALID_REFERENCES)
def test_references_the_grammar_refuses(ref):
    assert reference_problem(ref) is not None


def test_dataset_names_are_read_from_each_release():
    v050, v060, v070 = (registered_datasets(t) for t in ("v0.5.0", "v0.6.0", "v0.7.0"))
    assert {"ResponseDataset", "OpenMathInstruct-2"} <= v050 and "gsm8k" not in v050
    assert {"gsm8k", "ResponseDataset"} <= v060 and "GSM8K" not in v060
    assert {"gsm8k", "GSM8K", "AIME2025"} <= v070
    assert registered_datasets("v9.9.9") == frozenset()


def test_vllm_keywords_are_read_from_each_release():
    for tag in ("v0.5.0", "v0.6.0", "v0.7.0"):
        given = vllm_explicit_kwargs(tag)
        assert {"model", "tensor_parallel_size", "gpu_memory_utilization", "enable_prefix_caching", "enable_sleep_mode"} <= given
        assert "max_num_seqs" not in given and "kv_cache_dtype" not in given


@pytest.mark.parametrize("tag", ["v0.5.0", "v0.6.0", "v0.7.0"])
def test_the_release_facts_table_is_what_the_source_says(tag):
    # release_facts.json (scripts/sync.sh) spares every process the two ast parses
    assert registered_datasets(tag) == read_registered_datasets(tag) != frozenset()
    assert vllm_explicit_kwargs(tag) == read_vllm_explicit_kwargs(tag) != frozenset()


def test_every_model_fact_carries_its_source_and_an_instruct_variant_is_not_guessed():
    for name, fact in FACTS.items():
        assert fact.model == name and "config.json" in fact.source and name in fact.source
        assert fact.attention_heads % fact.kv_heads == 0  # grouped-query attention
    assert facts("Qwen/Qwen2.5-7B") is not None and facts("Qwen/Qwen2.5-7B-Instruct") is None
