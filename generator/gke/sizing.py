"""Node allocatable arithmetic and Kubernetes quantities.

GKE Standard reserves part of each node for the kubelet and the OS; requests must fit what is
left after GKE's own DaemonSets (logging, metrics, device plugin, NCCL installer, CSI nodes).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction

from generator.gke.profiles import AcceleratorProfile

# Room left on a GPU node for GKE's DaemonSets; generous on purpose (they take a few CPUs/GiB).
DAEMONSET_MARGIN_CPU = 8
DAEMONSET_MARGIN_MEMORY_GIB = 64

# Memory tiers (GiB, fraction) and CPU tiers (cores, fraction) GKE Standard reserves.
_MEMORY_TIERS = ((4, "0.25"), (4, "0.20"), (8, "0.10"), (112, "0.06"), (math.inf, "0.02"))
_CPU_TIERS = ((1, "0.06"), (1, "0.01"), (2, "0.005"), (math.inf, "0.0025"))
_EVICTION_MIB = 100


def _tiered(total: float, tiers: tuple[tuple[float, str], ...]) -> float:
    reserved, left = 0.0, total
    for size, fraction in tiers:
        part = min(left, size)
        reserved += part * float(fraction)
        left -= part
        if left <= 0:
            break
    return reserved


@dataclass(frozen=True)
class Allocatable:
    cpu: float
    memory_gib: float


def allocatable_of(vcpus: int, memory_gib: float) -> Allocatable:
    """Allocatable CPU and memory of a GKE Standard node with this many vCPUs and GiB."""
    cpu = vcpus - _tiered(vcpus, _CPU_TIERS)
    mem = memory_gib - _tiered(memory_gib, _MEMORY_TIERS) - _EVICTION_MIB / 1024
    return Allocatable(cpu=cpu, memory_gib=mem)


def allocatable(p: AcceleratorProfile) -> Allocatable:
    """Allocatable CPU and memory of a GKE Standard node of this machine type."""
    return allocatable_of(p.host_vcpus, p.host_memory_gib)


# GKE's boot disk default (pd-balanced, 100 GB) and its ephemeral-storage reservation on a node
# whose ephemeral storage is the boot disk: an eviction threshold of 10% of the disk, and for the
# system min(50% of the disk, 6 GiB + 35% of the disk, 100 GiB) ("Standard cluster architecture",
# node allocatable resources).
BOOT_DISK_GIB = 100


def ephemeral_allocatable_gib(disk_gib: float = BOOT_DISK_GIB) -> float:
    return disk_gib - 0.10 * disk_gib - min(0.5 * disk_gib, 6 + 0.35 * disk_gib, 100)


def usable(p: AcceleratorProfile) -> Allocatable:
    """What one pod may take: allocatable minus the DaemonSet margin."""
    a = allocatable(p)
    return Allocatable(a.cpu - DAEMONSET_MARGIN_CPU, a.memory_gib - DAEMONSET_MARGIN_MEMORY_GIB)


@dataclass(frozen=True)
class WorkerSizing:
    cpu: int
    memory_request_gib: int
    memory_limit_gib: int
    shm_gib: int


def worker_sizing(p: AcceleratorProfile) -> WorkerSizing:
    """Requests for one GPU worker pod per node: whole CPUs, memory rounded down to 100 GiB.

    /dev/shm is a memory-backed emptyDir and is charged to the pod, so the memory limit is the
    request plus the shm size, and request + shm must fit the node.
    """
    u = usable(p)
    memory = int((u.memory_gib - p.shm_size_gib) // 100 * 100)
    return WorkerSizing(
        cpu=int(u.cpu),
        memory_request_gib=memory,
        memory_limit_gib=memory + p.shm_size_gib,
        shm_gib=p.shm_size_gib,
    )


# --- Kubernetes quantities ---------------------------------------------------------------

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
# Bounds that keep the arithmetic finite (a float of 10**400 overflows; Python refuses int strings
# over 4300 digits); real quantities are a handful of characters.
MAX_QUANTITY_CHARS = 64
MAX_EXPONENT = 30
_QUANTITY = re.compile(r"^([+]?[0-9]+(?:\.[0-9]*)?|[+]?\.[0-9]+)(?:[eE]([+-]?[0-9]+))?(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$")


def parse_quantity(value: object) -> Fraction:
    """A Kubernetes quantity ("200", "1500m", "2400Gi", 8) as an exact number."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))
    text = str(value).strip()
    if len(text) > MAX_QUANTITY_CHARS:
        raise ValueError(f"not a Kubernetes quantity: more than {MAX_QUANTITY_CHARS} characters")
    m = _QUANTITY.fullmatch(text)
    if not m:
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    number, exponent, suffix = m.group(1), m.group(2), m.group(3) or ""
    if exponent and suffix:
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    base = Fraction(number.lstrip("+"))
    if exponent:
        if abs(int(exponent)) > MAX_EXPONENT:
            raise ValueError(f"not a Kubernetes quantity: exponent {exponent} out of range")
        base *= Fraction(10) ** int(exponent)
    scale = _BINARY.get(suffix) or _DECIMAL[suffix]
    return base * scale


def gib(value: object) -> float:
    """A memory quantity in GiB."""
    return float(parse_quantity(value) / 2**30)
