"""Accelerator profiles: the one table of per-GPU facts (machine, labels, NCCL tuner, sizes).

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
    ),
}

DEFAULT_ACCELERATOR = "h200"


def profile(key: str) -> AcceleratorProfile:
    try:
        return PROFILES[key]
    except KeyError:
        choices = ", ".join(PROFILES)
        raise ValueError(f"unknown accelerator {key!r}: choose one of {choices}") from None
