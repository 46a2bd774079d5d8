"""NeMo RL's GRPO setup as the stand-in driver replays it: the virtual clusters grpo.setup creates
(placement.py computes them) and its checks of the generation placement, with their texts.
Standard library only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from generator.nemo_rl.placement import Issue, placement
from generator.nemo_rl.releases import RELEASES


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


# NeMo RL's text, the explanation and the hint for each issue, from the plan's settings. The texts
# are grpo.setup's (nemo_rl/algorithms/grpo.py, v0.5.0 to v0.7.0; the one-node checks test
# policy_nodes, which is cluster.num_nodes without a reward model).
_Texts = Callable[[int, int, Any, Any], tuple[str, str, str]]


def _more_than_zero(key: str, value: Any, when: str) -> str:
    if value is None:  # `assert None > 0` raises before the assertion's message
        return "TypeError: '>' not supported between instances of 'NoneType' and 'int'"
    return f"AssertionError: {key} must be > 0 when {when}, but got {value}."


TEXTS: dict[Issue, _Texts] = {
    Issue.ONE_NODE_GENERATION_GPUS_UNSET: lambda _nodes, gpn, _gen_nodes, gen_gpn: (
        "AssertionError: policy.generation.colocated.resources.gpus_per_node must be explicitly set to a value > 0 "
        f"when policy_nodes = 1 and inference is non-colocated, but got {gen_gpn}.",
        "one node shared by training and generation needs a GPU count for generation",
        f"set it to {nodes_range(gpn - 1)}",
    ),
    Issue.ONE_NODE_GENERATION_NODES: lambda _nodes, _gpn, gen_nodes, _gen_gpn: (
        "AssertionError: policy.generation.colocated.resources.num_nodes must be 1 or set to null "
        f"when policy_nodes = 1 and inference is non-colocated, but got {gen_nodes}.",
        "with one node, generation shares it with training",
        "set it to null or 1",
    ),
    Issue.ONE_NODE_NO_TRAINING_GPUS: lambda _nodes, gpn, _gen_nodes, gen_gpn: (
        f"AssertionError: No enough GPUs for training, train_gpus_per_node:{gpn - gen_gpn} = cluster_config['gpus_per_node']:{gpn} "
        f"- inference_gpus_per_node:{gen_gpn}",
        "generation takes every GPU of the only node",
        f"set it to {nodes_range(gpn - 1)}",
    ),
    Issue.GENERATION_NODES_UNSET: lambda nodes, _gpn, gen_nodes, _gen_gpn: (
        _more_than_zero(
            "policy.generation.colocated.resources.num_nodes", gen_nodes, "cluster.num_nodes > 1 and inference is non-colocated"
        ),
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
}


def _no_training_nodes(tag: str, nodes: int, gpn: int, gen_nodes: int) -> tuple[str, str, str]:
    """v0.7.0 asserts training nodes > 0 in grpo.setup; v0.5.0 and v0.6.0 do not and fail later."""
    hint = f"set it to {nodes_range(nodes - 1)} (training gets the rest of cluster.num_nodes)"
    left = f"cluster.num_nodes {nodes} - policy.generation.colocated.resources.num_nodes {gen_nodes} leaves no node for training"
    rel = RELEASES.get(tag)
    if rel is None or rel.asserts_training_nodes:
        text = (
            "AssertionError: Non-colocated mode requires train_nodes > 0 and inference_nodes > 0, "
            f"got train_nodes={nodes - gen_nodes}, inference_nodes={gen_nodes}"
        )
        return text, f"{left}; NeMo RL {tag}'s GRPO setup stops there", hint
    text = f"grpo_train_cluster: bundle_ct_per_node_list=[{gpn}] * {nodes - gen_nodes} is empty"
    return text, f"{left}; NeMo RL {tag}'s GRPO setup has no check for this and fails later, when it builds the training workers", hint


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
        if issue is Issue.NO_TRAINING_NODES:
            nemo_rl, explanation, hint = _no_training_nodes(str(plan["release"]), nodes, gpn, int(gen_nodes))
        else:
            nemo_rl, explanation, hint = TEXTS[issue](nodes, gpn, gen_nodes, gen_gpn)
        plan_key = "generation_nodes" if issue.key.endswith("num_nodes") else "generation_gpus_per_node"
        raise Failure(nemo_rl, explanation, plan["keys"][plan_key], hint)
    return [(c.name, list(c.bundles), c.cpus_per_bundle) for c in placed.clusters]
