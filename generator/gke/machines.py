"""Machine types other than the GPU ones (those are in `profiles.py`): the CPU node pool the infra
script creates for the Ray head and the Jobs, with its size from Compute Engine's machine table
(E2 standard: 4 GB per vCPU)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Machine:
    machine_type: str
    vcpus: int
    memory_gib: int


CPU_POOL = Machine("e2-standard-16", vcpus=16, memory_gib=64)
