"""Every run the generator writes reaches grpo.max_num_steps on GSM8K's train split, or the
generator says why not: for every model preset, node count and supported release its own option
tables offer, the overrides are applied to the release's real recipe (merged over its `defaults:`
chain) and NeMo RL's synchronous loop is replayed on the result (grpo.py v0.5.0-v0.7.0: a
StatefulDataLoader of num_prompts_per_step with drop_last=True; `while current_epoch <
max_num_epochs and total_steps < max_num_steps`)."""

from __future__ import annotations

import pytest

from generator.nemo_rl import run_spec as grpo
from generator.nemo_rl.recipe_config import apply_overrides, load_recipe
from generator.nemo_rl.releases import RELEASES, release
from generator.validate.values import validate_values
from generator.values.build import Options, build, layout_notes, run_choices
from generator.values.worker_groups import MAX_NODES
from generator.vendored import recipe_path

GSM8K_TRAIN_ROWS = 7473  # openai/gsm8k "main" train split, as published on its dataset card
STEPS = (None, 500, 5000)  # the preset's own, and runs longer than one epoch at any prompts per step


def replay(config: dict, rows: int = GSM8K_TRAIN_ROWS) -> int:
    """The step grpo_train ends at: whole batches of num_prompts_per_step per epoch."""
    g = config["grpo"]
    assert not g["use_dynamic_sampling"] and not g.get("async_grpo", {}).get("enabled")
    batch = g["num_prompts_per_step"]
    batches = len(range(0, rows - batch + 1, batch))  # drop_last=True
    total, epoch = 0, 0
    while epoch < g["max_num_epochs"] and total < g["max_num_steps"]:
        total += min(batches, g["max_num_steps"] - total)
        epoch += 1
    return total


@pytest.mark.parametrize("tag", sorted(RELEASES))
@pytest.mark.parametrize("model", sorted(grpo.MODELS))
def test_every_offered_run_reaches_its_last_step(tag, model):
    rel = release(tag)
    # The keys the loop reads are grpo.*: the rest is applied by the tests of the command.
    recipe = {"grpo": load_recipe(recipe_path(tag, grpo.MODELS[model].recipe))["grpo"]}
    checked, applied = 0, {}
    for nodes in range(1, MAX_NODES + 1):
        for steps in STEPS:
            opts = Options(gpu="h200", nodes=nodes, model=model, release=tag, max_steps=steps)
            try:
                spec = grpo.build_spec(run_choices(opts), rel)
            except grpo.SpecError as refusal:
                assert "\n" not in str(refusal) and "--" in str(refusal), refusal  # says which option to change
                continue
            args = tuple(a for a in spec["overrides"] if a.startswith("grpo."))
            config = applied.get(args) or applied.setdefault(args, apply_overrides(recipe, list(args)))
            asked = config["grpo"]["max_num_steps"]
            assert asked == (steps or grpo.MODELS[model].max_steps)
            assert replay(config) == asked, (nodes, steps, config["grpo"])
            if config["grpo"]["max_num_epochs"] > 1:
                assert any(n.startswith(f"grpo.max_num_epochs {config['grpo']['max_num_epochs']} (preset 1)") for n in layout_notes(opts))
            checked += 1
    assert checked > MAX_NODES  # most of the table builds


@pytest.mark.parametrize(("prompts", "steps_per_epoch"), [(32, 233), (16, 467), (15, 498), (64, 116)])
def test_steps_per_epoch_at_the_presets_prompts(prompts, steps_per_epoch):
    config = {"grpo": {"use_dynamic_sampling": False, "num_prompts_per_step": prompts, "max_num_epochs": 1, "max_num_steps": 10**6}}
    assert replay(config) == steps_per_epoch


def test_the_issue_command_raises_the_epochs_and_says_so(capsys):
    opts = Options(gpu="h200", model="qwen2.5-1.5b", max_steps=500)
    values = build(opts)
    assert "grpo.max_num_epochs=3" in values["grpo"]["overrides"]
    assert layout_notes(opts) == [
        # 2 nodes: 16 ranks would take 64 prompts, 116 steps an epoch; 500 steps fit in no epoch of those.
        "grpo.num_prompts_per_step 32 kept (not 64 for 16 data-parallel ranks, 2 x one node's 8): 500 steps of more prompts "
        "would not fit in one pass over GSM8K's 7473 train rows; set --prompts-per-step to choose",
        "grpo.max_num_epochs 3 (preset 1): 500 steps (grpo.max_num_steps, kept) at 32 prompts per step need 3 passes "
        "over GSM8K's 7473 train rows (233 steps per epoch, the last partial batch dropped)",
    ]
    assert not [f for f in validate_values(values, objects=False) if f.level == "error"]


def test_more_prompts_than_rows_is_refused_naming_the_option():
    with pytest.raises(grpo.SpecError, match=r"--prompts-per-step 7473 or fewer"):
        grpo.build_spec(run_choices(Options(gpu="h200", model="qwen2.5-1.5b", prompts_per_step=8000)), release("v0.7.0"))


@pytest.mark.parametrize("tag", sorted(RELEASES))
@pytest.mark.parametrize(
    ("edit", "key", "fix"),
    [
        ({"grpo.max_num_epochs": "1"}, "grpo.overrides[grpo.max_num_steps]", "grpo.max_num_epochs=3, or grpo.max_num_steps=233"),
        ({"grpo.max_num_epochs": "2"}, "grpo.overrides[grpo.max_num_steps]", "grpo.max_num_epochs=3, or grpo.max_num_steps=466"),
        ({"grpo.num_prompts_per_step": "8000"}, "grpo.overrides[grpo.num_prompts_per_step]", "7473 or fewer"),
    ],
)
def test_validate_reports_steps_beyond_the_epochs_data(tag, edit, key, fix):
    values = build(Options(gpu="h200", model="qwen2.5-1.5b", max_steps=500, release=tag, nodes=1))
    args = values["grpo"]["overrides"]
    values["grpo"]["overrides"] = [f"{a.split('=')[0]}={edit[a.split('=')[0]]}" if a.split("=")[0] in edit else a for a in args]
    found = [f for f in validate_values(values, objects=False) if f.key == key and "grpo.py" in f.message]
    assert len(found) == 1 and fix in found[0].fix and found[0].level == "error", found


def test_validate_leaves_a_run_that_reaches_its_steps_alone():
    values = build(Options(gpu="h200", model="qwen2.5-1.5b", max_steps=466, nodes=1))
    assert "grpo.max_num_epochs=2" in values["grpo"]["overrides"]
    assert not [f for f in validate_values(values, objects=False) if "grpo.py (setup" in f.message]


def test_every_profile_and_release_gets_the_epochs_override():
    for tag in RELEASES:
        spec = grpo.build_spec(run_choices(Options(gpu="h200", release=tag)), release(tag))
        assert "grpo.max_num_epochs=1" in spec["overrides"]
