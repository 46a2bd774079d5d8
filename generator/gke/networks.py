"""GKE multi-network naming: one plan shared by the values file and the infra script.

A GPU node has eth0 on the cluster's VPC, eth1 on a second gVNIC VPC and eth2.. on the RoCE
VPC's subnets (one per RDMA NIC of the profile). Each extra NIC is a `GKENetworkParamSet` +
`Network` pair in the cluster.

Network modes (values `network.mode`): rdma (that multi-networking), dranet (GKE managed DRANET:
the node pool's accelerator network profile attaches the RDMA NICs, pods claim them through DRA,
no VPC or Network object of ours), tcp (eth0 only).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MODES = ("rdma", "dranet", "tcp")
DEFAULT_MODE = "rdma"
# Managed DRANET ("Set up GKE managed DRANET", GKE docs; container-engine-accelerators
# gpudirect-rdma/nccl-test-managed-rdma.yaml): node pools created with
# --accelerator-network-profile=auto carry this label, the RDMA NICs are devices of this class.
DRANET_PROFILE_LABEL = "gke.networks.io/accelerator-network-profile"
DRANET_PROFILE = "auto"
DRANET_DEVICE_CLASS = "mrdma.google.com"
DRANET_MIN_GKE = "1.34.1-gke.1829001"
DEFAULT_PREFIX = "nemo-rl"
DEFAULT_NETWORK = "default"
GVNIC_NETWORK = "gvnic-1"
RDMA_NETWORK_PREFIX = "rdma"

# Lowercase RFC 1035 label; the longest derived name ("<prefix>-rdma-sub-7") must stay <= 63.
PREFIX_PATTERN = re.compile(r"^[a-z]([-a-z0-9]{0,40}[a-z0-9])?$")


@dataclass(frozen=True)
class ExtraNetwork:
    name: str  # Kubernetes Network / GKENetworkParamSet name
    vpc: str
    subnet: str
    device_mode: str  # NetDevice | RDMA


@dataclass(frozen=True)
class NetworkPlan:
    prefix: str
    gvnic: ExtraNetwork
    rdma: tuple[ExtraNetwork, ...]

    @property
    def gvnic_vpc(self) -> str:
        return self.gvnic.vpc

    @property
    def rdma_vpc(self) -> str:
        return self.rdma[0].vpc


def check_prefix(prefix: str) -> str:
    if not PREFIX_PATTERN.fullmatch(prefix):  # not .match: "$" matches before a final newline
        raise ValueError(
            f"network prefix {prefix!r} is not a lowercase RFC 1035 name of at most 42 characters "
            "(letters, digits, '-'; starts with a letter)"
        )
    return prefix


def plan(prefix: str = DEFAULT_PREFIX, rdma_nics: int = 8) -> NetworkPlan:
    check_prefix(prefix)
    gvnic = ExtraNetwork(GVNIC_NETWORK, f"{prefix}-gvnic-net", f"{prefix}-gvnic-sub", "NetDevice")
    rdma = tuple(
        ExtraNetwork(f"{RDMA_NETWORK_PREFIX}-{i}", f"{prefix}-rdma-net", f"{prefix}-rdma-sub-{i}", "RDMA") for i in range(rdma_nics)
    )
    return NetworkPlan(prefix=prefix, gvnic=gvnic, rdma=rdma)
