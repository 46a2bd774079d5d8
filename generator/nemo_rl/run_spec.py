"""The GRPO run spec: which NeMo RL recipe, and the overrides that shape it for the cluster.

The values file carries the run in NeMo RL's own command-line vocabulary: `grpo.overrides` is a
list of `key=value` (keys that exist in the recipe's merged config) and `+key=value` (new keys).
A list, not a map: Helm merges maps with the chart's defaults, so a user's file could never drop
a default key; lists are replaced whole. This module decides the list from a few choices (model,
nodes, generation placement, release); the chart only quotes it into the command, and
`validate` checks it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from generator.nemo_rl import epochs as data_epochs
from generator.nemo_rl.placement import (
    COLOCATED,
    GENERATION_GPUS_PER_NODE,
    GENERATION_NODES,
    GPUS_PER_NODE,
    NUM_NODES,
    Placement,
    dedicated,
    placement,
)
from generator.nemo_rl.releases import CODE_DIR, NemoRlRelease

RUNS_DIR = "nemo-rl"  # under the shared mount: <mount>/nemo-rl/<run>/{checkpoints,logs}
# The NeMo RL keys of a run's outputs and their folders in the run's folder.
RUN_OUTPUTS = {"checkpointing.checkpoint_dir": "checkpoints", "logger.log_dir": "logs"}
GSM8K_DIR = "nemo-rl/datasets/gsm8k"


# How a rank's share of a global batch is cut into micro-batches, per NeMo RL v0.5.0-v0.7.0
# (nemo_rl/models/policy/workers/dtensor_policy_worker.py, `train`): dynamic batching and sequence
# packing build their own micro-batches from token budgets; only the plain branch calls
# `BatchedDataDict.make_microbatch_iterator(mbs)`, which asserts "Data dict size ... is not a
# multiple of the provided microbatch size" (nemo_rl/distributed/batched_data_dict.py at each tag).
# Every branch shards with `shard_by_batch_size(dp, batch_size=gbs)`, which asserts samples % gbs == 0
# and gbs % dp == 0.
PLAIN = "plain"
SEQUENCE_PACKING = "sequence packing"
DYNAMIC_BATCHING = "dynamic batching"
BATCHINGS = (PLAIN, SEQUENCE_PACKING, DYNAMIC_BATCHING)


@dataclass(frozen=True)
class ModelPreset:
    """Figures of a NeMo RL recipe the generator builds on (read from the release configs)."""

    key: str
    model: str
    recipe: str  # relative to the NeMo RL code dir (/opt/nemo-rl)
    gated: bool  # needs HF_TOKEN
    train_tp: int
    vllm_tp: int
    train_global_batch_size: int
    train_micro_batch_size: int
    prompts_per_step: int
    generations_per_prompt: int
    max_steps: int
    # How the recipe splits a rank's batch into micro-batches (policy.sequence_packing.enabled,
    # policy.dynamic_batching.enabled of its merged config, the same at v0.5.0-v0.7.0): PLAIN,
    # SEQUENCE_PACKING or DYNAMIC_BATCHING. Only PLAIN asserts whole micro-batches per rank.
    batching: str = PLAIN
    # Small models: on more training GPUs than the recipe's one node, prompts per step grow with the
    # data-parallel size (scaled_prompts).
    scales_with_dp: bool = False
    # policy.logprob_batch_size of the recipe, per release, where it differs from the micro-batch
    # (the generator writes them equal: _shape_overrides).
    recipe_logprob_batch_sizes: tuple[tuple[str, int], ...] = ()
    save_period: int = 10  # the recipe's checkpointing.save_period (every release's grpo_math_1B.yaml)
    # Machines with fewer GPUs per node (A4X: 4): GPUs per node -> (recipe, training TP, vLLM TP),
    # NeMo RL's own recipe for that node size. A size not listed keeps the fields above, whose TPs
    # must then divide it.
    by_gpus_per_node: tuple[tuple[int, str, int, int], ...] = ()

    def for_node(self, gpus_per_node: int) -> ModelPreset:
        """This preset on nodes of `gpus_per_node` GPUs: the recipe and TPs NeMo RL made for them."""
        for gpn, recipe, train_tp, vllm_tp in self.by_gpus_per_node:
            if gpn == gpus_per_node:
                return replace(self, recipe=recipe, train_tp=train_tp, vllm_tp=vllm_tp)
        return self

    @property
    def recipes(self) -> tuple[str, ...]:
        return (self.recipe, *(r for _, r, _, _ in self.by_gpus_per_node))


MODELS: dict[str, ModelPreset] = {
    # The tutorial's run: Gemma 3 27B, training TP 8, 16 prompts x 64 generations, 300 steps. vLLM
    # TP 4 and colocated generation as NeMo RL's own recipe (grpo-gemma3-27b-it-8n8g-fsdp2tp8-actckpt-long.yaml,
    # v0.5.0-v0.7.0: policy.generation.vllm_cfg.tensor_parallel_size 4; colocated.enabled true from
    # grpo_math_1B.yaml): two engines per node. The seed tutorial's split (1 vLLM node, 1 training
    # node) is --generation-nodes 1.
    "gemma3-27b": ModelPreset(
        key="gemma3-27b",
        model="google/gemma-3-27b-it",
        recipe="examples/configs/recipes/llm/grpo-gemma3-27b-it-8n8g-fsdp2tp8-actckpt-long.yaml",
        gated=True,
        train_tp=8,
        vllm_tp=4,
        train_global_batch_size=512,
        train_micro_batch_size=1,
        prompts_per_step=16,
        generations_per_prompt=64,
        max_steps=300,
        recipe_logprob_batch_sizes=(("v0.5.0", 2), ("v0.6.0", 4), ("v0.7.0", 4)),
        batching=PLAIN,  # the recipe sets sequence_packing.enabled false; dynamic_batching false (base)
        # NeMo RL's recipe for 4-GPU nodes (v0.5.0-v0.7.0): training TP 4, vLLM TP 2.
        by_gpus_per_node=((4, "examples/configs/recipes/llm/grpo-gemma3-27b-it-8n4g-fsdp2tp4-actckpt-long.yaml", 4, 2),),
    ),
    "llama3.2-1b": ModelPreset(
        key="llama3.2-1b",
        model="meta-llama/Llama-3.2-1B-Instruct",
        recipe="examples/configs/recipes/llm/grpo-llama3.2-1b-instruct-1n8g-fsdp2tp1.v3.yaml",
        gated=True,
        train_tp=1,
        vllm_tp=1,
        train_global_batch_size=512,
        train_micro_batch_size=4,
        prompts_per_step=32,
        generations_per_prompt=16,
        max_steps=20,
        batching=DYNAMIC_BATCHING,  # the 1n8g recipe (the 1n4g one inherits it): dynamic_batching.enabled true
        scales_with_dp=True,
        by_gpus_per_node=((4, "examples/configs/recipes/llm/grpo-llama3.2-1b-instruct-1n4g-fsdp2tp1.v3.yaml", 1, 1),),
    ),
    # Ungated: the quick start needs no Hugging Face token.
    "qwen2.5-1.5b": ModelPreset(
        key="qwen2.5-1.5b",
        model="Qwen/Qwen2.5-1.5B",
        recipe="examples/configs/grpo_math_1B.yaml",
        gated=False,
        train_tp=1,
        vllm_tp=1,
        train_global_batch_size=512,
        train_micro_batch_size=4,
        prompts_per_step=32,
        generations_per_prompt=16,
        max_steps=20,
        batching=SEQUENCE_PACKING,  # grpo_math_1B.yaml: sequence_packing.enabled True
        scales_with_dp=True,
    ),
}
DEFAULT_MODEL = "gemma3-27b"

# Where vLLM runs when the user does not say: colocated with training, as every preset's recipe at
# v0.5.0-v0.7.0 (policy.generation.colocated.enabled true, from examples/configs/grpo_math_1B.yaml,
# which the Gemma 3 27B and Llama 3.2 1B recipes inherit), with the recipes' vLLM memory share
# (policy.generation.vllm_cfg.gpu_memory_utilization 0.6, the same file). Dedicated generation GPUs
# (--generation-nodes N) get most of their memory for vLLM (the seed tutorial's 0.9).
VLLM_MEMORY_DEDICATED = 0.9
VLLM_MEMORY_COLOCATED = 0.6
# --async without --generation-nodes: NeMo RL's async GRPO needs dedicated generation, so the
# generator takes the seed tutorial's split, half the nodes for vLLM (1 of 2; on one node, half its
# GPUs where both TP sizes fit, _split_one_node).
ASYNC_GENERATION_SHARE = 0.5

# Model families whose Hugging Face repositories are gated (need an accepted licence + token).
GATED_PREFIXES = ("google/gemma", "meta-llama/", "mistralai/")


def is_gated(model: str) -> bool:
    return model.startswith(GATED_PREFIXES)


SAVE_BY = re.compile(r"^\d{2}:([01]\d|2[0-3]):[0-5]\d:[0-5]\d$")
# Flex-start VMs run at most 7 days: save and stop well before the node is taken back.
FLEX_START_SAVE_BY = "06:22:00:00"


class SpecError(ValueError):
    """A combination of choices that NeMo RL would reject at start-up."""


@dataclass(frozen=True)
class RunChoices:
    model: str = DEFAULT_MODEL
    nodes: int = 2
    gpus_per_node: int = 8
    generation_nodes: int | None = None  # None: colocated as the recipe (a split with --async); 0: colocated
    max_steps: int | None = None
    prompts_per_step: int | None = None
    generations_per_prompt: int | None = None
    run_name: str | None = None
    wandb: bool = False
    mount_path: str = "/data"
    save_by: str | None = None  # checkpointing.checkpoint_must_save_by, DD:HH:MM:SS after training starts
    release: str = "v0.7.0"  # the NeMo RL release (releases.DEFAULT_RELEASE): the recipe values the notes compare with
    async_grpo: bool = False  # grpo.async_grpo.enabled with its companion settings (async_overrides)
    extra: dict[str, Any] = field(default_factory=dict)


def generation_nodes(choices: RunChoices) -> int:
    """Nodes for vLLM: as asked; else 0 (colocated, as the recipes); with --async, which needs
    dedicated generation, half the nodes (at least 1; on one node, 1 splits the node)."""
    if choices.generation_nodes is not None:
        return choices.generation_nodes
    if choices.async_grpo:
        return max(1, int(choices.nodes * ASYNC_GENERATION_SHARE))
    return 0


def _asked_split(choices: RunChoices, gen_nodes: int) -> str:
    """The option that chose the split, for its messages."""
    return f"--generation-nodes {gen_nodes}" if choices.generation_nodes is not None else "--async"


def per_rank_multiple(preset: ModelPreset) -> int:
    """What a rank's share of a global batch must be a multiple of: the micro-batch with plain
    micro-batching, 1 with sequence packing or dynamic batching (PLAIN above)."""
    return preset.train_micro_batch_size if preset.batching == PLAIN else 1


def _batch(samples: int, dp: int, preset: ModelPreset) -> int:
    """The largest global batch that divides the samples per step and splits evenly into the ranks
    (PLAIN above), up to the recipe's batch, or more when the samples allow as few optimizer updates
    per step as the preset makes (its samples / its batch), or one per-rank multiple per rank."""
    multiple = per_rank_multiple(preset)
    preset_updates = max(1, preset.prompts_per_step * preset.generations_per_prompt // preset.train_global_batch_size)
    cap = max(preset.train_global_batch_size, samples // preset_updates, dp * multiple)
    unit = dp * multiple  # gbs % dp == 0 and (gbs // dp) % multiple == 0: a multiple of this
    if samples % unit == 0:
        for k in range(min(samples, cap) // unit, 0, -1):
            if samples % (k * unit) == 0:
                return k * unit
    raise SpecError(
        f"{samples} samples per step cannot be split into {dp} data-parallel ranks{_of_micro(preset)}; "
        "change --prompts-per-step or the node split"
    )


def _of_micro(preset: ModelPreset) -> str:
    return f" of micro-batch {preset.train_micro_batch_size}" if preset.batching == PLAIN else ""


def run_name(choices: RunChoices, preset: ModelPreset) -> str:
    return choices.run_name or f"{preset.key}-gsm8k"


def _preset(choices: RunChoices) -> ModelPreset:
    try:
        return MODELS[choices.model].for_node(choices.gpus_per_node)
    except KeyError:
        raise SpecError(f"unknown model {choices.model!r}: choose one of {', '.join(MODELS)}") from None


def _split_one_node(gpn: int, preset: ModelPreset) -> int | None:
    """GPUs for generation when one node is split between vLLM and training: as close to half as
    both tensor-parallel sizes allow, training keeping at least as many; None when none fits."""
    fits = [g for g in range(1, gpn) if g % preset.vllm_tp == 0 and (gpn - g) % preset.train_tp == 0]
    return min(fits, key=lambda g: (abs(gpn - 2 * g), -(gpn - g)), default=None)


@dataclass(frozen=True)
class _Split:
    placed: Placement
    generation_gpus: int | None = None  # one node split: GPUs for generation; None otherwise
    notes: tuple[str, ...] = ()


def _placement(choices: RunChoices, preset: ModelPreset, gen_nodes: int) -> _Split:
    """The GPU split (placement.py), or why the generator's options give none. One node with one
    generation node is split within the node, which grpo.setup supports when policy_nodes == 1
    (nemo_rl/algorithms/grpo.py setup, v0.5.0 to v0.7.0: generation num_nodes null or 1)."""
    if gen_nodes < 0:
        raise SpecError("--generation-nodes must be >= 0")
    gpn = choices.gpus_per_node
    asked = _asked_split(choices, gen_nodes)
    if choices.nodes == 1 and gen_nodes == 1:
        gen_gpus = _split_one_node(gpn, preset)
        if gen_gpus is None:
            fix = "drop --async" if asked == "--async" else "--generation-nodes 0 (colocated)"
            raise SpecError(
                f"{asked} on one node: {preset.key}'s training TP {preset.train_tp} and vLLM TP {preset.vllm_tp} "
                f"do not both fit in {gpn} GPUs - use --nodes 2, or {fix}"
            )
        placed = placement(1, gpn, colocated=False, generation_nodes=None, generation_gpus_per_node=gen_gpus)
        note = f"one node split: {gen_gpus} GPUs for vLLM generation, {gpn - gen_gpus} for training ({asked} on 1 node)"
        return _Split(placed, gen_gpus, (note,))
    placed = dedicated(choices.nodes, gpn, gen_nodes)
    if placed.issues:
        raise SpecError(f"--generation-nodes {gen_nodes} leaves no node for training out of {choices.nodes}")
    if gen_nodes and asked == "--async":
        note = (
            f"policy.generation.colocated.enabled false (recipe true): --async needs dedicated generation (NeMo RL's "
            f"async_grpo_train asserts it), so {gen_nodes} of {choices.nodes} nodes run vLLM, the seed tutorial's half; "
            "set --generation-nodes to choose"
        )
        return _Split(placed, notes=(note,))
    return _Split(placed)


@dataclass(frozen=True)
class _Batches:
    prompts: int
    generations: int
    global_batch: int
    notes: tuple[str, ...] = ()


NEAREST_PROMPTS_SPAN = 4  # look this many times the asked prompts per step up and down, at most


def scaled_prompts(choices: RunChoices, preset: ModelPreset, dp: int) -> tuple[int, str]:
    """Prompts per step for a small model on more data-parallel ranks than its recipe's one node:
    the preset's times the ranks' multiple of one node's, capped so that one epoch of GSM8K still
    holds the run's steps; with the reason, or why it stays the preset's ("" when nothing to say)."""
    node_dp = max(1, choices.gpus_per_node // preset.train_tp)
    factor = dp // node_dp
    if not preset.scales_with_dp or factor < 2:
        return preset.prompts_per_step, ""
    steps = choices.max_steps or preset.max_steps
    cap = data_epochs.GSM8K_TRAIN_ROWS // (steps * preset.prompts_per_step)
    scaled = min(factor, cap)
    if scaled < 2:
        return preset.prompts_per_step, (
            f"grpo.num_prompts_per_step {preset.prompts_per_step} kept (not {preset.prompts_per_step * factor} for {dp} "
            f"data-parallel ranks, {factor} x one node's {node_dp}): {steps} steps of more prompts would not fit in one pass "
            f"over GSM8K's {data_epochs.GSM8K_TRAIN_ROWS} train rows; set --prompts-per-step to choose"
        )
    return preset.prompts_per_step * scaled, (
        f"{dp} data-parallel ranks, {factor} x one node's {node_dp}"
        + (f"; capped at {scaled} x so that {steps} steps fit in one pass over GSM8K's train rows" if scaled < factor else "")
    )


def _batches(choices: RunChoices, preset: ModelPreset, train_gpus: int) -> _Batches:
    """Prompts, generations and the global batch; every value that differs from the preset's (or
    from what was asked) gets a note naming the NeMo RL key, the preset's value and why."""
    if choices.gpus_per_node % preset.train_tp or train_gpus % preset.train_tp:
        raise SpecError(f"training tensor parallel {preset.train_tp} does not divide {train_gpus} training GPUs")
    dp = train_gpus // preset.train_tp
    generations = choices.generations_per_prompt or preset.generations_per_prompt
    multiple = per_rank_multiple(preset)
    if choices.prompts_per_step is not None:
        asked, why = choices.prompts_per_step, ""
    else:
        asked, why = scaled_prompts(choices, preset, dp)
    prompts = asked
    notes: list[str] = []
    if why and asked == preset.prompts_per_step:
        notes.append(why)  # why the prompts did not scale
    if choices.prompts_per_step is None and prompts * generations < dp * multiple:
        # Many data-parallel ranks: at least one sample (one micro-batch, with plain micro-batching) each per step.
        prompts = -(-dp * multiple // generations)
        why = f"{dp} data-parallel ranks need at least {dp * multiple} samples per step"
    try:
        gbs = _batch(prompts * generations, dp, preset)
    except SpecError as refusal:
        before = prompts
        prompts, gbs = _nearest_prompts(prompts, generations, dp, preset, refusal)
        why = (
            f"{before} x {generations} = {before * generations} samples cannot be split into {dp} data-parallel ranks"
            f"{_of_micro(preset)}; {prompts} is the nearest count that can"
        )
    user = choices.prompts_per_step
    if prompts != (user or preset.prompts_per_step):
        was = f"asked {user}, preset {preset.prompts_per_step}" if user else f"preset {preset.prompts_per_step}"
        notes.append(f"grpo.num_prompts_per_step {prompts} ({was}): {why}")
    samples = prompts * generations
    if gbs != preset.train_global_batch_size:
        preset_samples = preset.prompts_per_step * preset.generations_per_prompt
        notes.append(
            f"policy.train_global_batch_size {gbs} (preset {preset.train_global_batch_size}): {prompts} x {generations} = "
            f"{samples} samples per step in {_updates(samples, gbs)} (preset: {preset_samples} in "
            f"{_updates(preset_samples, preset.train_global_batch_size)}), {gbs // dp} samples per data-parallel rank "
            f"({dp} ranks; {_rank_rule(preset)})"
        )
    return _Batches(prompts, generations, gbs, tuple(notes))


def _updates(samples: int, gbs: int) -> str:
    n = samples // gbs
    return f"{n} optimizer update{'s' if n > 1 else ''} of {gbs}"


def _rank_rule(preset: ModelPreset) -> str:
    if preset.batching == PLAIN:
        return f"plain micro-batching: a whole number of micro-batches of {preset.train_micro_batch_size} per rank"
    return f"{preset.batching}: NeMo RL asserts no micro-batch multiple per rank"


def _nearest_prompts(prompts: int, generations: int, dp: int, preset: ModelPreset, refusal: SpecError) -> tuple[int, int]:
    """The prompts per step nearest to `prompts` (fewer first on a tie) whose samples split evenly
    into the data-parallel ranks, and its global batch; `_batches` reports both."""
    for step in range(1, NEAREST_PROMPTS_SPAN * prompts + 1):
        for candidate in (prompts - step, prompts + step):
            if candidate < 1:
                continue
            try:
                return candidate, _batch(candidate * generations, dp, preset)
            except SpecError:
                continue
    raise refusal


@dataclass(frozen=True)
class _Epochs:
    steps: int  # grpo.max_num_steps
    epochs: int  # grpo.max_num_epochs
    notes: tuple[str, ...] = ()


def _epochs(choices: RunChoices, preset: ModelPreset, batches: _Batches) -> _Epochs:
    """Enough passes over GSM8K's train split for the run to reach grpo.max_num_steps (epochs.py):
    the generator raises grpo.max_num_epochs and leaves the steps as asked."""
    steps = choices.max_steps or preset.max_steps
    per_epoch = data_epochs.steps_per_epoch(batches.prompts)
    if not per_epoch:
        raise SpecError(
            f"{batches.prompts} prompts per step is more than GSM8K's {data_epochs.GSM8K_TRAIN_ROWS} train rows: the dataloader "
            f"drops the partial batch and the run would train no step; use --prompts-per-step {data_epochs.GSM8K_TRAIN_ROWS} or fewer"
        )
    epochs = max(data_epochs.RECIPE_EPOCHS, data_epochs.epochs_needed(steps, batches.prompts))
    if epochs == data_epochs.RECIPE_EPOCHS:
        return _Epochs(steps, epochs)
    note = (
        f"grpo.max_num_epochs {epochs} (preset {data_epochs.RECIPE_EPOCHS}): {steps} steps (grpo.max_num_steps, kept) at "
        f"{batches.prompts} prompts per step need {epochs} passes over GSM8K's {data_epochs.GSM8K_TRAIN_ROWS} train rows "
        f"({per_epoch} steps per epoch, the last partial batch dropped)"
    )
    return _Epochs(steps, epochs, (note,))


@dataclass(frozen=True)
class Layout:
    """The generator's choice of split, batches and epochs, with the notes the file's header carries."""

    split: _Split
    batches: _Batches
    epochs: _Epochs
    micro: tuple[str, ...] = ()

    @property
    def notes(self) -> list[str]:
        return [*self.split.notes, *self.batches.notes, *self.micro, *self.epochs.notes]


def _micro_notes(choices: RunChoices, preset: ModelPreset) -> tuple[str, ...]:
    """The recipe's logprob batch where the generator writes another (equal to the micro-batch)."""
    recipe = dict(preset.recipe_logprob_batch_sizes).get(choices.release)
    if recipe is None or recipe == preset.train_micro_batch_size:
        return ()
    return (
        f"policy.logprob_batch_size {preset.train_micro_batch_size} (recipe {recipe} at {choices.release}): equal to "
        f"policy.train_micro_batch_size {preset.train_micro_batch_size}, which NeMo RL v0.6.0+ asserts with training TP >= 4 "
        "(nemo_rl/models/policy/lm_policy.py Policy.__init__); written at every release",
    )


def layout(choices: RunChoices) -> Layout:
    preset = _preset(choices)
    split = _placement(choices, preset, generation_nodes(choices))
    batches = _batches(choices, preset, split.placed.train_gpus)
    return Layout(split, batches, _epochs(choices, preset, batches), _micro_notes(choices, preset))


def _shape_overrides(choices: RunChoices, preset: ModelPreset, rel: NemoRlRelease, gen_nodes: int, split: _Split) -> dict[str, Any]:
    """The cluster, the model, its parallelism and the generation placement."""
    gpn = choices.gpus_per_node
    o: dict[str, Any] = {NUM_NODES: choices.nodes, GPUS_PER_NODE: gpn}
    if rel.has_segment_size:
        # The v0.7.0 base config's own value, kept explicit: a recipe that set a size would make
        # grpo.setup look for NVLink domains that KubeRay nodes on GKE do not report.
        o["cluster.segment_size"] = None
    micro = preset.train_micro_batch_size
    o |= {
        "policy.model_name": preset.model,
        "policy.tokenizer.name": preset.model,
        "policy.train_micro_batch_size": micro,
        # v0.6.0+ refuses TP >= 4 unless micro == logprob batch; equal is always safe.
        "policy.logprob_batch_size": micro,
        "policy.dtensor_cfg.tensor_parallel_size": preset.train_tp,
        "policy.make_sequence_length_divisible_by": preset.train_tp,
        "policy.generation.vllm_cfg.tensor_parallel_size": preset.vllm_tp,
        "policy.generation.vllm_cfg.gpu_memory_utilization": VLLM_MEMORY_DEDICATED if gen_nodes else VLLM_MEMORY_COLOCATED,
        COLOCATED: gen_nodes == 0,
    }
    if split.generation_gpus is not None:
        o[GENERATION_NODES] = None  # one node: null or 1, generation shares it with training
        o[GENERATION_GPUS_PER_NODE] = split.generation_gpus
    elif gen_nodes:
        o[GENERATION_NODES] = gen_nodes
        o[GENERATION_GPUS_PER_NODE] = gpn
    return o


def _steps_overrides(choices: RunChoices, preset: ModelPreset, batches: _Batches, epochs: _Epochs) -> dict[str, Any]:
    steps = epochs.steps
    o: dict[str, Any] = {
        "grpo.max_num_steps": steps,
        # Written even when it is the recipe's 1: the launcher reads it to tell the data's end.
        "grpo.max_num_epochs": epochs.epochs,
        "grpo.num_prompts_per_step": batches.prompts,
        "grpo.num_generations_per_prompt": batches.generations,
        "policy.train_global_batch_size": batches.global_batch,
    }
    if 1 < steps <= preset.save_period:
        # NeMo RL saves every save_period steps and at the last: a short run still gets a checkpoint
        # before its end, for the resubmission after a preemption.
        o["checkpointing.save_period"] = steps // 2
    if choices.save_by:
        if not SAVE_BY.fullmatch(choices.save_by):
            raise SpecError(f"--save-by {choices.save_by!r}: use DD:HH:MM:SS, e.g. 06:22:00:00")
        # NeMo RL saves a checkpoint and stops cleanly this long after training starts.
        o["checkpointing.checkpoint_must_save_by"] = choices.save_by
    return o


def run_folder(mount_path: str, name: str) -> str:
    """The folder of one run's checkpoints and logs on the shared volume."""
    return f"{mount_path.rstrip('/')}/{RUNS_DIR}/{name}"


def _output_overrides(choices: RunChoices, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(overrides, additions) for checkpoints, logs and W&B."""
    run_dir = run_folder(choices.mount_path, name)
    o: dict[str, Any] = {key: f"{run_dir}/{sub}" for key, sub in RUN_OUTPUTS.items()}
    o |= {
        "logger.tensorboard_enabled": True,
        "logger.wandb_enabled": choices.wandb,
        "logger.wandb.name": name,
    }
    # One W&B run across restarts and resubmissions.
    additions = {"logger.wandb.id": name, "logger.wandb.resume": "allow"} if choices.wandb else {}
    return o, additions


def _data_overrides(choices: RunChoices, rel: NemoRlRelease) -> tuple[dict[str, Any], dict[str, Any]]:
    """(overrides, additions) naming GSM8K in the release's data layout."""
    if rel.data_layout == "flat":
        gsm8k = f"{choices.mount_path.rstrip('/')}/{GSM8K_DIR}"
        return {"data.dataset_name": "ResponseDataset"}, {
            "data.train_data_path": f"{gsm8k}/train.jsonl",
            "data.val_data_path": f"{gsm8k}/test.jsonl",
        }
    return {"data.train.dataset_name": "gsm8k"}, {"data.validation.dataset_name": "gsm8k", "data.validation.split": "test"}


# Asynchronous GRPO, NeMo RL v0.5.0-v0.7.0 (nemo_rl/algorithms/grpo.py async_grpo_train): it asserts
# an async generation engine (policy.generation.vllm_cfg.async_engine), importance-sampling correction
# ("Importance sampling correction must be enabled for async GRPO ...") and non-colocated generation
# ("Colocated inference is not supported for async GRPO"); examples/run_grpo*.py refuses it with
# dynamic sampling, reward scaling or reward shaping (all off in the presets' recipes). The trajectory
# age stays the recipe's 1: an older one only pays with in-flight weight updates (its warning).
ASYNC_MAX_TRAJECTORY_AGE = 1


def async_overrides(choices: RunChoices, rel: NemoRlRelease, gen_nodes: int, split: _Split) -> dict[str, Any]:
    if not choices.async_grpo:
        return {}
    if not rel.has_async_grpo:
        raise SpecError(f"--async: NeMo RL {rel.tag} has no asynchronous GRPO (grpo.async_grpo); drop --async or pick another --release")
    if gen_nodes == 0 and split.generation_gpus is None:
        raise SpecError(
            "--async needs dedicated generation GPUs (NeMo RL's async_grpo_train asserts non-colocated inference): "
            "add --generation-nodes 1 or more, or drop --async"
        )
    return {
        "grpo.async_grpo.enabled": True,
        "grpo.async_grpo.max_trajectory_age_steps": ASYNC_MAX_TRAJECTORY_AGE,
        "loss_fn.use_importance_sampling_correction": True,
        "policy.generation.vllm_cfg.async_engine": True,
    }


def build_spec(choices: RunChoices, rel: NemoRlRelease) -> dict[str, Any]:
    """The `grpo` section of the values file."""
    preset = _preset(choices)
    gen_nodes = generation_nodes(choices)
    chosen = layout(choices)
    name = run_name(choices, preset)
    outputs, output_additions = _output_overrides(choices, name)
    data, data_additions = _data_overrides(choices, rel)
    shape = _shape_overrides(choices, preset, rel, gen_nodes, chosen.split)
    o = shape | _steps_overrides(choices, preset, chosen.batches, chosen.epochs) | outputs | data
    o |= async_overrides(choices, rel, gen_nodes, chosen.split)
    o |= choices.extra
    additions = output_additions | data_additions
    return {
        "enabled": True,
        "runName": name,
        "codeDir": CODE_DIR,
        "entrypoint": rel.entrypoint,
        "recipe": preset.recipe,
        "overrides": [format_override("", k, v) for k, v in sorted(o.items())]
        + [format_override("+", k, v) for k, v in sorted(additions.items())],
        "extraOverrides": [],
    }


def format_value(value: Any) -> str:
    """A value as NeMo RL's override parser reads it back (true/false/null, numbers, strings)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def format_override(prefix: str, key: str, value: Any) -> str:
    return f"{prefix}{key}={format_value(value)}"


def gsm8k_jsonl_dir(rel: NemoRlRelease, mount_path: str) -> str:
    """Where the preparation Job writes GSM8K as JSONL (v0.5.0 only; later releases have it built in)."""
    return f"{mount_path.rstrip('/')}/{GSM8K_DIR}" if rel.data_layout == "flat" else ""
