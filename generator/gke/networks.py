"""GKE multi-network naming: one plan shared by the values file and the infra script.

A GPU node has eth0 on the cluster's VPC, eth1 on a second gVNIC VPC and eth2..eth9 on the RoCE
VPC's eight subnets. Each extra NIC is a `GKENetworkParamSet` + `Network` pair in the cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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
