"""GKE's node pools as the infra script creates them, as kwok nodes: the facts come from the
generator's own tables (accelerator profiles, provisioning types, machine sizes, allocatable
arithmetic), never from a second copy here.

Per GPU pool (one per worker group of the infra options): the machine type, accelerator, GPU
driver, node-pool, zone and architecture labels, the labels and taints of the pool's provisioning
type, the GPU taint, `nvidia.com/gpu` capacity, allocatable CPU, memory and ephemeral storage by
GKE's formula, and the topology labels Kueue's topology-aware placement reads; an Arm machine
(A4X) gets its architecture label and GKE's arch taint, a managed-DRANET pool the labels of
`--accelerator-network-profile=auto` (both from generator/gke/provisioning.py). And the CPU pool
(`default-pool`, one node) the infra script's cluster starts with.

kwok manages exactly the nodes annotated `kwok.x-k8s.io/node: fake` (an annotation, so no pod
selector can match it by accident); their address is 127.0.0.1, so anything the API server would
send to a "kubelet" reaches kwok on loopback.
"""

from __future__ import annotations

from typing import Any

from generator.gke.machines import CPU_POOL
from generator.gke.profiles import profile
from generator.gke.provisioning import CPU_POOL_NAME, dranet_node_labels, gpu_node_labels, gpu_node_taints
from generator.gke.provisioning import node_labels as gke_node_labels
from generator.gke.sizing import allocatable_of as allocatable
from generator.gke.sizing import ephemeral_allocatable_gib
from generator.infra.options import InfraOptions
from generator.values.worker_groups import GroupSpec
from testbed.components import CONTROL_PLANE

KWOK_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
PODS_PER_NODE = 110  # GKE Standard's default maximum pods per node
TOPOLOGY_BLOCK = "cloud.google.com/gce-topology-block"
TOPOLOGY_SUBBLOCK = "cloud.google.com/gce-topology-subblock"
TOPOLOGY_HOST = "cloud.google.com/gce-topology-host"
NODES_PER_SUBBLOCK = 2  # simulated: a sub-block holds 2 hosts here, so groups of 3+ nodes span two


def _milli(cpu: float) -> str:
    return f"{int(cpu * 1000)}m"


def _ki(gib: float) -> str:
    return f"{int(gib * 2**20)}Ki"


def node(
    name: str,
    *,
    machine_type: str,
    vcpus: int,
    memory_gib: float,
    pool: str,
    zone: str,
    arch: str = "amd64",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    extended: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Node as GKE registers one: labels, taints, capacity and allocatable."""
    alloc = allocatable(vcpus, memory_gib)
    region = zone.rsplit("-", 1)[0]
    all_labels = {
        "kubernetes.io/hostname": name,
        "topology.kubernetes.io/region": region,
        "topology.kubernetes.io/zone": zone,
        "failure-domain.beta.kubernetes.io/region": region,
        "failure-domain.beta.kubernetes.io/zone": zone,
    }
    all_labels |= gke_node_labels(machine_type, pool, arch) | (labels or {})
    capacity = {
        "cpu": str(vcpus),
        "memory": _ki(memory_gib),
        "ephemeral-storage": _ki(100),
        "pods": str(PODS_PER_NODE),
    } | (extended or {})
    allocatable_ = {
        "cpu": _milli(alloc.cpu),
        "memory": _ki(alloc.memory_gib),
        "ephemeral-storage": _ki(ephemeral_allocatable_gib()),
        "pods": str(PODS_PER_NODE),
    } | (extended or {})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels, "annotations": dict([KWOK_ANNOTATION])},
        "spec": {"taints": taints or []},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable_,
            "nodeInfo": {
                "architecture": arch,
                "operatingSystem": "linux",
                "kubeletVersion": CONTROL_PLANE.version,
                "containerRuntimeVersion": "containerd://2.0.0",
            },
        },
    }


def gpu_pool(o: InfraOptions, group: GroupSpec, first_block: int = 0, dranet: bool = False) -> list[dict[str, Any]]:
    """The nodes of one GPU pool at its full size (the autoscaler's maximum); `dranet`: a pool
    created with --accelerator-network-profile=auto."""
    p = profile(o.gpu)
    pool = o.pool_name(group)
    taints = [{"key": t.key, "value": t.value, "effect": t.effect} for t in gpu_node_taints(group.provisioning, p.cpu_arch)]
    out = []
    for i in range(group.replicas):
        name = f"gke-{o.cluster}-{pool}-{i}"
        labels = gpu_node_labels(p.node_label, group.provisioning, group.reservation) | {
            TOPOLOGY_BLOCK: f"block-{first_block}",
            TOPOLOGY_SUBBLOCK: f"block-{first_block}-sub-{i // NODES_PER_SUBBLOCK}",
            TOPOLOGY_HOST: f"host-{pool}-{i}",
        }
        if dranet:
            labels |= dranet_node_labels()
        out.append(
            node(
                name,
                machine_type=p.machine_type,
                vcpus=p.host_vcpus,
                memory_gib=p.host_memory_gib,
                pool=pool,
                zone=o.zone,
                arch=p.cpu_arch,
                labels=labels,
                taints=taints,
                extended={"nvidia.com/gpu": str(p.gpus_per_node)},
            )
        )
    return out


def cpu_pool(o: InfraOptions, count: int = 1) -> list[dict[str, Any]]:
    return [
        node(
            f"gke-{o.cluster}-{CPU_POOL_NAME}-{i}",
            machine_type=CPU_POOL.machine_type,
            vcpus=CPU_POOL.vcpus,
            memory_gib=CPU_POOL.memory_gib,
            pool=CPU_POOL_NAME,
            zone=o.zone,
        )
        for i in range(count)
    ]


def cluster_nodes(o: InfraOptions, dranet: bool = False) -> list[dict[str, Any]]:
    """Every node of a Standard cluster the infra script builds with these options (its GPU pools
    with managed DRANET when `dranet`)."""
    nodes = cpu_pool(o)
    for block, group in enumerate(o.worker_groups):
        nodes += gpu_pool(o, group, first_block=block, dranet=dranet)
    return nodes
