"""Accelerator profiles: the one table of per-GPU facts (machine, labels, CPU architecture, NIC
layout, gIB installer, NCCL tuner, sizes, what the machine needs of DRA).

Everything accelerator-dependent that the values file, `validate` and the infra script need
comes from here; templates only read what the generator wrote into values. Adding a profile:
add it to PROFILES and run scripts/sync.sh (it writes the schema's enums and the chart's
generated values files); every command reads the table when it runs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AcceleratorProfile:
    key: str
    display_name: str
    machine_type: str
    node_label: str
    gpus_per_node: int
    gpu_memory_gb: int
    host_vcpus: int
    host_memory_gib: int
    local_ssd_gb: int
    nccl_tuner_config_path: str
    min_gke_version: str
    rdma_nics: int
    shm_size_gib: int
    # Compute Engine's regional quota metric of the GPU (as `gcloud compute regions describe`
    # reports it); Spot and flex-start VMs draw on PREEMPTIBLE_<metric>. "": NVIDIA_<KEY>_GPUS.
    gpu_quota_metric: str = ""
    # The host CPU's architecture (the node label kubernetes.io/arch). GKE taints Arm nodes
    # kubernetes.io/arch=arm64:NoSchedule, so pods for them select and tolerate it.
    cpu_arch: str = "amd64"
    # Google's NCCL RDMA installer DaemonSet for a Standard cluster (container-engine-accelerators
    # gpudirect-rdma/<file>); Autopilot's is nccl-rdma-installer-autopilot.yaml for every machine.
    gib_installer: str = "nccl-rdma-installer.yaml"
    # Cross-node NVLink (GB200 NVL72): every GPU worker claims the channel of one ComputeDomain of
    # NVIDIA's DRA driver. GKE's DRA does not run on Autopilot.
    compute_domain: bool = False
    # GKE managed DRANET attaches this machine's RDMA NICs (network.mode: dranet).
    dranet: bool = True
    # How Google offers this machine's capacity (workerGroups[].provisioning), the default first;
    # empty: every type (gke/provisioning.TYPES), Spot by default.
    provisioning: tuple[str, ...] = ()
    # Where that restriction is written.
    provisioning_source: str = ""
    # Where the row's facts are written (the machine, GKE's guide for it, Google's gIB installer):
    # the docs' accelerator table (docs/install-on-gke.md, scripts/sync.sh) lists them.
    sources: tuple[str, ...] = ()

    @property
    def autopilot(self) -> bool:
        """Autopilot runs this machine: not when it needs DRA (GKE's DRA docs: not on Autopilot)."""
        return not self.compute_domain

    def offers(self, provisioning: str) -> bool:
        """Google offers this machine's capacity this way (every type when the row names none)."""
        return not self.provisioning or provisioning in self.provisioning

    @property
    def tuner_file(self) -> str:
        return self.nccl_tuner_config_path.rsplit("/", 1)[-1] if self.nccl_tuner_config_path else ""

    @property
    def quota_metric(self) -> str:
        return self.gpu_quota_metric or f"NVIDIA_{self.key.upper()}_GPUS"


PROFILES: dict[str, AcceleratorProfile] = {
    "b200": AcceleratorProfile(
        key="b200",
        display_name="NVIDIA B200",
        machine_type="a4-highgpu-8g",
        node_label="nvidia-b200",
        gpus_per_node=8,
        gpu_memory_gb=180,
        host_vcpus=224,
        host_memory_gib=3968,
        local_ssd_gb=12000,
        nccl_tuner_config_path="/usr/local/gib/configs/tuner_config_a4.txtpb",
        min_gke_version="1.32.4-gke.1236000",
        rdma_nics=8,
        shm_size_gib=240,
        gpu_quota_metric="NVIDIA_B200_GPUS",
        sources=(
            "https://cloud.google.com/compute/docs/accelerator-optimized-machines#a4-vms",
            "https://cloud.google.com/ai-hypercomputer/docs/create/gke-ai-hypercompute-custom",
            "https://github.com/GoogleCloudPlatform/container-engine-accelerators/blob/master/gpudirect-rdma/nccl-rdma-installer.yaml",
        ),
    ),
    "h200": AcceleratorProfile(
        key="h200",
        display_name="NVIDIA H200 141GB",
        machine_type="a3-ultragpu-8g",
        node_label="nvidia-h200-141gb",
        gpus_per_node=8,
        gpu_memory_gb=141,
        host_vcpus=224,
        host_memory_gib=2952,
        local_ssd_gb=12000,
        nccl_tuner_config_path="/usr/local/gib/configs/tuner_config_a3u.txtpb",
        min_gke_version="1.31.7-gke.1265000",
        rdma_nics=8,
        shm_size_gib=240,
        gpu_quota_metric="NVIDIA_H200_GPUS",
        sources=(
            "https://cloud.google.com/compute/docs/accelerator-optimized-machines#a3-vms",
            "https://cloud.google.com/ai-hypercomputer/docs/create/gke-ai-hypercompute-custom",
            "https://github.com/GoogleCloudPlatform/container-engine-accelerators/blob/master/gpudirect-rdma/nccl-rdma-installer.yaml",
        ),
    ),
    # A4X: container-engine-accelerators gpudirect-rdma/nccl-test-imex-a4x.yaml (4 GPUs, arm64,
    # rdma-0..rdma-3, the ComputeDomain channel claim) and nccl-rdma-installer-a4x.yaml (the arm64
    # gIB image); AI-Hypercomputer/gpu-recipes training/a4x/*/workload-job.yaml (gvnic-1 on eth1 and
    # rdma-0..3 on eth2..eth5, ComputeDomain per job). No public A4X tuner file (the recipes point at
    # the A3 Ultra one): empty, so gIB's set_nccl_env.sh chooses. GKE floor of the recipes'
    # clusters: 1.33.4-gke.1036000. Host (Compute Engine accelerator-optimized machine docs, not checked
    # against a source here): 140 Arm vCPUs, 884 GB memory, 12,000 GiB local SSD, 186 GB HBM per GPU.
    "gb200": AcceleratorProfile(
        key="gb200",
        display_name="NVIDIA GB200",
        machine_type="a4x-highgpu-4g",
        node_label="nvidia-gb200",
        gpus_per_node=4,
        gpu_memory_gb=186,
        host_vcpus=140,
        host_memory_gib=884,
        local_ssd_gb=12000,
        nccl_tuner_config_path="",
        min_gke_version="1.33.4-gke.1036000",
        rdma_nics=4,
        shm_size_gib=240,
        gpu_quota_metric="NVIDIA_GB200_GPUS",
        cpu_arch="arm64",
        gib_installer="nccl-rdma-installer-a4x.yaml",
        compute_domain=True,
        # A4X capacity comes from future reservations in AI Hypercomputer only: flex-start, Spot and
        # calendar-mode reservations are for other GPU machines.
        provisioning=("reservation",),
        provisioning_source=(
            'Google Cloud, AI Hypercomputer "Consumption options" (https://cloud.google.com/ai-hypercomputer/docs/consumption-models):'
            " flex-start and Spot serve any GPU machine except A4X"
        ),
        sources=(
            "https://cloud.google.com/compute/docs/accelerator-optimized-machines#a4x-vms",
            "https://docs.cloud.google.com/ai-hypercomputer/docs/create/gke-ai-hypercompute-custom-a4x",
            "https://github.com/GoogleCloudPlatform/container-engine-accelerators/blob/master/gpudirect-rdma/nccl-rdma-installer-a4x.yaml",
            "https://github.com/AI-Hypercomputer/gpu-recipes/tree/main/training/a4x",
            "https://cloud.google.com/ai-hypercomputer/docs/consumption-models",
        ),
    ),
}

DEFAULT_ACCELERATOR = "h200"


def profile(key: str) -> AcceleratorProfile:
    try:
        return PROFILES[key]
    except KeyError:
        choices = ", ".join(PROFILES)
        raise ValueError(f"unknown accelerator {key!r}: choose one of {choices}") from None
