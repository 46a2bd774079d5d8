"""The training/generation split has one home (generator/placement.py): the generator, `validate`
and `rehearse`'s stand-in for NeMo RL's grpo.setup read the same placement, so they cannot disagree."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from generator.nemo_rl.placement import GENERATION_GPUS_PER_NODE, GENERATION_NODES, Issue, placement
from generator.nemo_rl.recipe_config import Override, grpo_override_args, winning
from generator.rehearse.job.nemo_rl import Failure, virtual_clusters
from generator.validate.findings import ERROR
from generator.validate.rules import nemo_rl
from generator.validate.rules.context import Context
from generator.values.build import Options, build

KEYS = {"generation_nodes": "<nodes>", "generation_gpus_per_node": "<gpus>"}
PLACEMENT_KEYS = {f"grpo.overrides[{GENERATION_NODES}]", f"grpo.overrides[{GENERATION_GPUS_PER_NODE}]"}


def _values(nodes: int, gen_nodes: int | None, gen_gpn: int | None) -> dict[str, Any]:
    values = build(Options(gpu="h200", nodes=2, generation_nodes=1, model="llama3.2-1b"))
    kept = [o for o in values["grpo"]["overrides"] if not o.startswith(("cluster.num_nodes=", "policy.generation.colocated.resources."))]
    values["grpo"]["overrides"] = [
        *kept,
        f"cluster.num_nodes={nodes}",
        f"{GENERATION_NODES}={'null' if gen_nodes is None else gen_nodes}",
        f"{GENERATION_GPUS_PER_NODE}={'null' if gen_gpn is None else gen_gpn}",
    ]
    return values


@pytest.mark.parametrize(
    ("nodes", "gen_nodes", "gen_gpn"),
    list(itertools.product([1, 2, 3], [None, 0, 1, 2, 3], [None, 0, 4, 8])),
)
def test_validate_and_rehearse_agree(nodes: int, gen_nodes: int | None, gen_gpn: int | None) -> None:
    plan = {
        "release": "v0.7.0",
        "num_nodes": nodes,
        "gpus_per_node": 8,
        "colocated": False,
        "backend": "vllm",
        "generation_nodes": gen_nodes,
        "generation_gpus_per_node": gen_gpn,
        "keys": KEYS,
    }
    try:
        virtual_clusters(plan)
        refused = False
    except Failure:
        refused = True
    findings = list(nemo_rl._placement_and_parallelism(Context(_values(nodes, gen_nodes, gen_gpn))))
    placement_errors = [f for f in findings if f.level == ERROR and f.key in PLACEMENT_KEYS]
    assert bool(placement_errors) == refused, (plan, findings)


def test_one_node_generation_nodes_is_checked_by_validate_too() -> None:
    assert placement(1, 8, colocated=False, generation_nodes=2, generation_gpus_per_node=4).issues == (Issue.ONE_NODE_GENERATION_NODES,)
    findings = list(nemo_rl._placement_and_parallelism(Context(_values(1, 2, 4))))
    assert [f.key for f in findings] == [f"grpo.overrides[{GENERATION_NODES}]"]


@pytest.mark.parametrize(("nodes", "generation_nodes"), [(2, 1), (4, 2), (8, 4), (1, 0), (4, 0)])
def test_the_generator_writes_the_split_placement_computes(nodes: int, generation_nodes: int) -> None:
    values = build(Options(gpu="h200", nodes=nodes, generation_nodes=generation_nodes))
    ctx = Context(values)
    placed = placement(
        nodes,
        8,
        colocated=ctx.get("policy.generation.colocated.enabled"),
        generation_nodes=ctx.get(GENERATION_NODES),
        generation_gpus_per_node=ctx.get(GENERATION_GPUS_PER_NODE),
    )
    assert not placed.issues
    assert placed.train_gpus == (nodes - generation_nodes) * 8
    assert placed.generation_gpus == (generation_nodes or nodes) * 8


def test_the_last_override_wins() -> None:
    grpo = {"overrides": ["a=1", "b=2"], "extraOverrides": ["a=3"]}
    args = grpo_override_args(grpo)
    assert args == [("grpo.overrides[0]", "a=1"), ("grpo.overrides[1]", "b=2"), ("grpo.extraOverrides[0]", "a=3")]
    won = winning((where, Override.parse(arg)) for where, arg in args)
    assert {k: (where, ov.value) for k, (where, ov) in won.items()} == {"a": ("grpo.extraOverrides[0]", 3), "b": ("grpo.overrides[1]", 2)}
