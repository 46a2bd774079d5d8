"""GKE choices the values file, `validate` and the infra script share: the cluster's mode and
how GPU nodes are obtained, with what each provisioning type means for scheduling.

`TYPES` is the one table of the labels GKE puts on a GPU node of each provisioning type (which the
chart's worker pods select and Kueue's ResourceFlavors name) and of the taints such a node carries
(which the worker pods tolerate). The chart's `nemo-rl-gke.provisioningSelector` and
`-Tolerations` helpers render it (a chart test holds them to this table), `validate` compares a
group's own selectors with it, the infra script's Kueue flavors take their labels from it, and
the test bed builds its simulated nodes from it.

Sources (GKE documentation):
- Spot: nodes are labelled `cloud.google.com/gke-spot=true`; GKE taints a node it is about to
  reclaim with `cloud.google.com/impending-node-termination` ("Spot VMs", Standard).
- Flex-start (DWS): nodes are labelled `cloud.google.com/gke-flex-start=true` and tainted
  `cloud.google.com/gke-queued=true:NoSchedule` until a workload that tolerates it lands ("About
  GPU obtainability with flex-start").
- Reservations: pods select a specific reservation with `cloud.google.com/reservation-name` and
  `cloud.google.com/reservation-affinity: specific` ("Consuming reserved zonal resources"); a
  reservation shared from another project adds `cloud.google.com/reservation-project`.
- GPU nodes: GKE taints every GPU node `nvidia.com/gpu=present:NoSchedule` ("Run GPUs in GKE
  Standard node pools").
- Arm nodes (A4X's Grace CPUs): GKE taints them `kubernetes.io/arch=arm64:NoSchedule` ("Prepare an
  Arm workload for deployment", GKE docs), so only pods that tolerate the taint land there.
- Managed DRANET pools (`--accelerator-network-profile=auto`): the nodes carry
  `gke.networks.io/accelerator-network-profile=auto`, which pods select (container-engine-accelerators
  gpudirect-rdma/nccl-test-managed-rdma.yaml), and `cloud.google.com/gke-networking-dra-driver=true`,
  where GKE runs its networking-dra-driver DaemonSet ("Allocate network resources by using GKE
  managed DRANET", GKE docs).
"""

from __future__ import annotations

from dataclasses import dataclass

from generator.gke import networks

MODES = ("standard", "autopilot")
DEFAULT_MODE = "standard"
DEFAULT_PROVISIONING = "spot"

RESERVATION = "{reservation}"  # stands for the group's reservation name in a label value


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class Toleration:
    key: str
    operator: str  # Exists or Equal
    value: str = ""
    effect: str = ""  # "": every effect

    def as_dict(self) -> dict[str, str]:
        out = {"key": self.key, "operator": self.operator}
        if self.value:
            out["value"] = self.value
        if self.effect:
            out["effect"] = self.effect
        return out


GPU_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")
GPU_TOLERATION = Toleration("nvidia.com/gpu", "Exists", effect="NoSchedule")
ARCH_LABEL = "kubernetes.io/arch"
# The taint GKE puts on nodes of each CPU architecture but x86's (the profiles' cpu_arch).
ARCH_TAINTS: dict[str, Taint] = {"arm64": Taint(ARCH_LABEL, "arm64", "NoSchedule")}
DRANET_DRIVER_LABEL = "cloud.google.com/gke-networking-dra-driver"


def arch_taints(cpu_arch: str) -> tuple[Taint, ...]:
    """The taints GKE puts on a node of this CPU architecture (none on amd64)."""
    return (ARCH_TAINTS[cpu_arch],) if cpu_arch in ARCH_TAINTS else ()


def dranet_node_labels() -> dict[str, str]:
    """The labels of a node of a pool created with --accelerator-network-profile=auto."""
    return {networks.DRANET_PROFILE_LABEL: networks.DRANET_PROFILE, DRANET_DRIVER_LABEL: "true"}


@dataclass(frozen=True)
class ProvisioningType:
    key: str
    labels: tuple[tuple[str, str], ...]  # on the node, and selected by the worker pods
    taints: tuple[Taint, ...]  # on the node when GKE creates it
    tolerations: tuple[Toleration, ...]  # the worker pods', besides the GPU taint's

    def node_labels(self, reservation: str = "") -> dict[str, str]:
        return {k: v.replace(RESERVATION, reservation) for k, v in self.labels}


TYPES: dict[str, ProvisioningType] = {
    t.key: t
    for t in (
        ProvisioningType(
            "spot",
            labels=(("cloud.google.com/gke-spot", "true"),),
            taints=(),
            tolerations=(
                # An administrator may taint a Spot pool so that only Spot-aware pods land there.
                Toleration("cloud.google.com/gke-spot", "Equal", "true", "NoSchedule"),
                Toleration("cloud.google.com/impending-node-termination", "Exists"),
            ),
        ),
        ProvisioningType("on-demand", labels=(), taints=(), tolerations=()),
        ProvisioningType(
            "flex-start",
            labels=(("cloud.google.com/gke-flex-start", "true"),),
            taints=(Taint("cloud.google.com/gke-queued", "true", "NoSchedule"),),
            tolerations=(Toleration("cloud.google.com/gke-queued", "Exists", effect="NoSchedule"),),
        ),
        ProvisioningType(
            "reservation",
            labels=(("cloud.google.com/reservation-name", RESERVATION), ("cloud.google.com/reservation-affinity", "specific")),
            taints=(),
            tolerations=(),
        ),
    )
}
PROVISIONING = tuple(TYPES)
