"""GKE version floors: the oldest GKE version each feature the infra script uses needs, with its
source, and the highest of them for one cluster."""

from __future__ import annotations

import re
from dataclasses import dataclass

from generator.gke.profiles import AcceleratorProfile

_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)-gke\.(\d+)$")


@dataclass(frozen=True)
class Floor:
    version: str
    what: str
    source: str


# Managed Lustre CSI driver on GKE ("About the Managed Lustre CSI driver", minimum node versions).
LUSTRE_CSI = Floor(
    "1.33.2-gke.1111000",
    "the Managed Lustre CSI driver",
    "https://docs.cloud.google.com/kubernetes-engine/docs/concepts/managed-lustre",
)
# From this node version the Lustre CSI driver reaches an instance on Lustre's own port 988, so a new
# instance needs neither --gke-support-enabled nor the cluster's --enable-legacy-lustre-port, which
# GKE's API marks deprecated ("This flag is no longer required as of GKE node version
# 1.33.2-gke.4655000, unless you are connecting to a Lustre instance that has the gke-support-enabled
# flag", LustreCsiDriverConfig.enable_legacy_lustre_port).
LUSTRE_PORT_988 = Floor(
    "1.33.2-gke.4655000",
    "Lustre on port 988 without the deprecated legacy port",
    "https://docs.cloud.google.com/python/docs/reference/container/latest/google.cloud.container_v1.types.LustreCsiDriverConfig",
)
# DWS flex-start node pools ("About GPU obtainability with flex-start").
FLEX_START = Floor(
    "1.32.2-gke.1652000",
    "flex-start node pools",
    "https://docs.cloud.google.com/kubernetes-engine/docs/concepts/dws",
)


# GKE managed DRANET ("Set up GKE managed DRANET": GKE 1.34.1-gke.1829001 or later, Standard
# clusters with Dataplane V2).
DRANET = Floor(
    "1.34.1-gke.1829001",
    "managed DRANET (--accelerator-network-profile=auto)",
    "https://docs.cloud.google.com/kubernetes-engine/docs/how-to/config-managed-dranet",
)


def key(version: str) -> tuple[int, ...]:
    """A GKE version (1.33.2-gke.4655000) as a tuple that sorts as GKE orders versions."""
    m = _VERSION.fullmatch(version)
    if not m:
        raise ValueError(f"{version!r} is not a GKE version such as 1.33.2-gke.4655000")
    return tuple(int(g) for g in m.groups())


def machine_floors(accelerator: AcceleratorProfile, network_mode: str) -> list[Floor]:
    """The floors of the GPU machine and how its NICs are attached (values accelerator.minGkeVersion)."""
    own = Floor(accelerator.min_gke_version, f"{accelerator.machine_type} with GPUDirect RDMA", "generator/gke/profiles.py")
    return [own, *([DRANET] if network_mode == "dranet" else [])]


def machine_floor(accelerator: AcceleratorProfile, network_mode: str) -> str:
    return highest(machine_floors(accelerator, network_mode)).version


def floors(accelerator: AcceleratorProfile, flex_start: bool, network_mode: str = "rdma") -> list[Floor]:
    """Every floor that applies to a cluster for this accelerator (flex-start: some pool uses it)."""
    return [*machine_floors(accelerator, network_mode), LUSTRE_CSI, LUSTRE_PORT_988, *([FLEX_START] if flex_start else [])]


def highest(found: list[Floor]) -> Floor:
    return max(found, key=lambda f: key(f.version))
