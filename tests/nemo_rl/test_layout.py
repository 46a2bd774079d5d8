"""The generator's layout (prompts, global batch, split, async GRPO) against each release's own
recipes and the batch asserts its source makes: for every model preset, node count, generation
split and supported release, the written batch passes NeMo RL's sharding asserts, and every value
that differs from the preset's is named in a note with the preset's value beside it.

NeMo RL v0.5.0-v0.7.0, read at each tag: `BatchedDataDict.shard_by_batch_size` asserts samples %
train_global_batch_size == 0 and train_global_batch_size % data-parallel size == 0
(nemo_rl/distributed/batched_data_dict.py); `DTensorPolicyWorker.train`
(nemo_rl/models/policy/workers/dtensor_policy_worker.py) calls `make_microbatch_iterator(mbs)`,
which asserts a rank's share is a multiple of the micro-batch, only when neither
policy.dynamic_batching nor policy.sequence_packing is enabled."""

from __future__ import annotations

from dataclasses import replace

import pytest

from generator.cli import main
from generator.gke.profiles import profile
from generator.gke.provisioning import machine_default
from generator.nemo_rl import run_spec as grpo
from generator.nemo_rl.recipe_config import Override, apply_overrides, load_recipe, lookup
from generator.nemo_rl.releases import RELEASES, release
from generator.values.build import Options, build, layout_notes, run_choices
from generator.values.worker_groups import MAX_NODES
from generator.vendored import recipe_path

TAGS = sorted(RELEASES)


def recipe(tag: str, path: str) -> dict:
    return load_recipe(recipe_path(tag, path))


def overrides(spec: dict) -> dict:
    return {(ov := Override.parse(a)).key: ov.value for a in spec["overrides"]}


def batching_of(config: dict) -> str:
    """How the merged recipe micro-batches (the worker's branch order: dynamic first, then packing)."""
    if lookup(config, "policy.dynamic_batching.enabled", False):
        return grpo.DYNAMIC_BATCHING
    if lookup(config, "policy.sequence_packing.enabled", False):
        return grpo.SEQUENCE_PACKING
    return grpo.PLAIN


@pytest.mark.parametrize("tag", TAGS)
@pytest.mark.parametrize("model", sorted(grpo.MODELS))
def test_presets_hold_their_recipes_figures_at_every_release(tag, model):
    preset = grpo.MODELS[model]
    for gpn in (8, *(g for g, *_ in preset.by_gpus_per_node)):
        p = preset.for_node(gpn)
        cfg = recipe(tag, p.recipe)
        assert batching_of(cfg) == p.batching, (gpn, p.recipe)
        assert cfg["policy"]["dtensor_cfg"]["tensor_parallel_size"] == p.train_tp
        assert cfg["policy"]["train_micro_batch_size"] == p.train_micro_batch_size
        # The Gemma 3 27B recipes: vLLM TP 4 on 8-GPU nodes, 2 on 4-GPU nodes; 1 for the 1-2B models.
        assert cfg["policy"]["generation"]["vllm_cfg"]["tensor_parallel_size"] == p.vllm_tp
        logprob = cfg["policy"]["logprob_batch_size"]
        if isinstance(logprob, int) and logprob != p.train_micro_batch_size:
            assert dict(p.recipe_logprob_batch_sizes)[tag] == logprob


def _cases():
    for nodes in range(1, MAX_NODES + 1):
        for gen in (None, *sorted({0, 1, nodes // 2})):
            yield nodes, gen


@pytest.mark.parametrize("tag", TAGS)
@pytest.mark.parametrize("model", sorted(grpo.MODELS))
def test_every_layout_passes_the_batch_asserts_and_names_each_change(tag, model):
    preset = grpo.MODELS[model]
    plain = batching_of(recipe(tag, preset.recipe)) == grpo.PLAIN
    checked = 0
    for nodes, gen in _cases():
        opts = Options(gpu="h200", nodes=nodes, model=model, release=tag, generation_nodes=gen)
        try:
            o = overrides(grpo.build_spec(run_choices(opts), release(tag)))
        except grpo.SpecError as refusal:
            assert "\n" not in str(refusal) and "--" in str(refusal), refusal
            continue
        gpus = o["cluster.num_nodes"] * o["cluster.gpus_per_node"]
        if not o["policy.generation.colocated.enabled"]:
            res_nodes = o["policy.generation.colocated.resources.num_nodes"]
            gpus -= (res_nodes or 1) * o["policy.generation.colocated.resources.gpus_per_node"]
        dp = gpus // o["policy.dtensor_cfg.tensor_parallel_size"]
        prompts, gens, gbs = o["grpo.num_prompts_per_step"], o["grpo.num_generations_per_prompt"], o["policy.train_global_batch_size"]
        samples = prompts * gens
        assert samples % gbs == 0 and gbs % dp == 0, (nodes, gen, prompts, gbs, dp)
        if plain:
            assert (gbs // dp) % o["policy.train_micro_batch_size"] == 0, (nodes, gen, gbs, dp)
        notes = layout_notes(opts)
        if prompts != preset.prompts_per_step:
            assert any(n.startswith(f"grpo.num_prompts_per_step {prompts} (preset {preset.prompts_per_step}): ") for n in notes), notes
        if gbs != preset.train_global_batch_size:
            assert any(n.startswith(f"policy.train_global_batch_size {gbs} (preset {preset.train_global_batch_size}): ") for n in notes)
        assert len(notes) == len(set(notes))
        checked += 1
    assert checked > MAX_NODES


def test_the_micro_batch_rule_binds_only_plain_micro_batching():
    # Llama 3.2 1B's recipe batches dynamically: 8 nodes, 2 for generation, 48 ranks. 32 x 16 = 512
    # samples do not split into 48; 33 prompts (528 = 48 x 11) do, in one update. With the micro-batch
    # rule (4 per rank) it took 36 prompts and 576 samples in three updates of 192.
    opts = Options(gpu="h200", nodes=8, generation_nodes=2, model="llama3.2-1b", prompts_per_step=32)
    o = overrides(build(opts)["grpo"])
    assert (o["grpo.num_prompts_per_step"], o["policy.train_global_batch_size"]) == (33, 528)
    assert layout_notes(opts) == [
        "grpo.num_prompts_per_step 33 (asked 32, preset 32): 32 x 16 = 512 samples cannot be split into 48 data-parallel ranks; "
        "33 is the nearest count that can",
        "policy.train_global_batch_size 528 (preset 512): 33 x 16 = 528 samples per step in 1 optimizer update of 528 "
        "(preset: 512 in 1 optimizer update of 512), 11 samples per data-parallel rank (48 ranks; dynamic batching: NeMo RL "
        "asserts no micro-batch multiple per rank)",
    ]
    # Gemma's recipe micro-batches plainly: the rule holds there (micro-batch 1 divides anything, so
    # check it through a preset of micro-batch 4).
    four = replace(grpo.MODELS["qwen2.5-1.5b"], batching=grpo.PLAIN)
    with pytest.raises(grpo.SpecError, match="cannot be split into 48 data-parallel ranks of micro-batch 4"):
        grpo._batch(528, 48, four)
    assert grpo._batch(576, 48, four) == 576 and (576 // 48) % 4 == 0
    assert grpo._batch(528, 48, grpo.MODELS["qwen2.5-1.5b"]) == 528


def test_prompts_scale_with_the_data_parallel_size_for_small_models():
    # 8 colocated nodes, 64 ranks: 8 x the recipe's one node; 20 steps of 256 prompts fit in one epoch.
    opts = Options(gpu="h200", nodes=8, model="qwen2.5-1.5b")
    o = overrides(build(opts)["grpo"])
    assert (o["grpo.num_prompts_per_step"], o["policy.train_global_batch_size"]) == (256, 4096)
    assert layout_notes(opts)[0] == "grpo.num_prompts_per_step 256 (preset 32): 64 data-parallel ranks, 8 x one node's 8"
    # 200 steps: one epoch holds 7473 // 200 = 37 prompts a step, so the scaling is capped (1 x: kept).
    opts = Options(gpu="h200", nodes=8, model="qwen2.5-1.5b", max_steps=100)
    o = overrides(build(opts)["grpo"])
    assert o["grpo.num_prompts_per_step"] == 64  # 7473 // (100 x 32) = 2
    assert "capped at 2 x so that 100 steps fit in one pass over GSM8K's train rows" in layout_notes(opts)[0]
    opts = Options(gpu="h200", nodes=8, model="llama3.2-1b", max_steps=300)
    assert overrides(build(opts)["grpo"])["grpo.num_prompts_per_step"] == 32
    assert layout_notes(opts)[0].startswith("grpo.num_prompts_per_step 32 kept (not 256 for 64 data-parallel ranks")
    # Asked prompts are kept; the big model keeps its recipe's.
    assert (
        overrides(build(Options(gpu="h200", nodes=8, model="qwen2.5-1.5b", prompts_per_step=32))["grpo"])["grpo.num_prompts_per_step"] == 32
    )
    assert overrides(build(Options(gpu="h200", nodes=16))["grpo"])["grpo.num_prompts_per_step"] == 16


def test_every_note_goes_to_the_header_and_stderr(capsys, tmp_path):
    opts = Options(gpu="h200", nodes=8, generation_nodes=2)
    out = tmp_path / "v.yaml"
    assert main(["--gpu", "h200", "--nodes", "8", "--generation-nodes", "2", "-o", str(out)]) == 0
    text = out.read_text()
    notes = layout_notes(opts)
    assert len(notes) == 3  # prompts, global batch, logprob batch
    err = capsys.readouterr().err
    for note in notes:
        assert f"# Chosen by the generator: {note}\n" in text.split("\n\n")[0]
        assert f"note: {note}\n" in err


@pytest.mark.parametrize("tag", TAGS)
def test_async_turns_on_async_grpo_with_what_nemo_rl_asserts(tag):
    opts = Options(gpu="h200", release=tag, async_grpo=True)  # half the 2 nodes for vLLM, as the seed
    spec = build(opts)["grpo"]
    cfg = apply_overrides(recipe(tag, spec["recipe"]), spec["overrides"])
    g, gen = cfg["grpo"], cfg["policy"]["generation"]
    # examples/run_grpo*.py: async_grpo_train when enabled; it refuses dynamic sampling, reward scaling/shaping.
    assert g["async_grpo"]["enabled"] is True and not g["use_dynamic_sampling"]
    assert not g.get("reward_scaling", {}).get("enabled") and not g.get("reward_shaping", {}).get("enabled")
    # grpo.py async_grpo_train: an async vLLM engine, importance-sampling correction, non-colocated.
    assert gen["backend"] == "vllm" and gen["vllm_cfg"]["async_engine"] is True
    assert cfg["loss_fn"]["use_importance_sampling_correction"] is True
    assert gen["colocated"]["enabled"] is False
    assert g["async_grpo"]["max_trajectory_age_steps"] == 1
    assert "async_grpo" not in str(build(Options(gpu="h200", release=tag))["grpo"]["overrides"])


@pytest.mark.parametrize("tag", TAGS)
@pytest.mark.parametrize("model", sorted(grpo.MODELS))
@pytest.mark.parametrize("gpu", ["h200", "gb200"])
def test_the_default_layout_is_the_recipes_own_and_generation_nodes_gives_the_seeds_split(tag, model, gpu):
    """Without --generation-nodes the run places vLLM as the release's recipe for the model does
    (colocated, its memory share and TP); --generation-nodes 1 on 2 nodes is the seed's split."""
    reserved = {"reservation": "a4x-r1"} if machine_default(profile(gpu)) == "reservation" else {}  # A4X: reservation only
    spec = build(Options(gpu=gpu, model=model, release=tag, **reserved))["grpo"]
    own = recipe(tag, spec["recipe"])["policy"]["generation"]
    written = apply_overrides(recipe(tag, spec["recipe"]), spec["overrides"])["policy"]["generation"]
    assert written["colocated"]["enabled"] is own["colocated"]["enabled"] is True
    assert written["vllm_cfg"]["gpu_memory_utilization"] == own["vllm_cfg"]["gpu_memory_utilization"] == 0.6
    assert written["vllm_cfg"]["tensor_parallel_size"] == own["vllm_cfg"]["tensor_parallel_size"]
    assert not [n for n in layout_notes(Options(gpu=gpu, model=model, release=tag, **reserved)) if "colocated" in n]
    seed = build(Options(gpu=gpu, model=model, release=tag, nodes=2, generation_nodes=1, **reserved))["grpo"]
    gen = apply_overrides(recipe(tag, seed["recipe"]), seed["overrides"])["policy"]["generation"]
    assert gen["colocated"]["enabled"] is False and gen["colocated"]["resources"]["num_nodes"] == 1
    assert gen["vllm_cfg"]["gpu_memory_utilization"] == grpo.VLLM_MEMORY_DEDICATED


@pytest.mark.parametrize(
    ("nodes", "model", "gen_nodes", "gen_gpus"),
    [(2, "gemma3-27b", 1, 8), (8, "gemma3-27b", 4, 8), (1, "qwen2.5-1.5b", None, 4)],
)
def test_async_without_generation_nodes_takes_half_and_says_so(nodes, model, gen_nodes, gen_gpus):
    opts = Options(gpu="h200", nodes=nodes, model=model, async_grpo=True)
    o = overrides(build(opts)["grpo"])
    assert o["policy.generation.colocated.enabled"] is False and o["grpo.async_grpo.enabled"] is True
    assert o["policy.generation.colocated.resources.num_nodes"] == gen_nodes
    assert o["policy.generation.colocated.resources.gpus_per_node"] == gen_gpus
    notes = layout_notes(opts)
    if nodes == 1:
        assert "one node split: 4 GPUs for vLLM generation, 4 for training (--async on 1 node)" in notes
    else:
        assert (
            "policy.generation.colocated.enabled false (recipe true): --async needs dedicated generation (NeMo RL's "
            f"async_grpo_train asserts it), so {gen_nodes} of {nodes} nodes run vLLM, the seed tutorial's half; "
            "set --generation-nodes to choose"
        ) in notes
    # An explicit split is the user's: no note about it.
    assert not [n for n in layout_notes(replace(opts, generation_nodes=1)) if "colocated" in n]


def test_async_on_one_node_that_cannot_be_split_is_one_line_naming_async(capsys):
    assert main(["--gpu", "h200", "--nodes", "1", "--async", "-o", "/dev/null", "--force"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "error: --async on one node: gemma3-27b's training TP 8 and vLLM TP 4 do not both fit in 8 GPUs - use --nodes 2, or drop --async\n"
    )


def test_async_is_refused_where_nemo_rl_refuses_it(capsys):
    with pytest.raises(grpo.SpecError, match="--async needs dedicated generation GPUs"):
        build(Options(gpu="h200", generation_nodes=0, async_grpo=True))
    without = replace(release("v0.7.0"), tag="v9.9.9", has_async_grpo=False)
    with pytest.raises(grpo.SpecError, match=r"^--async: NeMo RL v9\.9\.9 has no asynchronous GRPO"):
        grpo.build_spec(run_choices(Options(gpu="h200", async_grpo=True)), without)
    assert main(["--gpu", "h200", "--async", "--generation-nodes", "0", "-o", "/dev/null", "--force"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --async needs dedicated generation GPUs") and "Traceback" not in err


def test_validate_holds_the_micro_batch_rule_only_for_plain_micro_batching():
    from generator.validate.values import validate_values

    # 48 ranks, 528 samples: 11 a rank, not a multiple of the recipe's micro-batch 4 (dynamic batching).
    values = build(Options(gpu="h200", nodes=8, generation_nodes=2, model="llama3.2-1b", prompts_per_step=32))
    assert not [f for f in validate_values(values, objects=False) if f.level == "error"]
    values["grpo"]["extraOverrides"] = ["policy.dynamic_batching.enabled=false"]
    errors = [f for f in validate_values(values, objects=False) if f.level == "error"]
    assert [(f.key, f.message) for f in errors] == [
        ("grpo.overrides[policy.train_micro_batch_size]", "the per-rank batch 11 is not divisible by the micro-batch 4")
    ]
