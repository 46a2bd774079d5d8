"""The rendered NeMo RL command, checked against the real recipe configs of each release."""

from __future__ import annotations

import json
import shlex

import pytest
from conftest import kinds, one, render, values_for, with_changes

from generator.generate import render_text
from generator.nemo_rl import run_spec as grpo
from generator.nemo_rl.recipe_config import (
    Override,
    OverrideError,
    apply_override,
    apply_overrides,
    load_recipe,
    parse_entrypoint,
    parse_value,
)
from generator.nemo_rl.releases import RELEASES
from generator.values.build import Options, layout_notes
from generator.vendored import recipe_path

TAGS = sorted(RELEASES)


@pytest.fixture(scope="module")
def helm4(helms):
    return next(h for h in helms if h.major == 4)


def recipe_config(tag: str, recipe: str) -> dict:
    return load_recipe(recipe_path(tag, recipe))


def overrides(values: dict) -> dict:
    """grpo.overrides as {key: parsed value} (the `+` prefix dropped)."""
    out = {}
    for arg in values["grpo"]["overrides"]:
        ov = Override.parse(arg)
        out[ov.key] = ov.value
    return out


def launch_spec(objs) -> dict:
    cm = next(c for c in kinds(objs, "ConfigMap") if "launch.json" in c["data"])
    return json.loads(cm["data"]["launch.json"])


# --- the config loader and the override rules ---------------------------------------------


def test_recipe_defaults_chain_is_merged():
    cfg = recipe_config("v0.5.0", "examples/configs/recipes/llm/grpo-gemma3-27b-it-8n4g-fsdp2tp4-actckpt-long.yaml")
    assert cfg["policy"]["dtensor_cfg"]["tensor_parallel_size"] == 4  # the recipe itself
    assert cfg["policy"]["model_name"] == "google/gemma-3-27b-it"  # its parent, 8n8g
    assert cfg["grpo"]["val_period"] == 10  # the base, grpo_math_1B.yaml
    assert cfg["cluster"] == {"gpus_per_node": 4, "num_nodes": 8}


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("grpo.max_num_step=3", "not in the recipe's config .Hydra: Could not override"),
        ("+grpo.max_num_steps=3", "already in the recipe's config"),
        ("data.train_data_path=/x", "not in the recipe's config"),
        ("grpo max=3", "Hydra cannot parse it"),
    ],
)
def test_override_rules_reject(arg, message):
    cfg = recipe_config("v0.5.0", "examples/configs/grpo_math_1B.yaml")
    with pytest.raises(OverrideError, match=message):
        apply_overrides(cfg, [arg])


def test_override_rules_accept():
    cfg = recipe_config("v0.7.0", "examples/configs/grpo_math_1B.yaml")
    assert cfg["data"]["validation"] is None
    out = apply_overrides(
        cfg,
        [
            "+data.validation.dataset_name=gsm8k",
            "++grpo.max_num_steps=5",
            "cluster.segment_size=null",
            "policy.generation.colocated.enabled=False",
        ],
    )
    assert out["data"]["validation"] == {"dataset_name": "gsm8k"}
    assert out["grpo"]["max_num_steps"] == 5
    assert out["cluster"]["segment_size"] is None
    assert out["policy"]["generation"]["colocated"]["enabled"] is False
    assert cfg["grpo"]["max_num_steps"] == 1000000  # the input is not modified


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("true", True),
        ("False", False),
        ("null", None),
        ("300", 300),
        ("0.9", 0.9),
        ("1e-6", 1e-6),
        ("/data/x", "/data/x"),
        ("google/gemma-3-27b-it", "google/gemma-3-27b-it"),
    ],
)
def test_override_values_parse_like_nemo_rl(text, value):
    assert parse_value(text) == value


# --- the rendered command for every release -----------------------------------------------

CASES = [
    (tag, model, nodes, gen)
    for tag in TAGS
    for model, nodes, gen in [
        ("gemma3-27b", 2, None),
        ("gemma3-27b", 8, 4),
        ("llama3.2-1b", 1, None),
        ("qwen2.5-1.5b", 1, None),
        ("qwen2.5-1.5b", 4, 2),
    ]
]


@pytest.mark.parametrize(("tag", "model", "nodes", "gen"), CASES, ids=[f"{t}-{m}-{n}n-g{g}" for t, m, n, g in CASES])
def test_rendered_command_passes_the_override_check(helm4, tag, model, nodes, gen):
    values = values_for("h200", release=tag, model=model, nodes=nodes, generation_nodes=gen)
    objs = render(helm4, [values])
    cmd = parse_entrypoint(launch_spec(objs)["entrypoint"])
    assert cmd.script == RELEASES[tag].entrypoint
    assert cmd.recipe == grpo.MODELS[model].recipe
    cfg = apply_overrides(recipe_config(tag, cmd.recipe), cmd.overrides)
    assert cfg["cluster"]["num_nodes"] * cfg["cluster"]["gpus_per_node"] == nodes * 8
    assert cfg["policy"]["model_name"] == grpo.MODELS[model].model
    assert one(objs, "RayCluster")["spec"]["rayVersion"] == RELEASES[tag].ray_version
    if RELEASES[tag].has_segment_size:
        assert cfg["cluster"]["segment_size"] is None


@pytest.mark.parametrize(
    ("gen_nodes", "colocated", "resources", "memory"),
    [(None, True, None, 0.6), (1, False, {"num_nodes": 1, "gpus_per_node": 8}, 0.9)],
)
def test_seed_run_renders_as_the_tutorial_topology(helm4, gen_nodes, colocated, resources, memory):
    """gemma3-27b, 2 nodes x 8 GPUs, 16 prompts x 64 generations, 300 steps, training TP 8, vLLM TP 4
    (NeMo RL's Gemma 3 27B recipe); by default colocated with the recipe's vLLM memory share, as the
    recipe; with --generation-nodes 1 the seed tutorial's split (one vLLM node with two engines)."""
    for tag in ("v0.5.0", "v0.7.0"):
        objs = render(helm4, [values_for("h200", release=tag, generation_nodes=gen_nodes)])
        spec = launch_spec(objs)
        cfg = apply_overrides(
            recipe_config(tag, parse_entrypoint(spec["entrypoint"]).recipe), parse_entrypoint(spec["entrypoint"]).overrides
        )
        assert cfg["cluster"]["num_nodes"] == 2 and cfg["cluster"]["gpus_per_node"] == 8
        assert (cfg["grpo"]["num_prompts_per_step"], cfg["grpo"]["num_generations_per_prompt"], cfg["grpo"]["max_num_steps"]) == (
            16,
            64,
            300,
        )
        gen = cfg["policy"]["generation"]
        assert gen["colocated"]["enabled"] is colocated
        assert gen["colocated"]["resources"] == (resources or {"num_nodes": None, "gpus_per_node": None})
        assert gen["vllm_cfg"]["gpu_memory_utilization"] == memory
        assert gen["vllm_cfg"]["tensor_parallel_size"] == 4 and cfg["policy"]["dtensor_cfg"]["tensor_parallel_size"] == 8
        assert spec["expected_gpus"] == 16


def test_gsm8k_ground_truth_wiring_per_release(helm4):
    v5 = parse_entrypoint(launch_spec(render(helm4, [values_for(release="v0.5.0")]))["entrypoint"]).overrides
    assert "data.dataset_name=ResponseDataset" in v5
    assert "+data.train_data_path=/data/nemo-rl/datasets/gsm8k/train.jsonl" in v5
    assert "+data.val_data_path=/data/nemo-rl/datasets/gsm8k/test.jsonl" in v5
    assert not any("output_key" in a or "answer" in a for a in v5)  # the sample's output_key=answer gave reward 0
    v7 = parse_entrypoint(launch_spec(render(helm4, [values_for(release="v0.7.0")]))["entrypoint"]).overrides
    assert "data.train.dataset_name=gsm8k" in v7
    assert "+data.validation.dataset_name=gsm8k" in v7 and "+data.validation.split=test" in v7


def test_v05_prepare_writes_the_jsonl_the_command_reads(helm4):
    objs = render(helm4, [values_for(release="v0.5.0")])
    cm = next(c for c in kinds(objs, "ConfigMap") if "prepare.json" in c["data"])
    prep = json.loads(cm["data"]["prepare.json"])
    assert prep["gsm8k_jsonl_dir"] == "/data/nemo-rl/datasets/gsm8k"
    v7 = json.loads(
        next(c for c in kinds(render(helm4, [values_for()]), "ConfigMap") if "prepare.json" in c["data"])["data"]["prepare.json"]
    )
    assert v7["gsm8k_jsonl_dir"] == ""


def test_a_wrong_key_in_values_is_caught_by_the_check(helm4):
    v = values_for(release="v0.7.0")
    v = with_changes(v, {"grpo.extraOverrides": ["grpo.max_steps=3"]})
    cmd = parse_entrypoint(launch_spec(render(helm4, [v]))["entrypoint"])
    with pytest.raises(OverrideError, match=r"grpo\.max_steps"):
        apply_overrides(recipe_config("v0.7.0", cmd.recipe), cmd.overrides)


def test_wandb_run_is_kept_across_restarts(helm4):
    cmd = parse_entrypoint(launch_spec(render(helm4, [values_for(wandb=True)]))["entrypoint"])
    assert "logger.wandb_enabled=true" in cmd.overrides
    assert "+logger.wandb.id=gemma3-27b-gsm8k" in cmd.overrides and "+logger.wandb.resume=allow" in cmd.overrides
    apply_overrides(recipe_config("v0.7.0", cmd.recipe), cmd.overrides)


def test_entrypoint_quotes_every_argument_for_the_shell(helm4):
    v = values_for()
    entry = launch_spec(render(helm4, [v]))["entrypoint"]
    assert entry.startswith("cd /opt/nemo-rl && uv run python examples/run_grpo.py --config 'examples/configs/")
    words = shlex.split(entry)
    assert words.count("&&") == 1
    assert words[words.index("--config") + 2 :] == v["grpo"]["overrides"]
    for arg in v["grpo"]["overrides"]:
        assert f" '{arg}'" in entry


def test_user_file_replaces_the_default_override_list(helm4):
    # A v0.5.0 file must not inherit v0.7.0-only keys from the chart's defaults (Helm merges
    # maps but replaces lists).
    cmd = parse_entrypoint(launch_spec(render(helm4, [values_for(release="v0.5.0")]))["entrypoint"])
    assert not any(a.startswith(("cluster.segment_size", "data.train.")) for a in cmd.overrides)


# --- the spec builder's own rules ---------------------------------------------------------


@pytest.mark.parametrize("tag", TAGS)
def test_tp_ge_4_uses_equal_micro_and_logprob_batches(tag):
    o = overrides(values_for(release=tag))
    assert o["policy.dtensor_cfg.tensor_parallel_size"] == 8
    assert o["policy.train_micro_batch_size"] == o["policy.logprob_batch_size"]
    assert o["policy.make_sequence_length_divisible_by"] == 8


def test_global_batch_is_reduced_to_divide_evenly():
    # 24 prompts x 16 generations = 384 samples per step: the recipe's 512 cannot be the batch.
    o = overrides(values_for(model="qwen2.5-1.5b", nodes=1, prompts_per_step=24))
    assert o["policy.train_global_batch_size"] == 384
    assert 384 % 8 == 0 and (384 // 8) % o["policy.train_micro_batch_size"] == 0


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        ({"nodes": 2, "generation_nodes": 2}, "leaves no node for training"),
        ({"nodes": 1, "generation_nodes": 1}, "gemma3-27b's training TP 8 and vLLM TP 4 do not both fit in 8 GPUs"),
        ({"model": "gpt-5"}, "unknown model"),
    ],
)
def test_impossible_runs_are_refused(opts, message):
    with pytest.raises(grpo.SpecError, match=message):
        values_for(**opts)


@pytest.mark.parametrize(
    ("opts", "prompts", "gbs", "notes"),
    [
        # 6 training nodes x 8 GPUs / TP 8 = 6 data-parallel ranks; 16 x 64 = 1024 is not a multiple of 6.
        (
            {"nodes": 8, "generation_nodes": 2},
            15,
            480,
            [
                "grpo.num_prompts_per_step 15 (preset 16): 16 x 64 = 1024 samples cannot be split into 6 data-parallel ranks "
                "of micro-batch 1; 15 is the nearest count that can",
                "policy.train_global_batch_size 480 (preset 512): 15 x 64 = 960 samples per step in 2 optimizer updates of 480 "
                "(preset: 1024 in 2 optimizer updates of 512), 80 samples per data-parallel rank (6 ranks; plain micro-batching: "
                "a whole number of micro-batches of 1 per rank)",
            ],
        ),
        (
            {"nodes": 3, "generation_nodes": 0, "prompts_per_step": 1, "generations_per_prompt": 7},
            3,
            21,
            [
                "grpo.num_prompts_per_step 3 (asked 1, preset 16): 1 x 7 = 7 samples cannot be split into 3 data-parallel "
                "ranks of micro-batch 1; 3 is the nearest count that can",
                "policy.train_global_batch_size 21 (preset 512): 3 x 7 = 21 samples per step in 1 optimizer update of 21 "
                "(preset: 1024 in 2 optimizer updates of 512), 7 samples per data-parallel rank (3 ranks; plain micro-batching: "
                "a whole number of micro-batches of 1 per rank)",
            ],
        ),
    ],
)
def test_an_indivisible_batch_takes_the_nearest_prompts_per_step_and_says_so(opts, prompts, gbs, notes):
    o = overrides(values_for(**opts))
    assert (o["grpo.num_prompts_per_step"], o["policy.train_global_batch_size"]) == (prompts, gbs)
    said = layout_notes(Options(gpu="h200", **opts))
    assert [n for n in said if not n.startswith("policy.logprob_batch_size")] == notes


def test_one_node_is_split_between_training_and_generation():
    # grpo.setup with policy_nodes == 1 (nemo_rl/algorithms/grpo.py, v0.5.0 to v0.7.0): generation
    # num_nodes null or 1, 0 < generation GPUs < the node's; training gets the rest of the node.
    o = overrides(values_for(model="qwen2.5-1.5b", nodes=1, generation_nodes=1))
    assert o["policy.generation.colocated.enabled"] is False
    assert o["policy.generation.colocated.resources.num_nodes"] is None
    assert o["policy.generation.colocated.resources.gpus_per_node"] == 4
    assert layout_notes(Options(gpu="h200", model="qwen2.5-1.5b", nodes=1, generation_nodes=1)) == [
        "one node split: 4 GPUs for vLLM generation, 4 for training (--generation-nodes 1 on 1 node)"
    ]


def test_the_note_is_in_the_files_header():
    text = render_text(Options(gpu="h200", nodes=8, generation_nodes=2), ["--gpu", "h200", "--nodes", "8", "--generation-nodes", "2"])
    head = text.split("\n\n")[0]
    assert "# Chosen by the generator: grpo.num_prompts_per_step 15 (preset 16): " in head
    assert "# Chosen by the generator: policy.train_global_batch_size 480 (preset 512): " in head


def test_generation_placement_defaults():
    # Colocated at every node count, as each preset's recipe; half the nodes for vLLM with --async.
    for model, nodes in (("gemma3-27b", 1), ("gemma3-27b", 16), ("qwen2.5-1.5b", 4)):
        o = overrides(values_for(model=model, nodes=nodes))
        assert o["policy.generation.colocated.enabled"] is True and "policy.generation.colocated.resources.num_nodes" not in o
    o = overrides(values_for(nodes=16, async_grpo=True))
    assert o["policy.generation.colocated.resources.num_nodes"] == 8


def test_gated_models():
    assert grpo.is_gated("google/gemma-3-27b-it") and grpo.is_gated("meta-llama/Llama-3.2-1B-Instruct")
    assert not grpo.is_gated("Qwen/Qwen2.5-1.5B")
    assert values_for()["secrets"]["existingSecret"] == "nemo-rl-tokens"
    assert values_for(model="qwen2.5-1.5b", nodes=1)["secrets"]["existingSecret"] == ""


def test_apply_override_creates_missing_parents_for_plus():
    cfg: dict = {"a": {"b": 1}}
    apply_override(cfg, Override("+", "x.y.z", 3))
    assert cfg["x"] == {"y": {"z": 3}}


def test_every_override_problem_is_reported_at_once():
    from generator.nemo_rl.recipe_config import check_overrides

    cfg = recipe_config("v0.7.0", "examples/configs/grpo_math_1B.yaml")
    args = [
        "grpo.val_perod=10",
        "checkpointing.enabled=yes",
        "policy.generation.vllm_cfg.gpu_memory_utilization=1.5",
        "grpo.max_num_steps= 300",
    ]
    out, problems = check_overrides(cfg, list(enumerate(args)))
    assert [(i, key) for i, key, _ in problems] == [
        (0, "grpo.val_perod"),
        (1, "checkpointing.enabled"),
        (2, "policy.generation.vllm_cfg.gpu_memory_utilization"),
    ]
    assert problems[0][2].fix == "did you mean grpo.val_period?"
    assert out["grpo"]["max_num_steps"] == 300  # Hydra trims the space after '='
