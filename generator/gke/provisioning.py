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
from generator.gke.profiles import AcceleratorProfile

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


# --- the nodes of a pool, as GKE registers them -----------------------------------------------
# Kubernetes' well-known labels (kubernetes.io/docs/reference/labels-annotations-taints/) and GKE's
# node labels ("About node labels", GKE documentation). A value of None stands for one the cluster
# decides (a zone, a host name): any value matches it.

CPU_POOL_NAME = "default-pool"  # `gcloud container clusters create` names the cluster's first pool so
GPU_DRIVER_VERSION = "latest"  # the infra script's --accelerator gpu-driver-version (generator/infra/steps.py)
ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
DRIVER_LABEL = "cloud.google.com/gke-gpu-driver-version"
NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"
RESERVATION_PROJECT_LABEL = "cloud.google.com/reservation-project"  # a reservation shared from another project


def gpu_pool_name(gpu_key: str, group: str = "") -> str:
    """The GPU node pool `infra` makes: gpu-<gpu> for its one default group (the name of earlier
    versions), gpu-<gpu>-<group> for a group given with --group."""
    return f"gpu-{gpu_key}-{group}" if group else f"gpu-{gpu_key}"


ANY_VALUE_LABELS = (
    "kubernetes.io/hostname",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "cloud.google.com/gce-topology-block",
    "cloud.google.com/gce-topology-subblock",
    "cloud.google.com/gce-topology-host",
)


def node_labels(machine_type: str, pool: str, arch: str = "amd64") -> dict[str, str]:
    """The labels every GKE node carries, from its machine type and pool (those the cluster picks aside)."""
    return {
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": arch,
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": arch,
        "node.kubernetes.io/instance-type": machine_type,
        "beta.kubernetes.io/instance-type": machine_type,
        NODE_POOL_LABEL: pool,
        "cloud.google.com/machine-family": machine_type.split("-", 1)[0],
        "cloud.google.com/gke-os-distribution": "cos",
        "cloud.google.com/gke-boot-disk": "pd-balanced",
    }


def gpu_node_labels(accelerator_label: str, provisioning: str, reservation: str = "") -> dict[str, str]:
    """What a GPU node adds to `node_labels`: its accelerator, driver and provisioning type's labels."""
    return {ACCELERATOR_LABEL: accelerator_label, DRIVER_LABEL: GPU_DRIVER_VERSION} | TYPES[provisioning].node_labels(reservation)


def gpu_pool_labels(
    accelerator_label: str, provisioning: str, reservation: str = "", project: str = "", dranet: bool = False
) -> dict[str, str]:
    """`gpu_node_labels`, with the reservation's project when it is shared from another
    (`RESERVATION_PROJECT_LABEL`) and the labels of a pool made with --accelerator-network-profile=auto
    (`dranet_node_labels`): what the infra script's GPU pools carry (its overlay's gke.nodePools)
    and what validate's scheduling model derives from the values."""
    labels = gpu_node_labels(accelerator_label, provisioning, reservation)
    if provisioning == "reservation" and project:
        labels[RESERVATION_PROJECT_LABEL] = project
    return labels | (dranet_node_labels() if dranet else {})


def gpu_node_taints(provisioning: str, cpu_arch: str = "amd64") -> list[Taint]:
    """The taints of a GPU node of this provisioning type and CPU architecture: the GPU taint,
    the type's, then the architecture's (`arch_taints`)."""
    return [GPU_TAINT, *TYPES[provisioning].taints, *arch_taints(cpu_arch)]


def machine_default(p: AcceleratorProfile) -> str:
    """How this machine's GPU nodes are obtained when no provisioning is given: the first the
    profile row offers (Spot for a row that offers every type)."""
    return p.provisioning[0] if p.provisioning else DEFAULT_PROVISIONING


def not_offered(p: AcceleratorProfile, provisioning: str) -> str:
    """Why this machine cannot be obtained this way ("" when it can), with the row's source."""
    if p.offers(provisioning):
        return ""
    return f"{p.machine_type} ({p.key}) is offered as {', '.join(p.provisioning)} only, not {provisioning} ({p.provisioning_source})"


def reservation_missing(p: AcceleratorProfile, cite: bool = True, group: str = "") -> str:
    """Why --reservation (or, for a `--groups` entry, its RESERVATION part) is needed for this
    machine's default reservation pool (with the row's source when `cite`)."""
    where = f" ({p.provisioning_source})" if cite else ""
    how = f"give the group as {group}=N:reservation:RESERVATION" if group else "name it with --reservation NAME"
    return f"{p.machine_type} ({p.key}) nodes come from a reservation{where}: {how}"


def example_reservation(p: AcceleratorProfile) -> str:
    """The reservation the repository's generated files and the test bed name for a machine offered
    by reservation only (scripts/sync.sh's scenarios and examples, testbed.bed.default_infra)."""
    return f"{p.key}-reservation"


def placeholder_reservation(p: AcceleratorProfile) -> str | None:
    """The reservation to name where a tool writes a values file for this machine without the
    user's (scripts/setup.sh, scripts/sync.sh): example_reservation for a machine whose nodes
    default to a reservation (A4X), which the generator refuses to write without one; None else."""
    return example_reservation(p) if machine_default(p) == "reservation" else None
