"""NeMo RL's GRPO setup as the stand-in driver replays it: the virtual clusters grpo.setup creates
(and its checks of the generation placement, with their texts). Standard library only."""

from __future__ import annotations

from typing import Any


class Failure(Exception):
    """NeMo RL would stop (or hang) here."""

    def __init__(self, nemo_rl: str, explanation: str, key: str, hint: str) -> None:
        super().__init__(nemo_rl)
        self.nemo_rl, self.explanation, self.key, self.hint = nemo_rl, explanation, key, hint


def shape(bundle: dict[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in bundle.items()) + "}"


def nodes_range(n: int) -> str:
    return "1" if n == 1 else f"1..{n}"


def virtual_clusters(plan: dict[str, Any]) -> list[tuple[str, list[int], int]]:
    """(name, bundles per node, CPUs per bundle) of each virtual cluster NeMo RL's grpo.setup creates,
    after its checks of the generation placement (their assertion texts)."""
    p, k = plan, plan["keys"]
    nodes, gpn = int(p["num_nodes"]), int(p["gpus_per_node"])
    if p["colocated"]:
        per_bundle = 1 if p["backend"] == "megatron" else 2
        return [("grpo_policy_cluster", [gpn] * nodes, per_bundle)]
    gen_nodes, gen_gpn = p["generation_nodes"], p["generation_gpus_per_node"]
    if nodes == 1:
        if gen_gpn is None or gen_gpn <= 0:
            raise Failure(
                "AssertionError: policy.generation.colocated.resources.gpus_per_node must be explicitly set to a value > 0 "
                f"when cluster.num_nodes = 1 and inference is non-colocated, but got {gen_gpn}.",
                "one node shared by training and generation needs a GPU count for generation",
                k["generation_gpus_per_node"],
                f"set it to {nodes_range(gpn - 1)}",
            )
        if gen_nodes not in (None, 1):
            raise Failure(
                "AssertionError: policy.generation.colocated.resources.num_nodes must be 1 or set to null "
                f"when cluster.num_nodes = 1 and inference is non-colocated, but got {gen_nodes}.",
                "with one node, generation shares it with training",
                k["generation_nodes"],
                "set it to null or 1",
            )
        train_gpn = gpn - gen_gpn
        if train_gpn <= 0:
            raise Failure(
                f"No enough GPUs for training, train_gpus_per_node:{train_gpn} = cluster_config['gpus_per_node']:{gpn} "
                f"- inference_gpus_per_node:{gen_gpn}",
                "generation takes every GPU of the only node",
                k["generation_gpus_per_node"],
                f"set it to {nodes_range(gpn - 1)}",
            )
        return [("grpo_train_cluster", [train_gpn], 1), ("grpo_inference_cluster", [gen_gpn], 1)]
    if gen_nodes is None or gen_nodes <= 0:
        raise Failure(
            "AssertionError: policy.generation.colocated.resources.num_nodes must be > 0 "
            f"when cluster.num_nodes > 1 and inference is non-colocated, but got {gen_nodes}.",
            "dedicated generation needs whole nodes",
            k["generation_nodes"],
            f"set it to {nodes_range(nodes - 1)}",
        )
    if gen_gpn != gpn:
        raise Failure(
            "AssertionError: policy.generation.colocated.resources.gpus_per_node must be explicitly set and equal to "
            "cluster.gpus_per_node when cluster.num_nodes > 1 and inference is non-colocated, "
            f"but got inference_gpus_per_node={gen_gpn}, cluster.gpus_per_node={gpn}.",
            "dedicated generation nodes use all their GPUs",
            k["generation_gpus_per_node"],
            f"set it to {gpn}",
        )
    train_nodes = nodes - gen_nodes
    if train_nodes <= 0:
        raise Failure(
            f"grpo_train_cluster: bundle_ct_per_node_list=[{gpn}] * {train_nodes} is empty",
            f"cluster.num_nodes {nodes} - policy.generation.colocated.resources.num_nodes {gen_nodes} leaves no node "
            "for training; NeMo RL's GRPO setup has no check for this and fails later, when it builds the training workers",
            k["generation_nodes"],
            f"set it to {nodes_range(nodes - 1)} (training gets the rest of cluster.num_nodes)",
        )
    return [("grpo_train_cluster", [gpn] * train_nodes, 1), ("grpo_inference_cluster", [gen_gpn] * gen_nodes, 1)]
