"""NeMo RL's GRPO setup as the stand-in driver replays it: the virtual clusters grpo.setup creates
(placement.py computes them) and its checks of the generation placement, with their texts.
Standard library only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from generator.nemo_rl.placement import Issue, placement


class Failure(Exception):
    """NeMo RL would stop (or hang) here."""

    def __init__(self, nemo_rl: str, explanation: str, key: str, hint: str) -> None:
        super().__init__(nemo_rl)
        self.nemo_rl, self.explanation, self.key, self.hint = nemo_rl, explanation, key, hint


def step_header(step: int, steps: int) -> str:
    """The line NeMo RL prints as a training step starts (nemo_rl/algorithms/grpo.py, grpo_train and
    async_grpo_train, v0.5.0-v0.7.0: 25 '=' on each side), which the launcher's progress lines read."""
    return f"\n{'=' * 25} Step {step}/{steps} {'=' * 25}"


def step_timing(seconds: float) -> str:
    """NeMo RL's step time under "Timing" (grpo.py, grpo_train: "  • Total step time: %.2fs"). The
    stand-in prints no reward or throughput: no model runs here."""
    return f"\n⏱️  Timing:\n  • Total step time: {seconds:.2f}s"


def shape(bundle: dict[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in bundle.items()) + "}"


def nodes_range(n: int) -> str:
    return "1" if n == 1 else f"1..{n}"


# NeMo RL's text, the explanation and the hint for each issue, from the plan's settings.
_Texts = Callable[[int, int, Any, Any], tuple[str, str, str]]
TEXTS: dict[Issue, _Texts] = {
    Issue.ONE_NODE_GENERATION_GPUS_UNSET: lambda _nodes, gpn, _gen_nodes, gen_gpn: (
        "AssertionError: policy.generation.colocated.resources.gpus_per_node must be explicitly set to a value > 0 "
        f"when cluster.num_nodes = 1 and inference is non-colocated, but got {gen_gpn}.",
        "one node shared by training and generation needs a GPU count for generation",
        f"set it to {nodes_range(gpn - 1)}",
    ),
    Issue.ONE_NODE_GENERATION_NODES: lambda _nodes, _gpn, gen_nodes, _gen_gpn: (
        "AssertionError: policy.generation.colocated.resources.num_nodes must be 1 or set to null "
        f"when cluster.num_nodes = 1 and inference is non-colocated, but got {gen_nodes}.",
        "with one node, generation shares it with training",
        "set it to null or 1",
    ),
    Issue.ONE_NODE_NO_TRAINING_GPUS: lambda _nodes, gpn, _gen_nodes, gen_gpn: (
        f"No enough GPUs for training, train_gpus_per_node:{gpn - gen_gpn} = cluster_config['gpus_per_node']:{gpn} "
        f"- inference_gpus_per_node:{gen_gpn}",
        "generation takes every GPU of the only node",
        f"set it to {nodes_range(gpn - 1)}",
    ),
    Issue.GENERATION_NODES_UNSET: lambda nodes, _gpn, gen_nodes, _gen_gpn: (
        "AssertionError: policy.generation.colocated.resources.num_nodes must be > 0 "
        f"when cluster.num_nodes > 1 and inference is non-colocated, but got {gen_nodes}.",
        "dedicated generation needs whole nodes",
        f"set it to {nodes_range(nodes - 1)}",
    ),
    Issue.GENERATION_NOT_WHOLE_NODES: lambda _nodes, gpn, _gen_nodes, gen_gpn: (
        "AssertionError: policy.generation.colocated.resources.gpus_per_node must be explicitly set and equal to "
        "cluster.gpus_per_node when cluster.num_nodes > 1 and inference is non-colocated, "
        f"but got inference_gpus_per_node={gen_gpn}, cluster.gpus_per_node={gpn}.",
        "dedicated generation nodes use all their GPUs",
        f"set it to {gpn}",
    ),
    Issue.NO_TRAINING_NODES: lambda nodes, gpn, gen_nodes, _gen_gpn: (
        f"grpo_train_cluster: bundle_ct_per_node_list=[{gpn}] * {nodes - gen_nodes} is empty",
        f"cluster.num_nodes {nodes} - policy.generation.colocated.resources.num_nodes {gen_nodes} leaves no node "
        "for training; NeMo RL's GRPO setup has no check for this and fails later, when it builds the training workers",
        f"set it to {nodes_range(nodes - 1)} (training gets the rest of cluster.num_nodes)",
    ),
}


def virtual_clusters(plan: dict[str, Any]) -> list[tuple[str, list[int], int]]:
    """(name, bundles per node, CPUs per bundle) of each virtual cluster NeMo RL's grpo.setup creates,
    after its checks of the generation placement (their assertion texts)."""
    nodes, gpn = int(plan["num_nodes"]), int(plan["gpus_per_node"])
    gen_nodes, gen_gpn = plan["generation_nodes"], plan["generation_gpus_per_node"]
    placed = placement(
        nodes,
        gpn,
        colocated=bool(plan["colocated"]),
        generation_nodes=gen_nodes,
        generation_gpus_per_node=gen_gpn,
        backend=plan["backend"],
    )
    if placed.issues:
        issue = placed.issues[0]
        nemo_rl, explanation, hint = TEXTS[issue](nodes, gpn, gen_nodes, gen_gpn)
        plan_key = "generation_nodes" if issue.key.endswith("num_nodes") else "generation_gpus_per_node"
        raise Failure(nemo_rl, explanation, plan["keys"][plan_key], hint)
    return [(c.name, list(c.bundles), c.cpus_per_bundle) for c in placed.clusters]
