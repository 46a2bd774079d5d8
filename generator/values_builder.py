"""Build a complete values document for one accelerator from the generator's options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import networks, releases
from .profiles import profile
from .resources import worker_sizing

PROVISIONING = ("spot", "on-demand", "flex-start", "reservation")

HEAD_CPU = 6
HEAD_MEMORY_GIB = 24
HEAD_SHM_GIB = 8


@dataclass(frozen=True)
class Options:
    gpu: str
    nodes: int = 2
    name: str = ""
    storage_claim: str = ""
    network_prefix: str = networks.DEFAULT_PREFIX
    provisioning: str = "spot"
    reservation: str = ""
    release: str = releases.DEFAULT_RELEASE


def _quantity_gib(n: int) -> str:
    return f"{n}Gi"


def accelerator_values(gpu: str) -> dict[str, Any]:
    p = profile(gpu)
    return {
        "type": p.key,
        "machineType": p.machine_type,
        "nodeLabel": p.node_label,
        "gpusPerNode": p.gpus_per_node,
        "ncclTunerConfigPath": p.nccl_tuner_config_path,
        "minGkeVersion": p.min_gke_version,
    }


def network_values(prefix: str, rdma_nics: int) -> dict[str, Any]:
    plan = networks.plan(prefix, rdma_nics)
    return {
        "mode": "rdma",
        "createObjects": True,
        "defaultNetwork": networks.DEFAULT_NETWORK,
        "gvnic": {"name": plan.gvnic.name, "vpc": plan.gvnic.vpc, "subnet": plan.gvnic.subnet},
        "rdma": [{"name": n.name, "vpc": n.vpc, "subnet": n.subnet} for n in plan.rdma],
    }


def worker_values(gpu: str) -> dict[str, Any]:
    s = worker_sizing(profile(gpu))
    return {
        "resources": {
            "requests": {"cpu": str(s.cpu), "memory": _quantity_gib(s.memory_request_gib)},
            "limits": {"cpu": str(s.cpu), "memory": _quantity_gib(s.memory_limit_gib)},
        },
        "shmSize": _quantity_gib(s.shm_gib),
        "rayStartParams": {},
        "securityContext": {},
    }


def worker_group(name: str, replicas: int, provisioning: str, reservation: str) -> dict[str, Any]:
    return {
        "name": name,
        "replicas": replicas,
        "provisioning": provisioning,
        "reservationName": reservation,
        "nodeSelector": {},
        "tolerations": [],
        "labels": {},
        "annotations": {},
    }


def build(opts: Options) -> dict[str, Any]:
    """The whole values document, in the order the chart's values.yaml presents it."""
    p = profile(opts.gpu)
    rel = releases.release(opts.release)
    if opts.provisioning not in PROVISIONING:
        raise ValueError(f"unknown provisioning {opts.provisioning!r}: choose one of {', '.join(PROVISIONING)}")
    return {
        "nameOverride": "",
        "fullnameOverride": opts.name,
        "commonLabels": {},
        "accelerator": accelerator_values(opts.gpu),
        "image": {"repository": releases.IMAGE_REPOSITORY, "tag": rel.tag, "pullPolicy": "IfNotPresent"},
        "imagePullSecrets": [],
        "rayVersion": rel.ray_version,
        "serviceAccount": {"create": True, "name": "", "annotations": {}},
        "network": network_values(opts.network_prefix, p.rdma_nics),
        "nccl": {"debug": False, "extraEnv": {}},
        "storage": {
            "mountPath": "/data",
            "existingClaim": opts.storage_claim,
            "lustre": {
                "volumeHandle": "PROJECT_ID/ZONE/nemo-rl-lustre",
                "ip": "192.0.2.10",
                "filesystem": "lfs",
                "capacity": "9000Gi",
            },
            "hfHome": "/data/huggingface",
        },
        "secrets": {"existingSecret": "", "hfTokenKey": "HF_TOKEN", "wandbApiKeyKey": "WANDB_API_KEY"},
        "extraEnv": [],
        "head": {
            "resources": {
                "requests": {"cpu": str(HEAD_CPU), "memory": _quantity_gib(HEAD_MEMORY_GIB)},
                "limits": {"cpu": str(HEAD_CPU), "memory": _quantity_gib(HEAD_MEMORY_GIB + HEAD_SHM_GIB)},
            },
            "shmSize": _quantity_gib(HEAD_SHM_GIB),
            "rayStartParams": {},
            "nodeSelector": {},
            "tolerations": [],
            "labels": {},
            "annotations": {},
        },
        "worker": worker_values(opts.gpu),
        "workerGroups": [worker_group("gpu", opts.nodes, opts.provisioning, opts.reservation)],
        "kueue": {"queueName": ""},
        "logging": {"fluentBit": fluent_bit_values()},
    }


FLUENT_BIT_CONFIG = """\
[SERVICE]
    Flush        5
    Log_Level    warn
[INPUT]
    Name         tail
    Path         /tmp/ray/session_latest/logs/*.out,/tmp/ray/session_latest/logs/*.err,/tmp/ray/session_latest/logs/*.log
    Tag          ray.*
    Refresh_Interval 5
[OUTPUT]
    Name         stdout
    Match        *
"""


def fluent_bit_values() -> dict[str, Any]:
    return {
        "enabled": False,
        "image": {"repository": "fluent/fluent-bit", "tag": "3.2.10", "pullPolicy": "IfNotPresent"},
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
        "config": FLUENT_BIT_CONFIG,
    }
