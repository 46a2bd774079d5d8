"""Where NeMo RL's GRPO puts training and generation: the GPU split and the placement-group shapes.

The one computation of the split, used by the generator (grpo.build_spec), `validate`
(validate/rules/nemo_rl.py, validate/rules/resources.py) and `rehearse` (rehearse/job/nemo_rl.py, inside the Ray
job), so the three cannot disagree. It follows NeMo RL's grpo.setup: colocated generation shares
one virtual cluster of every GPU; dedicated generation gets whole nodes (several nodes) or part
of the only node (one node), training the rest. Each rule NeMo RL asserts is an `Issue`; each
caller words it for its readers. Standard library only (it runs inside the Ray job).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

NUM_NODES = "cluster.num_nodes"
GPUS_PER_NODE = "cluster.gpus_per_node"
COLOCATED = "policy.generation.colocated.enabled"
GENERATION_NODES = "policy.generation.colocated.resources.num_nodes"
GENERATION_GPUS_PER_NODE = "policy.generation.colocated.resources.gpus_per_node"


class Issue(Enum):
    """A generation placement NeMo RL's grpo.setup refuses, in the order it checks them."""

    # one node shared by training and generation
    ONE_NODE_GENERATION_GPUS_UNSET = "one node: generation GPUs not > 0"
    ONE_NODE_GENERATION_NODES = "one node: generation nodes neither null nor 1"
    ONE_NODE_NO_TRAINING_GPUS = "one node: no GPU left for training"
    # several nodes: whole nodes for generation
    GENERATION_NODES_UNSET = "several nodes: generation nodes not > 0"
    GENERATION_NOT_WHOLE_NODES = "several nodes: generation GPUs per node != cluster.gpus_per_node"
    NO_TRAINING_NODES = "several nodes: no node left for training"

    @property
    def key(self) -> str:
        """The NeMo RL key to change."""
        if self in (Issue.ONE_NODE_GENERATION_NODES, Issue.GENERATION_NODES_UNSET, Issue.NO_TRAINING_NODES):
            return GENERATION_NODES
        return GENERATION_GPUS_PER_NODE


@dataclass(frozen=True)
class VirtualCluster:
    """One of grpo.setup's virtual clusters: one PACK placement group of `bundles[i]` GPU bundles
    on node i, each bundle {CPU: cpus_per_bundle, GPU: 1}."""

    name: str
    bundles: tuple[int, ...]
    cpus_per_bundle: int

    @property
    def gpus(self) -> int:
        return sum(self.bundles)


# NeMo RL's per-node virtualenv reservation: one STRICT_SPREAD placement group of {CPU: 1} on every
# alive node (the head too before v0.7.0), per worker group, after the virtual clusters' placement
# groups hold their bundles; `ray.get(pg.ready())` without a timeout, so a GPU node whose Ray CPUs
# are all in bundles waits forever (nemo_rl/utils/venvs.py create_local_venv_on_each_node, v0.5.0
# to v0.7.0, called from nemo_rl/distributed/worker_groups.py RayWorkerGroup).
VENV_RESERVATION_CPUS = 1


@dataclass(frozen=True)
class Placement:
    """The run's virtual clusters, or what NeMo RL refuses (then `clusters` is empty)."""

    colocated: bool
    clusters: tuple[VirtualCluster, ...] = ()
    issues: tuple[Issue, ...] = ()
    shared_node: bool = False  # one node split between training and generation

    def node_cpus(self) -> list[int]:
        """CPUs the placement groups hold on each GPU node (training nodes first)."""
        if self.shared_node:
            return [sum(c.bundles[0] * c.cpus_per_bundle for c in self.clusters)]
        return [b * c.cpus_per_bundle for c in self.clusters for b in c.bundles]

    def worker_ray_cpus(self) -> int:
        """Ray CPUs every GPU node needs: its placement groups' bundles and the virtualenv reservation."""
        return max(self.node_cpus(), default=0) + VENV_RESERVATION_CPUS

    @property
    def train_gpus(self) -> int:
        return self.clusters[0].gpus if self.clusters else 0

    @property
    def generation_gpus(self) -> int:
        """GPUs vLLM runs on: all of them when colocated."""
        return self.clusters[-1].gpus if self.clusters else 0


def cpus_per_bundle(colocated: bool, backend: str = "vllm") -> int:
    """CPUs of each GPU bundle: colocated vLLM asks for 2 per GPU, everything else for 1."""
    return 2 if colocated and backend != "megatron" else 1


def _one_node(gpn: int, gen_nodes: int | None, gen_gpn: int | None) -> Placement:
    issues: list[Issue] = []
    if gen_gpn is None or gen_gpn <= 0:
        issues.append(Issue.ONE_NODE_GENERATION_GPUS_UNSET)
    if gen_nodes not in (None, 1):
        issues.append(Issue.ONE_NODE_GENERATION_NODES)
    if gen_gpn is not None and gpn - gen_gpn <= 0:
        issues.append(Issue.ONE_NODE_NO_TRAINING_GPUS)
    if issues or gen_gpn is None:
        return Placement(False, issues=tuple(issues))
    return Placement(
        False,
        (VirtualCluster("grpo_train_cluster", (gpn - gen_gpn,), 1), VirtualCluster("grpo_inference_cluster", (gen_gpn,), 1)),
        shared_node=True,
    )


def _several_nodes(nodes: int, gpn: int, gen_nodes: int | None, gen_gpn: int | None) -> Placement:
    issues: list[Issue] = []
    if gen_nodes is None or gen_nodes <= 0:
        issues.append(Issue.GENERATION_NODES_UNSET)
    if gen_gpn != gpn:
        issues.append(Issue.GENERATION_NOT_WHOLE_NODES)
    if gen_nodes is not None and nodes - gen_nodes <= 0:
        issues.append(Issue.NO_TRAINING_NODES)
    if issues or gen_nodes is None:
        return Placement(False, issues=tuple(issues))
    train = VirtualCluster("grpo_train_cluster", (gpn,) * (nodes - gen_nodes), 1)
    return Placement(False, (train, VirtualCluster("grpo_inference_cluster", (gpn,) * gen_nodes, 1)))


def placement(
    nodes: int,
    gpus_per_node: int,
    *,
    colocated: bool,
    generation_nodes: int | None = None,
    generation_gpus_per_node: int | None = None,
    backend: str = "vllm",
) -> Placement:
    """The virtual clusters grpo.setup creates for `cluster.num_nodes` x `cluster.gpus_per_node`
    and the generation settings (policy.generation.colocated.*)."""
    if colocated:
        shared = VirtualCluster("grpo_policy_cluster", (gpus_per_node,) * nodes, cpus_per_bundle(True, backend))
        return Placement(True, (shared,))
    if nodes == 1:
        return _one_node(gpus_per_node, generation_nodes, generation_gpus_per_node)
    return _several_nodes(nodes, gpus_per_node, generation_nodes, generation_gpus_per_node)


def dedicated(nodes: int, gpus_per_node: int, generation_nodes: int) -> Placement:
    """The generator's placement: `generation_nodes` whole nodes for vLLM (0: colocated)."""
    if generation_nodes == 0:
        return placement(nodes, gpus_per_node, colocated=True)
    return placement(nodes, gpus_per_node, colocated=False, generation_nodes=generation_nodes, generation_gpus_per_node=gpus_per_node)
