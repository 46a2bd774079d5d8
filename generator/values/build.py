"""Build a complete values document for one accelerator from the generator's options."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from generator.gke import networks, versions
from generator.gke.profiles import profile
from generator.gke.provisioning import DEFAULT_MODE, MODES, PROVISIONING, machine_default, not_offered, reservation_missing
from generator.gke.sizing import worker_sizing
from generator.nemo_rl import releases
from generator.nemo_rl import run_spec as grpo
from generator.values.worker_groups import GroupSpec, worker_nodes

HEAD_CPU = 6
HEAD_MEMORY_GIB = 24
# Ray sizes the head's object store at 30% of the pod's memory but not under 10 GB (when /dev/shm is
# smaller); an object store larger than /dev/shm goes to /tmp, the container's disk.
HEAD_SHM_GIB = 12
# Autopilot gives a container that requests no ephemeral storage 1 GiB ("Resource requests in Autopilot",
# https://docs.cloud.google.com/kubernetes-engine/docs/concepts/autopilot-resource-requests), while Ray
# writes its logs, spilled objects and compile caches to the container's disk. Google's own Autopilot
# RayCluster for B200/H200 (kubernetes-engine-samples ai-ml/verl-on-gke/ray-cluster-auto.yaml) requests
# 9Gi for the head and 1000Gi per GPU worker; the worker's is checked against the machine's local SSD.
HEAD_EPHEMERAL_GIB = 9
WORKER_EPHEMERAL_GIB = 1000
# Every capability dropped: GKE's RDMA test pods for A3 Ultra/A4 (container-engine-accelerators
# gpudirect-rdma/nccl-test.yaml) run with no securityContext and so add none; the Ray processes run as
# root and every other writer of the shared volume (launcher, preparation Job) is root too, so none of
# the runtime's default set (NET_RAW, CHOWN, DAC_OVERRIDE, ...) is needed.
RAY_CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"], "add": []}}


@dataclass(frozen=True)
class Options:
    gpu: str
    nodes: int = 2
    name: str = ""
    storage_claim: str = ""
    network_prefix: str = networks.DEFAULT_PREFIX
    existing_networks: bool = False  # cluster-scoped objects another release already owns
    provisioning: str = ""  # empty: the machine's default (gke/provisioning.machine_default)
    reservation: str = ""
    reservation_project: str = ""  # the project that shares the reservation, when not the cluster's
    release: str = releases.DEFAULT_RELEASE
    model: str = grpo.DEFAULT_MODEL
    generation_nodes: int | None = None
    max_steps: int | None = None
    prompts_per_step: int | None = None
    generations_per_prompt: int | None = None
    run_name: str | None = None
    wandb: bool = False
    secret: str | None = None  # None: nemo-rl-tokens when the model is gated or W&B is on
    mode: str = DEFAULT_MODE  # one of gke.MODES
    save_by: str | None = None  # None: 06:22:00:00 with flex-start (7-day VMs), else not set
    async_grpo: bool = False  # --async: asynchronous GRPO (run_spec.async_overrides)
    groups: tuple[GroupSpec, ...] = ()  # empty: one group "gpu" of `nodes` replicas
    kueue_queue: str = ""
    network: str = networks.DEFAULT_MODE  # one of networks.MODES


def _quantity_gib(n: int) -> str:
    return f"{n}Gi"


def accelerator_values(gpu: str, network: str = networks.DEFAULT_MODE) -> dict[str, Any]:
    p = profile(gpu)
    return {
        "type": p.key,
        "machineType": p.machine_type,
        "nodeLabel": p.node_label,
        "gpusPerNode": p.gpus_per_node,
        "ncclTunerConfigPath": p.nccl_tuner_config_path,
        "minGkeVersion": versions.machine_floor(p, network),
        "cpuArch": p.cpu_arch,
        "computeDomain": p.compute_domain,
    }


def network_values(prefix: str, rdma_nics: int, create_objects: bool = True, mode: str = "rdma") -> dict[str, Any]:
    if mode not in networks.MODES:
        raise ValueError(f"unknown network mode {mode!r}: choose one of {', '.join(networks.MODES)}")
    plan = networks.plan(prefix, rdma_nics)
    return {
        "mode": mode,
        "createObjects": create_objects,
        "defaultNetwork": networks.DEFAULT_NETWORK,
        "gvnic": {"name": plan.gvnic.name, "vpc": plan.gvnic.vpc, "subnet": plan.gvnic.subnet},
        "rdma": [{"name": n.name, "vpc": n.vpc, "subnet": n.subnet} for n in plan.rdma],
    }


def _ephemeral(resources: dict[str, Any], gib_: int) -> dict[str, Any]:
    """resources with ephemeral-storage requested and limited at gib_ (Autopilot sets limits to requests)."""
    return {kind: {**values, "ephemeral-storage": _quantity_gib(gib_)} for kind, values in resources.items()}


def worker_values(gpu: str, mode: str = DEFAULT_MODE) -> dict[str, Any]:
    s = worker_sizing(profile(gpu))
    resources = {
        "requests": {"cpu": str(s.cpu), "memory": _quantity_gib(s.memory_request_gib)},
        "limits": {"cpu": str(s.cpu), "memory": _quantity_gib(s.memory_limit_gib)},
    }
    return {
        "resources": _ephemeral(resources, WORKER_EPHEMERAL_GIB) if mode == "autopilot" else resources,
        "shmSize": _quantity_gib(s.shm_gib),
        "rayStartParams": {},
        "securityContext": {"privileged": False, **copy.deepcopy(RAY_CONTAINER_SECURITY)},
    }


def worker_group(name: str, replicas: int, provisioning: str, reservation: str, reservation_project: str = "") -> dict[str, Any]:
    return {
        "name": name,
        "replicas": replicas,
        "provisioning": provisioning,
        "reservationName": reservation,
        "reservationProject": reservation_project,
        "nodeSelector": {},
        "tolerations": [],
        "labels": {},
        "annotations": {},
    }


DEFAULT_SECRET = "nemo-rl-tokens"  # noqa: S105 - the name of a Secret, not a token
MOUNT_PATH = "/data"


def secrets_values(opts: Options) -> dict[str, Any]:
    preset = grpo.MODELS.get(opts.model)
    needs_hf = bool(preset and preset.gated)
    name = opts.secret if opts.secret is not None else (DEFAULT_SECRET if needs_hf or opts.wandb else "")
    return {
        "source": "existing" if name else "none",
        "existingSecret": name,
        "hfTokenKey": "HF_TOKEN" if name else "",
        "wandbApiKeyKey": "WANDB_API_KEY" if name and opts.wandb else "",
        "fromFiles": {"hfToken": "", "wandbApiKey": ""},
        "external": {
            "apiVersion": "external-secrets.io/v1",
            "storeName": "",
            "storeKind": "ClusterSecretStore",
            "hfTokenRemoteKey": "",
            "wandbApiKeyRemoteKey": "",
            "refreshInterval": "1h",
        },
    }


def total_nodes(opts: Options) -> int:
    return worker_nodes(g.replicas for g in groups(opts))


def run_choices(opts: Options) -> grpo.RunChoices:
    return grpo.RunChoices(
        model=opts.model,
        nodes=total_nodes(opts),
        gpus_per_node=profile(opts.gpu).gpus_per_node,
        generation_nodes=opts.generation_nodes,
        max_steps=opts.max_steps,
        prompts_per_step=opts.prompts_per_step,
        generations_per_prompt=opts.generations_per_prompt,
        run_name=opts.run_name,
        wandb=opts.wandb,
        mount_path=MOUNT_PATH,
        release=opts.release,
        async_grpo=opts.async_grpo,
        save_by=opts.save_by if opts.save_by is not None else (grpo.FLEX_START_SAVE_BY if "flex-start" in provisionings(opts) else None),
    )


def layout_notes(opts: Options) -> list[str]:
    """What the generator chose instead of refusing (a split node, another prompts per step)."""
    return grpo.layout(run_choices(opts)).notes


def launcher_values() -> dict[str, Any]:
    return {
        "follow": True,
        "maxRestarts": 3,
        "previousRuns": "wait",
        "releaseGpus": True,
        "timeouts": {"prepareSeconds": 14400, "headSeconds": 3600, "gpusSeconds": 7200},
        "runAsUser": 0,
        "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
        "nodeSelector": {},
        "tolerations": [],
    }


def prepare_values(rel: releases.NemoRlRelease) -> dict[str, Any]:
    return {
        "enabled": True,
        "checkRun": True,
        "downloadModel": True,
        "gsm8kJsonlDir": grpo.gsm8k_jsonl_dir(rel, MOUNT_PATH),
        "runAsUser": 0,
        "resources": {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"memory": "32Gi"}},
    }


def groups(opts: Options) -> tuple[GroupSpec, ...]:
    default = machine_default(profile(opts.gpu))
    if opts.groups:
        return tuple(g.for_machine(default) for g in opts.groups)
    return (GroupSpec("gpu", opts.nodes, opts.provisioning or default, opts.reservation),)


def check_provisioning(opts: Options) -> None:
    """Each group is obtained a way Google offers the machine (the profile row decides); a machine
    offered by reservation only, taken by default, needs the reservation named."""
    p = profile(opts.gpu)
    for g in groups(opts):
        if why := not_offered(p, g.provisioning):
            option = "--groups" if opts.groups else "--provisioning"
            raise ValueError(f"{option}: {why}")
    if not opts.groups and groups(opts)[0].provisioning == "reservation" and not opts.reservation:
        raise ValueError(f"--reservation: {reservation_missing(p, cite=not opts.provisioning)}")
    for g in opts.groups:  # an entry without provisioning takes the machine's
        if not g.provisioning and machine_default(p) == "reservation" and not g.reservation:
            raise ValueError(f"--groups: group {g.name}: {reservation_missing(p, group=g.name)}")


def _reservation_project(opts: Options, group: GroupSpec) -> str:
    return opts.reservation_project if group.provisioning == "reservation" else ""


def provisionings(opts: Options) -> set[str]:
    return {g.provisioning for g in groups(opts)}


def gke_values(mode: str) -> dict[str, Any]:
    if mode not in MODES:
        raise ValueError(f"unknown GKE mode {mode!r}: choose {' or '.join(MODES)}")
    return {"mode": mode, "headComputeClass": "Balanced" if mode == "autopilot" else "", "gpuComputeClass": ""}


def head_resources(mode: str) -> dict[str, Any]:
    resources = {
        "requests": {"cpu": str(HEAD_CPU), "memory": _quantity_gib(HEAD_MEMORY_GIB)},
        "limits": {"cpu": str(HEAD_CPU), "memory": _quantity_gib(HEAD_MEMORY_GIB + HEAD_SHM_GIB)},
    }
    return _ephemeral(resources, HEAD_EPHEMERAL_GIB) if mode == "autopilot" else resources


def build(opts: Options) -> dict[str, Any]:
    """The whole values document, in the order the chart's values.yaml presents it."""
    p = profile(opts.gpu)
    rel = releases.release(opts.release)
    if opts.provisioning and opts.provisioning not in PROVISIONING:
        raise ValueError(f"unknown provisioning {opts.provisioning!r}: choose one of {', '.join(PROVISIONING)}")
    check_provisioning(opts)
    spec = grpo.build_spec(run_choices(opts), rel)
    return {
        "nameOverride": "",
        "fullnameOverride": opts.name,
        "commonLabels": {},
        "accelerator": accelerator_values(opts.gpu, opts.network),
        "gke": gke_values(opts.mode),
        "image": {
            "repository": releases.IMAGE_REPOSITORY,
            "tag": rel.tag,
            "pullPolicy": "IfNotPresent",
            "digest": "",
            "preload": {"diskImage": "", "project": ""},
        },
        "imagePullSecrets": [],
        "rayVersion": rel.ray_version,
        "serviceAccount": {"create": True, "name": "", "annotations": {}},
        "network": network_values(opts.network_prefix, p.rdma_nics, create_objects=not opts.existing_networks, mode=opts.network),
        "nccl": {"debug": False, "extraEnv": {}},
        "storage": {
            "mountPath": MOUNT_PATH,
            "existingClaim": opts.storage_claim,
            "lustre": {
                "volumeHandle": "PROJECT_ID/ZONE/nemo-rl-lustre",
                "ip": "192.0.2.10",
                "filesystem": "lfs",
                "capacity": "9000Gi",
            },
            "hfHome": f"{MOUNT_PATH}/huggingface",
        },
        "secrets": secrets_values(opts),
        "access": {"networkPolicy": {"enabled": True, "allowFrom": []}},
        "dataSafety": {"podDisruptionBudget": True},
        "extraEnv": [],
        "head": {
            "resources": head_resources(opts.mode),
            "shmSize": _quantity_gib(HEAD_SHM_GIB),
            "rayStartParams": {},
            "securityContext": copy.deepcopy(RAY_CONTAINER_SECURITY),
            "nodeSelector": {},
            "tolerations": [],
            "labels": {},
            "annotations": {},
        },
        "worker": worker_values(opts.gpu, opts.mode),
        "workerGroups": [
            worker_group(g.name, g.replicas, g.provisioning, g.reservation, _reservation_project(opts, g)) for g in groups(opts)
        ],
        "grpo": spec,
        "launcher": launcher_values(),
        "prepare": prepare_values(rel),
        "kueue": {
            "enabled": bool(opts.kueue_queue),
            "queueName": opts.kueue_queue,
            "version": "",
            "topology": {"mode": "none", "level": "cloud.google.com/gce-topology-block"},
        },
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
        # A CPU limit too: the sidecar shares the pod with Ray, whose CPUs KubeRay counts from the Ray container alone.
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}},
        "config": FLUENT_BIT_CONFIG,
    }
