"""GPU worker groups: how many nodes a values file may ask for, the `--groups` entries, and the
one sum of their replicas (the GPU worker nodes NeMo RL's cluster.num_nodes must match)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from generator.gke.provisioning import PROVISIONING

MAX_NODES = 64  # GPU worker nodes in one values file


def worker_nodes(replicas: Iterable[int]) -> int:
    """The GPU worker nodes of a set of worker groups, from each group's replicas."""
    return sum(replicas)


@dataclass(frozen=True)
class GroupSpec:
    name: str
    replicas: int
    provisioning: str = ""  # "": not given, the machine's default (for_machine)
    reservation: str = ""

    def for_machine(self, default: str) -> GroupSpec:
        """This group with the machine's default provisioning (gke.provisioning.machine_default:
        its profile row decides, e.g. reservation for A4X) where the entry named none."""
        return self if self.provisioning else replace(self, provisioning=default)

    @classmethod
    def parse(cls, text: str) -> GroupSpec:
        """NAME=REPLICAS[:PROVISIONING[:RESERVATION]], e.g. reserved=4:reservation:res-a."""
        name, sep, rest = text.partition("=")
        parts = rest.split(":") if sep else []
        if not name or not parts or len(parts) > 3 or not re.fullmatch(r"[0-9]{1,6}", parts[0]):
            raise ValueError(f"--groups entry {text!r}: use NAME=REPLICAS[:PROVISIONING[:RESERVATION]], e.g. reserved=4:reservation:res-a")
        if not 1 <= int(parts[0]) <= MAX_NODES:
            raise ValueError(f"--groups entry {text!r}: REPLICAS must be between 1 and {MAX_NODES}")
        prov = parts[1] if len(parts) > 1 else ""
        if prov and prov not in PROVISIONING:
            raise ValueError(f"--groups entry {text!r}: provisioning must be one of {', '.join(PROVISIONING)}")
        return cls(name, int(parts[0]), prov, parts[2] if len(parts) > 2 else "")

    def __str__(self) -> str:
        parts = [f"{self.name}={self.replicas}", self.provisioning, self.reservation]
        return ":".join(p for p in parts if p)


def parse_groups(text: str) -> tuple[GroupSpec, ...]:
    """`--groups` as both the values generator and the infra script take it: comma-separated
    NAME=REPLICAS[:PROVISIONING[:RESERVATION]] entries, at most MAX_NODES GPU nodes in all
    (ValueError naming the option otherwise)."""
    groups = tuple(GroupSpec.parse(t) for t in text.split(",") if t.strip())
    total = worker_nodes(g.replicas for g in groups)
    if total > MAX_NODES:
        raise ValueError(f"--groups: {total} GPU nodes in all; at most {MAX_NODES}")
    return groups
