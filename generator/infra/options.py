"""The infra script's options (`python -m generator infra`), and the reservation names they carry."""

from __future__ import annotations

from dataclasses import dataclass

from generator.gke import networks
from generator.gke.profiles import profile
from generator.gke.provisioning import DEFAULT_MODE, DEFAULT_PROVISIONING, gpu_pool_name
from generator.values.worker_groups import GroupSpec

# Google's NCCL RDMA installers, pinned by commit of GoogleCloudPlatform/container-engine-accelerators:
# 2da1c92 (2026-05-06, "Removed --install-nccl from default and a4x installers") is the newest change
# of both manifests; at it both run the gIB image nccl-plugin-gib:v1.1.1, the Standard one installs
# the gIB NCCL plugin only (NCCL comes from the NeMo RL image), the Autopilot one also NCCL. The
# commit before it, 155bfa49 (2026-03-09), had the Standard installer copy NCCL too.
RDMA_INSTALLER_COMMIT = "2da1c92ff7bd772a2c833710bb6c21dcfe6dfaae"
GIB_VERSION = "v1.1.1"  # the gIB image both manifests run at RDMA_INSTALLER_COMMIT
GIB_IMAGE = "us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib"
DEFAULT_GROUP = "gpu"
TOPOLOGY_MODES = ("none", "preferred", "required")
NETWORK_MODES = ("rdma", "dranet")  # the modes with RDMA NICs (networks.MODES but tcp)


@dataclass(frozen=True)
class InfraOptions:
    gpu: str
    project: str
    region: str
    zone: str
    mode: str = DEFAULT_MODE
    nodes: int = 2
    provisioning: str = DEFAULT_PROVISIONING
    reservation: str = ""
    groups: tuple[GroupSpec, ...] = ()  # empty: one group "gpu" of `nodes`
    cluster: str = "nemo-rl"
    network: str = networks.DEFAULT_NETWORK  # the cluster's VPC (eth0) and Managed Lustre's
    network_prefix: str = networks.DEFAULT_PREFIX
    # How the GPU workers' RDMA NICs are attached: rdma (multi-networking: the gVNIC and RoCE VPCs,
    # --additional-node-network) or dranet (GKE managed DRANET: --accelerator-network-profile=auto).
    network_mode: str = "rdma"
    lustre_capacity_gib: int = 9000
    lustre_throughput: int = 1000
    namespace: str = "nemo-rl"
    preload_image_disk: str = ""  # image name or projects/P/global/images/NAME
    kueue: bool = False
    kueue_queue: str = "gpu-queue"
    topology: str = "none"  # Kueue topology-aware scheduling of the GPU workers: none|preferred|required
    rdma_installer_commit: str = RDMA_INSTALLER_COMMIT
    gib_version: str = GIB_VERSION
    values_out: str = "values-infra.yaml"
    dry_run: bool = False  # the script's default mode

    @property
    def dranet(self) -> bool:
        return self.network_mode == "dranet"

    @property
    def preload_image(self) -> str:
        disk = self.preload_image_disk
        if not disk or disk.startswith("projects/"):
            return disk
        return f"projects/{self.project}/global/images/{disk}"

    @property
    def worker_groups(self) -> tuple[GroupSpec, ...]:
        return self.groups or (GroupSpec(DEFAULT_GROUP, self.nodes, self.provisioning, self.reservation),)

    def pool_name(self, group: GroupSpec) -> str:
        """gpu-<gpu> for the one default group (the name of earlier versions), gpu-<gpu>-<group> else."""
        return gpu_pool_name(profile(self.gpu).key, group.name if self.groups else "")


def reservation_name(reservation: str) -> str:
    """R of projects/P/reservations/R[/reservationBlocks/B], or the name as given."""
    parts = reservation.split("/")
    return parts[3] if len(parts) >= 4 and parts[0] == "projects" and parts[2] == "reservations" else reservation


def reservation_project(reservation: str) -> str:
    """P of projects/P/reservations/R[...], or "" for a bare name (the cluster's project)."""
    parts = reservation.split("/")
    return parts[1] if len(parts) >= 4 and parts[0] == "projects" else ""
