"""GKE's node topology labels and how many nodes one domain of each holds, per GPU machine.

GKE labels GPU nodes of the AI Hypercomputer machines with their place in the data center:
`cloud.google.com/gce-topology-block`, `-subblock` and `-host`, as Google's TAS guide builds its
Kueue Topology from them with `kubernetes.io/hostname` last ("Schedule GKE workloads with Topology
Aware Scheduling", https://cloud.google.com/ai-hypercomputer/docs/workloads/schedule-gke-workloads-tas;
the same four levels in "Run NCCL on custom GKE clusters that use A3 Mega or A3 High").

Sizes, from Google's AI Hypercomputer terminology
(https://cloud.google.com/ai-hypercomputer/docs/terminology):
- a host is one physical server, and each of these machine families has one machine type that
  takes every GPU of its host (a3-ultragpu-8g, a4-highgpu-8g, a4x-highgpu-4g; Compute Engine's "GPU
  machine types"), so a `-host` domain, like a `kubernetes.io/hostname` one, holds one node;
- a sub-block is the hosts of one rack; for A4X it is the NVLink domain of 18 instances (72 GPUs);
  Google publishes no sub-block size for A3 Ultra or A4, and none for a block: those are not known
  here (None).
"""

from __future__ import annotations

HOSTNAME = "kubernetes.io/hostname"
BLOCK = "cloud.google.com/gce-topology-block"
SUBBLOCK = "cloud.google.com/gce-topology-subblock"
HOST = "cloud.google.com/gce-topology-host"
LEVELS = (BLOCK, SUBBLOCK, HOST, HOSTNAME)  # widest first, as a Kueue Topology lists them

# Nodes in one sub-block, by machine type (absent: Google does not publish it).
SUBBLOCK_NODES = {"a4x-highgpu-4g": 18}


def nodes_per_domain(level: str, machine_type: str) -> int | None:
    """How many nodes of `machine_type` one domain of `level` holds; None when not known."""
    if level in (HOST, HOSTNAME):
        return 1
    if level == SUBBLOCK:
        return SUBBLOCK_NODES.get(machine_type)
    return None
