"""Write tests/data/invalid/*.yaml: generated values files with exactly one rule broken.

    .venv/bin/python tests/data/make_corpus.py

Each file starts with `# rule:` (what is broken), `# expect:` (the key path the error must
name) and `# schema:` (true when the schema alone rejects it, so `helm template` must too).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from generator.core.files import dump_values  # noqa: E402
from generator.values.build import Options, build  # noqa: E402

OUT = Path(__file__).resolve().parent / "invalid"
# A made-up token of Hugging Face's shape (hf_ and 34 characters); `validate` must never print it.
PASTED_TOKEN = "hf_" + "0000EXAMPLE0000NOT0000A0000TOKEN00"
VALID_OUT = Path(__file__).resolve().parent / "valid"


def set_override(v: dict[str, Any], key: str, value: str, prefix: str = "") -> None:
    ov = v["grpo"]["overrides"]
    for i, arg in enumerate(ov):
        if arg.lstrip("+").split("=", 1)[0] == key:
            ov[i] = f"{prefix}{key}={value}"
            return
    ov.append(f"{prefix}{key}={value}")


def drop_override(v: dict[str, Any], key: str) -> None:
    v["grpo"]["overrides"] = [a for a in v["grpo"]["overrides"] if a.lstrip("+").split("=", 1)[0] != key]


def group(name: str, replicas: int = 1, provisioning: str = "spot", **extra: Any) -> dict[str, Any]:
    return {"name": name, "replicas": replicas, "provisioning": provisioning, **extra}


Mutation = Callable[[dict[str, Any]], None]
# name: (rule, expected key, schema-level, generator options, mutation)
CASES: dict[str, tuple[str, str, bool, dict[str, Any], Mutation]] = {
    # accelerator consistency
    "acc-machine-type": (
        "machine type of the other accelerator",
        "accelerator.machineType",
        False,
        {},
        lambda v: v["accelerator"].update(machineType="a4-highgpu-8g"),
    ),
    "acc-node-label": (
        "node label of the other accelerator",
        "accelerator.nodeLabel",
        False,
        {"gpu": "b200"},
        lambda v: v["accelerator"].update(nodeLabel="nvidia-h200-141gb"),
    ),
    "acc-tuner": (
        "A4 tuner file on an H200 node",
        "accelerator.ncclTunerConfigPath",
        False,
        {},
        lambda v: v["accelerator"].update(ncclTunerConfigPath="/usr/local/gib/configs/tuner_config_a4.txtpb"),
    ),
    "acc-gke-version": (
        "minimum GKE version of the other accelerator",
        "accelerator.minGkeVersion",
        False,
        {"gpu": "b200"},
        lambda v: v["accelerator"].update(minGkeVersion="1.31.7-gke.1265000"),
    ),
    "acc-gpus": (
        "4 GPUs per worker on an 8-GPU machine",
        "accelerator.gpusPerNode",
        False,
        {},
        lambda v: v["accelerator"].update(gpusPerNode=4),
    ),
    "acc-type-enum": ("unknown accelerator", "accelerator.type", True, {}, lambda v: v["accelerator"].update(type="a100")),
    # resources
    "res-worker-cpu": (
        "220 CPUs on a node with ~223 allocatable minus DaemonSets",
        "worker.resources.requests.cpu",
        False,
        {},
        lambda v: v["worker"]["resources"]["requests"].update(cpu="220"),
    ),
    "res-worker-memory": (
        "memory + shm above allocatable",
        "worker.resources.requests.memory",
        False,
        {},
        lambda v: v["worker"]["resources"]["requests"].update(memory="2800Gi"),
    ),
    "res-worker-limit-shm": (
        "memory limit without room for /dev/shm",
        "worker.resources.limits.memory",
        False,
        {},
        lambda v: v["worker"]["resources"]["limits"].update(memory="2500Gi"),
    ),
    "res-worker-limit-cpu": (
        "CPU limit below the request",
        "worker.resources.limits.cpu",
        False,
        {},
        lambda v: v["worker"]["resources"]["limits"].update(cpu="100"),
    ),
    "res-head-limit-shm": (
        "head memory limit without room for /dev/shm",
        "head.resources.limits.memory",
        False,
        {},
        lambda v: v["head"]["resources"]["limits"].update(memory="24Gi"),
    ),
    "res-head-zero-ray-cpu-v05": (
        "head with 0 Ray CPUs on v0.5.0",
        "head.rayStartParams.num-cpus",
        False,
        {"release": "v0.5.0"},
        lambda v: v["head"]["rayStartParams"].update({"num-cpus": "0"}),
    ),
    "res-head-half-cpu-v06": (
        "head with 0.5 Ray CPUs on v0.6.0",
        "head.resources.limits.cpu",
        False,
        {"release": "v0.6.0"},
        lambda v: (v["head"]["resources"]["requests"].update(cpu="500m"), v["head"]["resources"]["limits"].update(cpu="500m")),
    ),
    "res-colocated-cpus": (
        "8 worker CPUs for colocated generation (needs 2 per GPU)",
        "worker.resources.limits.cpu",
        False,
        {"model": "qwen2.5-1.5b", "nodes": 1},
        lambda v: (v["worker"]["resources"]["requests"].update(cpu="8"), v["worker"]["resources"]["limits"].update(cpu="8")),
    ),
    # NeMo RL reserves {CPU: 1} on every node after its placement groups (nemo_rl/utils/venvs.py
    # create_local_venv_on_each_node, STRICT_SPREAD, no timeout): 2 x GPUs + 1 colocated, GPUs + 1 dedicated.
    "res-colocated-cpus-no-venv-room": (
        "16 Ray CPUs for colocated generation on 8 GPUs (bundles take 16, the venv reservation 1 more)",
        "worker.rayStartParams.num-cpus",
        False,
        {"model": "qwen2.5-1.5b", "nodes": 1},
        lambda v: v["worker"]["rayStartParams"].update({"num-cpus": "16"}),
    ),
    "res-dedicated-cpus-no-venv-room": (
        "8 Ray CPUs with dedicated generation on 8 GPUs (bundles take 8, the venv reservation 1 more)",
        "worker.rayStartParams.num-cpus",
        False,
        {},
        lambda v: v["worker"]["rayStartParams"].update({"num-cpus": "8"}),
    ),
    "res-no-memory-request": (
        "worker memory request removed (null deletes the chart default)",
        "worker.resources.requests.memory",
        False,
        {},
        lambda v: v["worker"]["resources"]["requests"].update(memory=None),
    ),
    # networks
    "net-rdma-count": ("7 RDMA networks on an 8-NIC machine", "network.rdma", False, {}, lambda v: v["network"]["rdma"].pop()),
    "net-duplicate-rdma-name": (
        "two RDMA NICs on one Network",
        "network.rdma[1].name",
        False,
        {},
        lambda v: v["network"]["rdma"][1].update(name="rdma-0"),
    ),
    "net-gvnic-name-reused": (
        "an RDMA NIC named like the gVNIC network",
        "network.rdma[0].name",
        False,
        {},
        lambda v: v["network"]["rdma"][0].update(name="gvnic-1"),
    ),
    "net-gvnic-is-default": (
        "gVNIC network named like the default network",
        "network.gvnic.name",
        False,
        {},
        lambda v: v["network"]["gvnic"].update(name="default"),
    ),
    "net-vpc-starts-with-digit": (
        "a VPC name Compute Engine refuses (it must start with a letter)",
        "network.rdma[2].vpc",
        True,
        {},
        lambda v: v["network"]["rdma"][2].update(vpc="1234"),
    ),
    "net-duplicate-subnet": (
        "two RDMA NICs on one subnet",
        "network.rdma[3].subnet",
        False,
        {},
        lambda v: v["network"]["rdma"][3].update(subnet=v["network"]["rdma"][2]["subnet"]),
    ),
    "net-rdma-on-gvnic-vpc": (
        "an RDMA subnet on the gVNIC VPC",
        "network.rdma[0].vpc",
        False,
        {},
        lambda v: v["network"]["rdma"][0].update(vpc=v["network"]["gvnic"]["vpc"]),
    ),
    "net-tcp-with-interfaces": (
        "interface annotation in tcp mode",
        "workerGroups[0].annotations",
        False,
        {},
        lambda v: (v["network"].update(mode="tcp"), v["workerGroups"][0].update(annotations={"networking.gke.io/interfaces": "[]"})),
    ),
    "net-tcp-with-gib": (
        "NCCL_NET=gIB in tcp mode",
        "nccl.extraEnv.NCCL_NET",
        False,
        {},
        lambda v: (v["network"].update(mode="tcp"), v["nccl"]["extraEnv"].update(NCCL_NET="gIB")),
    ),
    "net-mode-enum": ("unknown network mode", "network.mode", True, {}, lambda v: v["network"].update(mode="infiniband")),
    # NeMo RL start-up rules
    "nemo-num-nodes": (
        "cluster.num_nodes above the worker replicas",
        "grpo.overrides[cluster.num_nodes]",
        False,
        {},
        lambda v: set_override(v, "cluster.num_nodes", "3"),
    ),
    "nemo-replicas-above-run": (
        "worker replicas above cluster.num_nodes (idle GPUs)",
        "grpo.overrides[cluster.num_nodes]",
        False,
        {},
        lambda v: v["workerGroups"][0].update(replicas=3),
    ),
    "nemo-gpus-per-node": (
        "cluster.gpus_per_node 4 on 8-GPU workers",
        "grpo.overrides[cluster.gpus_per_node]",
        False,
        {},
        lambda v: set_override(v, "cluster.gpus_per_node", "4"),
    ),
    "nemo-generation-all-nodes": (
        "generation nodes equal to all nodes",
        "grpo.overrides[policy.generation.colocated.resources.num_nodes]",
        False,
        {},
        lambda v: set_override(v, "policy.generation.colocated.resources.num_nodes", "2"),
    ),
    "nemo-generation-gpus-multi-node": (
        "generation GPUs per node below the node's on several nodes",
        "grpo.overrides[policy.generation.colocated.resources.gpus_per_node]",
        False,
        {},
        lambda v: set_override(v, "policy.generation.colocated.resources.gpus_per_node", "4"),
    ),
    "nemo-generation-single-node": (
        "all 8 GPUs of a single node for generation",
        "grpo.overrides[policy.generation.colocated.resources.gpus_per_node]",
        False,
        {"model": "qwen2.5-1.5b", "nodes": 1},
        lambda v: (
            set_override(v, "policy.generation.colocated.enabled", "false"),
            set_override(v, "policy.generation.colocated.resources.gpus_per_node", "8"),
        ),
    ),
    "nemo-train-tp": (
        "training TP 3 does not divide 8 GPUs",
        "grpo.overrides[policy.dtensor_cfg.tensor_parallel_size]",
        False,
        {},
        lambda v: set_override(v, "policy.dtensor_cfg.tensor_parallel_size", "3"),
    ),
    "nemo-vllm-tp": (
        "vLLM TP 16 above the GPUs of a node",
        "grpo.overrides[policy.generation.vllm_cfg.tensor_parallel_size]",
        False,
        {},
        lambda v: set_override(v, "policy.generation.vllm_cfg.tensor_parallel_size", "16"),
    ),
    "nemo-global-batch": (
        "global batch 500 does not divide 1024 samples",
        "grpo.overrides[policy.train_global_batch_size]",
        False,
        {},
        lambda v: set_override(v, "policy.train_global_batch_size", "500"),
    ),
    "nemo-global-batch-dp": (
        "global batch not divisible by the data-parallel size",
        "grpo.overrides[policy.train_global_batch_size]",
        False,
        {"model": "qwen2.5-1.5b", "nodes": 1},
        lambda v: set_override(v, "policy.train_global_batch_size", "4"),
    ),
    "nemo-micro-batch": (
        "per-rank batch not divisible by the micro-batch",
        "grpo.overrides[policy.train_micro_batch_size]",
        False,
        {},
        lambda v: set_override(v, "policy.train_micro_batch_size", "3"),
    ),
    "nemo-tp-logprob-v07": (
        "TP 8 with logprob batch != micro batch on v0.7.0",
        "grpo.overrides[policy.logprob_batch_size]",
        False,
        {},
        lambda v: set_override(v, "policy.logprob_batch_size", "2"),
    ),
    "nemo-seq-divisible": (
        "sequence divisibility 4 with TP 8",
        "grpo.overrides[policy.make_sequence_length_divisible_by]",
        False,
        {},
        lambda v: set_override(v, "policy.make_sequence_length_divisible_by", "4"),
    ),
    "nemo-on-policy-ratio-batch": (
        "force_on_policy_ratio with a global batch below the samples per step (grpo.setup asserts equality)",
        "grpo.overrides[policy.train_global_batch_size]",
        False,
        {},
        lambda v: v["grpo"].update(extraOverrides=["loss_fn.force_on_policy_ratio=true"]),
    ),
    "nemo-ray-version": ("Ray 2.49.2 with the v0.7.0 image", "rayVersion", False, {}, lambda v: v.update(rayVersion="2.49.2")),
    "nemo-entrypoint": (
        "v0.5.0's script on v0.7.0",
        "grpo.entrypoint",
        False,
        {},
        lambda v: v["grpo"].update(entrypoint="examples/run_grpo_math.py"),
    ),
    "nemo-nested-data-on-v05": (
        "nested data key on v0.5.0",
        "grpo.overrides[data.train.dataset_name]",
        False,
        {"release": "v0.5.0"},
        lambda v: set_override(v, "data.train.dataset_name", "gsm8k"),
    ),
    "nemo-flat-data-on-v07": (
        "flat data key on v0.7.0",
        "grpo.overrides[data.dataset_name]",
        False,
        {},
        lambda v: set_override(v, "data.dataset_name", "ResponseDataset"),
    ),
    "nemo-reward-zero": (
        "the sample's output_key=answer (reward always 0)",
        "grpo.overrides[data.output_key]",
        False,
        {"release": "v0.5.0"},
        lambda v: set_override(v, "data.output_key", "answer", "+"),
    ),
    "nemo-jsonl-path": (
        "v0.5.0 training data not written by the preparation Job",
        "grpo.overrides[data.train_data_path]",
        False,
        {"release": "v0.5.0"},
        lambda v: set_override(v, "data.train_data_path", "/data/other/train.jsonl", "+"),
    ),
    "nemo-missing-num-nodes": (
        "cluster.num_nodes left to the recipe",
        "grpo.overrides[cluster.num_nodes]",
        False,
        {},
        lambda v: drop_override(v, "cluster.num_nodes"),
    ),
    "nemo-duplicate-override": (
        "a key set twice",
        "grpo.overrides[grpo.max_num_steps]",
        False,
        {},
        lambda v: v["grpo"]["overrides"].append("grpo.max_num_steps=10"),
    ),
    "nemo-override-syntax": (
        "an override with a space (breaks the command)",
        "grpo.overrides[3]",
        True,
        {},
        lambda v: v["grpo"]["overrides"].__setitem__(3, "grpo.max_num_steps= 300"),
    ),
    # storage
    "sto-hf-home-local": (
        "HF_HOME outside the shared volume",
        "storage.hfHome",
        False,
        {},
        lambda v: v["storage"].update(hfHome="/root/.cache/huggingface"),
    ),
    "sto-hf-home-is-mount": ("HF_HOME is the mount itself", "storage.hfHome", False, {}, lambda v: v["storage"].update(hfHome="/data")),
    "sto-checkpoints-local": (
        "checkpoints inside the pod",
        "grpo.overrides[checkpointing.checkpoint_dir]",
        False,
        {},
        lambda v: set_override(v, "checkpointing.checkpoint_dir", "/opt/nemo-rl/results/run"),
    ),
    "sto-logs-relative": (
        "relative log folder",
        "grpo.overrides[logger.log_dir]",
        False,
        {},
        lambda v: set_override(v, "logger.log_dir", "logs"),
    ),
    "sto-lustre-capacity": (
        "Lustre below 9000 GiB",
        "storage.lustre.capacity",
        False,
        {},
        lambda v: v["storage"]["lustre"].update(capacity="4800Gi"),
    ),
    "sto-jsonl-dir": (
        "GSM8K JSONL outside the shared volume",
        "prepare.gsm8kJsonlDir",
        False,
        {"release": "v0.5.0"},
        lambda v: v["prepare"].update(gsm8kJsonlDir="/tmp/gsm8k"),
    ),
    "sto-mount-relative": ("relative mount path", "storage.mountPath", True, {}, lambda v: v["storage"].update(mountPath="data")),
    # names
    "name-too-long": ("RayCluster name over 53 characters", "fullnameOverride", True, {}, lambda v: v.update(fullnameOverride="x" * 54)),
    "name-not-dns1035": (
        "RayCluster name starting with a digit",
        "fullnameOverride",
        True,
        {},
        lambda v: v.update(fullnameOverride="7th-run"),
    ),
    "name-duplicate-group": (
        "two worker groups with one name",
        "workerGroups[1].name",
        False,
        {},
        lambda v: v.update(workerGroups=[group("gpu"), group("gpu")]),
    ),
    "name-reservation-missing": (
        "reservation provisioning without a reservation",
        "workerGroups[0].reservationName",
        False,
        {},
        lambda v: v["workerGroups"][0].update(provisioning="reservation", reservationName=""),
    ),
    "name-reservation-on-spot": (
        "a reservation named on a Spot group",
        "workerGroups[0].reservationName",
        False,
        {},
        lambda v: v["workerGroups"][0].update(reservationName="res-1"),
    ),
    "kueue-no-queue": (
        "Kueue on without a LocalQueue",
        "kueue.queueName",
        False,
        {},
        lambda v: v["kueue"].update(enabled=True, queueName=""),
    ),
    "kueue-too-many-groups": (
        "8 worker groups with Kueue",
        "workerGroups",
        False,
        {"nodes": 8, "generation_nodes": 4},
        lambda v: (v["kueue"].update(enabled=True, queueName="q"), v.update(workerGroups=[group(f"g{i}") for i in range(8)])),
    ),
    "kueue-queue-without-enabled": ("a queue named but Kueue off", "kueue.enabled", False, {}, lambda v: v["kueue"].update(queueName="q")),
    # secrets
    "sec-wandb-no-key": (
        "W&B on without a WANDB_API_KEY reference",
        "secrets.wandbApiKeyKey",
        False,
        {"wandb": True},
        lambda v: v["secrets"].update(wandbApiKeyKey=""),
    ),
    "sec-gated-no-secret": (
        "gated Gemma without an HF token reference",
        "secrets.source",
        False,
        {},
        lambda v: v["secrets"].update(source="none", existingSecret="", hfTokenKey=""),
    ),
    "sec-plain-token": (
        "HF_TOKEN as a plain env value",
        "extraEnv[0].value",
        False,
        {},
        lambda v: v["extraEnv"].append({"name": "HF_TOKEN", "value": "hf_example"}),
    ),
    "sec-nccl-secret": (
        "a secret-looking NCCL variable",
        "nccl.extraEnv.NCCL_API_TOKEN",
        False,
        {},
        lambda v: v["nccl"]["extraEnv"].update({"NCCL_API_TOKEN": "x"}),
    ),
    "sec-token-in-file": (
        "a token written into the values file",
        "secrets.fromFiles.hfToken",
        False,
        {},
        lambda v: v["secrets"].update(source="files", existingSecret="", fromFiles={"hfToken": "hf_example", "wandbApiKey": ""}),
    ),
    "sec-two-sources": (
        "an existing Secret named while the chart should create one",
        "secrets.existingSecret",
        False,
        {},
        lambda v: v["secrets"].update(source="files"),
    ),
    "sec-external-no-store": (
        "ExternalSecret without a store",
        "secrets.external.storeName",
        False,
        {},
        lambda v: (
            v["secrets"].update(source="external", existingSecret=""),
            v["secrets"]["external"].update(hfTokenRemoteKey="hf-token"),
        ),
    ),
    "sec-source-enum": ("unknown token source", "secrets.source", True, {}, lambda v: v["secrets"].update(source="vault")),
    # schema-level shapes
    "schema-sample-typo": (
        "the sample's --set values.additionalWorkerGroups prefix",
        "values",
        True,
        {},
        lambda v: v.update(values={"additionalWorkerGroups": {"worker-grp-0": {"replicas": 2}}}),
    ),
    "schema-latest-tag": ("image tag latest", "image.tag", True, {}, lambda v: v["image"].update(tag="latest")),
    "schema-replicas-zero": ("0 replicas", "workerGroups[0].replicas", True, {}, lambda v: v["workerGroups"][0].update(replicas=0)),
    "schema-provisioning": (
        "unknown provisioning",
        "workerGroups[0].provisioning",
        True,
        {},
        lambda v: v["workerGroups"][0].update(provisioning="preemptible"),
    ),
    "schema-unknown-worker-key": (
        "a typo inside a worker group",
        "workerGroups[0].replica",
        True,
        {},
        lambda v: v["workerGroups"][0].update(replica=3),
    ),
    "schema-worker-ray-cpus-inf": (
        "worker num-cpus inf (ray start takes whole numbers only)",
        "worker.rayStartParams.num-cpus",
        True,
        {},
        lambda v: v["worker"]["rayStartParams"].update({"num-cpus": "inf"}),
    ),
    "schema-head-ray-cpus-negative": (
        "head num-cpus -4",
        "head.rayStartParams.num-cpus",
        True,
        {},
        lambda v: v["head"]["rayStartParams"].update({"num-cpus": "-4"}),
    ),
    "schema-worker-ray-gpus-text": (
        "worker num-gpus abc",
        "worker.rayStartParams.num-gpus",
        True,
        {},
        lambda v: v["worker"]["rayStartParams"].update({"num-gpus": "abc"}),
    ),
    "schema-worker-cpu-400-digits": (
        "a 401-digit CPU request (overflowed a float)",
        "worker.resources.requests.cpu",
        True,
        {},
        lambda v: v["worker"]["resources"]["requests"].update(cpu="1" + "0" * 400),
    ),
    "schema-lustre-capacity-5000-digits": (
        "a 5001-digit Lustre capacity (past Python's int string limit)",
        "storage.lustre.capacity",
        True,
        {},
        lambda v: v["storage"]["lustre"].update(capacity="1" + "0" * 5000 + "Gi"),
    ),
    "schema-worker-shm-400-digits": (
        "a 401-digit /dev/shm size",
        "worker.shmSize",
        True,
        {},
        lambda v: v["worker"].update(shmSize="1" + "0" * 400 + "Gi"),
    ),
    "nemo-extra-override-5000-digits": (
        "an extra override with a 5000-digit number (past Python's int string limit)",
        "grpo.extraOverrides[0]",
        False,
        {},
        lambda v: v["grpo"].update(extraOverrides=["++foo.bar=" + "9" * 5000]),
    ),
    # the release's own recipe (vendor/nemo-rl/)
    "nemo-override-misspelt": (
        "an extra override whose key the release's recipe does not have (a typo)",
        "grpo.extraOverrides[grpo.val_perod]",
        False,
        {},
        lambda v: v["grpo"].update(extraOverrides=["grpo.val_perod=10"]),
    ),
    "nemo-plus-on-existing-key": (
        "a '+' on a key the recipe already has",
        "grpo.extraOverrides[grpo.val_period]",
        False,
        {},
        lambda v: v["grpo"].update(extraOverrides=["+grpo.val_period=10"]),
    ),
    "nemo-release-not-carried": (
        "an image tag whose NeMo RL configs the repository does not carry",
        "image.tag",
        False,
        {},
        lambda v: v["image"].update(tag="v0.4.0"),
    ),
    # rendered objects (issue 16 item 3)
    "obj-toleration-exists-value": (
        "a toleration with operator Exists and a value (the API server refuses it)",
        "workerGroups[0].tolerations[0].value",
        False,
        {},
        lambda v: v["workerGroups"][0].update(
            tolerations=[{"key": "dedicated", "operator": "Exists", "value": "gpu", "effect": "NoSchedule"}]
        ),
    ),
    "obj-toleration-effect": (
        "a toleration effect that is no taint effect",
        "head.tolerations[0].effect",
        True,
        {},
        lambda v: v["head"].update(tolerations=[{"key": "pool", "operator": "Equal", "value": "system", "effect": "NoScheduling"}]),
    ),
    "obj-label-value": (
        "a label value with a space (label value syntax)",
        "workerGroups[0].labels.team",
        False,
        {},
        lambda v: v["workerGroups"][0].update(labels={"team": "ml research"}),
    ),
    "obj-label-key-long": (
        "a label name longer than 63 characters",
        "commonLabels." + "c" * 64,
        False,
        {},
        lambda v: v.update(commonLabels={"c" * 64: "x"}),
    ),
    "obj-launcher-limit-below-request": (
        "the launcher's memory limit below its request",
        "launcher.resources.limits.memory",
        False,
        {},
        lambda v: v["launcher"]["resources"].update(requests={"cpu": "250m", "memory": "4Gi"}, limits={"memory": "2Gi"}),
    ),
    "obj-cpu-unit": (
        "cpu: 250 meant as 250m (more CPUs than any node has)",
        "launcher.resources.requests.cpu",
        False,
        {},
        lambda v: v["launcher"]["resources"]["requests"].update(cpu="250"),
    ),
    "obj-selector-contradicts": (
        "a worker node selector naming another accelerator than the chart's",
        "workerGroups[0].nodeSelector.cloud.google.com/gke-accelerator",
        False,
        {},
        lambda v: v["workerGroups"][0].update(nodeSelector={"cloud.google.com/gke-accelerator": "nvidia-b200"}),
    ),
    "obj-spot-on-reservation": (
        "a Spot selector on a reservation group",
        "workerGroups[0].nodeSelector.cloud.google.com/gke-spot",
        False,
        {},
        lambda v: v["workerGroups"][0].update(
            provisioning="reservation", reservationName="res-a", nodeSelector={"cloud.google.com/gke-spot": "true"}
        ),
    ),
    "obj-group-named-head": (
        "a worker group named head (Kueue's pod set of the head)",
        "workerGroups[0].name",
        False,
        {},
        lambda v: v["workerGroups"][0].update(name="head"),
    ),
    "obj-num-gpus-worker": (
        "num-gpus in the workers' rayStartParams other than the GPUs per node",
        "worker.rayStartParams.num-gpus",
        False,
        {},
        lambda v: v["worker"].update(rayStartParams={"num-gpus": "4"}),
    ),
    "obj-num-gpus-head": (
        "num-gpus on the CPU head",
        "head.rayStartParams.num-gpus",
        False,
        {},
        lambda v: v["head"].update(rayStartParams={"num-gpus": "1"}),
    ),
    "obj-object-store-above-shm": (
        "object-store-memory above the head's /dev/shm",
        "head.rayStartParams.object-store-memory",
        False,
        {},
        lambda v: v["head"].update(rayStartParams={"object-store-memory": str(20 * 2**30)}),
    ),
    "obj-extra-env-hf-home": (
        "extraEnv setting HF_HOME, which the chart sets",
        "extraEnv[0].name",
        False,
        {},
        lambda v: v.update(extraEnv=[{"name": "HF_HOME", "value": "/tmp/hf"}]),
    ),
    "obj-extra-env-nccl": (
        "extraEnv setting an NCCL_ variable the chart sets",
        "extraEnv[0].name",
        False,
        {},
        lambda v: v.update(extraEnv=[{"name": "NCCL_SOCKET_IFNAME", "value": "eth0"}]),
    ),
    "obj-chart-required": (
        "kueue on without a queue name (the chart's own required message)",
        "kueue.queueName",
        False,
        {},
        lambda v: v["kueue"].update(enabled=True, queueName=""),
    ),
    "nemo-override-wrong-type": (
        "an extra override giving a string where the recipe has a boolean",
        "grpo.extraOverrides[checkpointing.enabled]",
        False,
        {},
        lambda v: v["grpo"].update(extraOverrides=["checkpointing.enabled=yes"]),
    ),
    "nemo-override-float-for-int": (
        "an extra override giving a fraction where the recipe has a whole number",
        "grpo.extraOverrides[grpo.val_period]",
        False,
        {},
        lambda v: v["grpo"].update(extraOverrides=["grpo.val_period=2.5"]),
    ),
    "nemo-gpu-memory-above-one": (
        "vLLM's gpu_memory_utilization above 1 (vLLM refuses it at start)",
        "grpo.extraOverrides[policy.generation.vllm_cfg.gpu_memory_utilization]",
        False,
        {},
        lambda v: v["grpo"].update(extraOverrides=["policy.generation.vllm_cfg.gpu_memory_utilization=1.5"]),
    ),
    "nemo-override-hydra-grammar": (
        "an extra override Hydra's grammar refuses (an unclosed bracket)",
        "grpo.extraOverrides[0]",
        False,
        {},
        lambda v: v["grpo"].update(extraOverrides=["grpo.max_num_steps=[300"]),
    ),
    # the model's own facts (generator/nemo_rl/models.py)
    "model-tp-kv-heads": (
        "a vLLM TP size that does not divide the model's KV heads (Qwen2.5-1.5B: 2)",
        "grpo.extraOverrides[policy.generation.vllm_cfg.tensor_parallel_size]",
        False,
        {"model": "qwen2.5-1.5b", "nodes": 1},
        lambda v: v["grpo"].update(extraOverrides=["policy.generation.vllm_cfg.tensor_parallel_size=4"]),
    ),
    "model-tokenizer-of-another-model": (
        "a tokenizer of another model",
        "grpo.extraOverrides[policy.tokenizer.name]",
        False,
        {},
        lambda v: v["grpo"].update(extraOverrides=["policy.tokenizer.name=Qwen/Qwen2.5-1.5B"]),
    ),
    "model-length-above-positions": (
        "a sequence length above the model's maximum positions (Llama 3.2 1B: 131072)",
        "grpo.extraOverrides[policy.max_total_sequence_length]",
        False,
        {"model": "llama3.2-1b", "nodes": 1},
        lambda v: v["grpo"].update(extraOverrides=["policy.max_total_sequence_length=200000"]),
    ),
    "grpo-one-generation-per-prompt": (
        "a GRPO group of one generation per prompt (every advantage is 0)",
        "grpo.overrides[grpo.num_generations_per_prompt]",
        False,
        {},
        lambda v: set_override(v, "grpo.num_generations_per_prompt", "1"),
    ),
    # runs that lose their work
    "sto-run-name-changed": (
        "grpo.runName changed but the checkpoint and log folders still name the old run (two runs share them)",
        "grpo.runName",
        False,
        {},
        lambda v: v["grpo"].update(runName="gemma3-27b-gsm8k-v2"),
    ),
    "sto-checkpoints-of-another-run": (
        "an extra override putting the checkpoints in another run's folder",
        "grpo.extraOverrides[checkpointing.checkpoint_dir]",
        False,
        {},
        lambda v: v["grpo"].update(extraOverrides=["checkpointing.checkpoint_dir=/data/nemo-rl/baseline/checkpoints"]),
    ),
    "run-spot-checkpointing-off": (
        "checkpointing off on a Spot worker group (every resubmission starts at step 0)",
        "grpo.extraOverrides[checkpointing.enabled]",
        False,
        {},
        lambda v: v["grpo"].update(extraOverrides=["checkpointing.enabled=false"]),
    ),
    "run-spot-save-period-above-steps": (
        "a 5-step run on Spot with the recipe's save period of 10 (no checkpoint before the end)",
        "grpo.extraOverrides[grpo.max_num_steps]",
        False,
        {},
        lambda v: v["grpo"].update(extraOverrides=["grpo.max_num_steps=5"]),
    ),
    # storage and secrets
    "sto-lustre-handle-region": (
        "a Lustre volumeHandle with a region where the zone belongs",
        "storage.lustre.volumeHandle",
        False,
        {},
        lambda v: v["storage"]["lustre"].update(volumeHandle="my-project/us-central1/nemo-rl-lustre"),
    ),
    "sto-lustre-capacity-step": (
        "a Lustre capacity no tier offers (9Ti is 9216 GiB; sizes step by 9000 GiB)",
        "storage.lustre.capacity",
        False,
        {},
        lambda v: v["storage"]["lustre"].update(capacity="9Ti"),
    ),
    "sec-token-as-key-name": (
        "a Hugging Face token pasted where the Secret's key name belongs",
        "secrets.hfTokenKey",
        False,
        {},
        lambda v: v["secrets"].update(hfTokenKey=PASTED_TOKEN),
    ),
    # the chart's NetworkPolicy
    "net-ipblock-cidr": (
        "an ipBlock CIDR with a prefix longer than 32 bits",
        "access.networkPolicy.allowFrom[0].ipBlock.cidr",
        False,
        {},
        lambda v: v["access"]["networkPolicy"].update(allowFrom=[{"ipBlock": {"cidr": "10.8.0.0/33"}}]),
    ),
    # Autopilot's disk and the image digest
    "ap-head-without-ephemeral-storage": (
        "an Autopilot head without an ephemeral-storage request (Autopilot gives it 1 GiB)",
        "head.resources.requests.ephemeral-storage",
        False,
        {"mode": "autopilot"},
        lambda v: [v["head"]["resources"][kind].pop("ephemeral-storage") for kind in ("requests", "limits")],
    ),
    "ap-worker-ephemeral-above-local-ssd": (
        "an Autopilot GPU worker asking for more ephemeral storage than the machine's 12000 GB of local SSD",
        "worker.resources.requests.ephemeral-storage",
        False,
        {"mode": "autopilot"},
        lambda v: [v["worker"]["resources"][kind].update({"ephemeral-storage": "12Ti"}) for kind in ("requests", "limits")],
    ),
    "img-digest-not-sha256": (
        "an image digest that is a tag, not sha256:<64 hex>",
        "image.digest",
        True,
        {},
        lambda v: v["image"].update(digest="v0.7.0"),
    ),
    # the run's lifecycle (rules/lifecycle.py) and GKE's multi-networking limits (rules/networks.py)
    "life-prepare-non-root": (
        "a non-root preparation user with Ray containers that drop DAC_OVERRIDE (ALL)",
        "prepare.runAsUser",
        False,
        {},
        lambda v: v["prepare"].update(runAsUser=1000),
    ),
    "net-name-over-60": (
        "a 61-character Network name (GKE's node resource networking.gke.io.networks/NAME.IP)",
        "network.rdma[3].name",
        False,
        {},
        lambda v: v["network"]["rdma"][3].update(name="rdma-3-" + "x" * 54),
    ),
    "net-gvnic-pod-network": (
        "an extra NIC named after GKE's own pod network",
        "network.gvnic.name",
        False,
        {},
        lambda v: v["network"]["gvnic"].update(name="pod-network"),
    ),
    "net-subnet-name-in-two-vpcs": (
        "one subnet name for two device-mode paramsets in different VPCs",
        "network.rdma[5].subnet",
        False,
        {},
        lambda v: v["network"]["rdma"][5].update(subnet=v["network"]["rdma"][1]["subnet"], vpc="other-roce-net"),
    ),
}


def _external_refresh(v: dict[str, Any]) -> None:
    v["secrets"].update(source="external", existingSecret="")
    v["secrets"]["external"].update(storeName="gcp-store", hfTokenRemoteKey="hf-token", refreshInterval="2h30m")


# Legitimate hand edits that Kubernetes, the operators and NeMo RL accept: each must pass
# `validate` with no error, lint and render. name: (what the edit is, generator options, mutation)
VALID_CASES: dict[str, tuple[str, dict[str, Any], Mutation]] = {
    "launcher-not-following-keeps-gpus": (
        "launcher.follow false with releaseGpus false (the GPUs kept on purpose)",
        {},
        lambda v: v["launcher"].update(follow=False, releaseGpus=False),
    ),
    "prepare-non-root-with-dac-override": (
        "a non-root preparation user, the Ray containers given DAC_OVERRIDE as values.yaml says",
        {},
        lambda v: [
            v["prepare"].update(runAsUser=1000),
            *(v[part]["securityContext"]["capabilities"].update(add=["DAC_OVERRIDE"]) for part in ("head", "worker")),
        ],
    ),
    "cpu-as-number": (
        "CPU quantities as YAML numbers (Kubernetes takes int-or-string)",
        {},
        lambda v: (v["head"]["resources"]["requests"].update(cpu=4), v["head"]["resources"]["limits"].update(cpu=6)),
    ),
    "cpu-as-fraction": (
        "a fractional CPU request for the launcher as a number",
        {},
        lambda v: v["launcher"]["resources"]["requests"].update(cpu=0.5),
    ),
    "external-secret-go-duration": ("an ExternalSecret refreshInterval of 2h30m (a Go duration)", {}, _external_refresh),
    "tokenizers-env": (
        "TOKENIZERS_PARALLELISM in extraEnv (TOKEN inside a word is no token)",
        {},
        lambda v: v.update(extraEnv=[{"name": "TOKENIZERS_PARALLELISM", "value": "false"}]),
    ),
    "extra-override-existing-key": (
        "an extra override of a key the recipe has (the last one wins)",
        {},
        lambda v: v["grpo"].update(extraOverrides=["grpo.val_period=20"]),
    ),
    "extra-override-new-key": (
        "an extra override adding a new key with '+'",
        {},
        lambda v: v["grpo"].update(extraOverrides=["+foo.bar=1"]),
    ),
    "toleration-exists-no-value": (
        "a toleration with operator Exists and no value",
        {},
        lambda v: v["workerGroups"][0].update(tolerations=[{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]),
    ),
    "labels-and-selectors": (
        "a team label, a prefixed commonLabel and a node-pool selector",
        {},
        lambda v: (
            v.update(commonLabels={"example.com/cost-center": "ml-42"}),
            v["workerGroups"][0].update(labels={"team": "ml_research.a"}, nodeSelector={"cloud.google.com/gke-nodepool": "gpu-pool"}),
        ),
    ),
    "num-gpus-matching": (
        "num-gpus equal to the GPUs per node and an object store within /dev/shm",
        {},
        lambda v: v["worker"].update(rayStartParams={"num-gpus": "8", "object-store-memory": str(100 * 2**30)}),
    ),
    "extra-override-int-for-float": (
        "a whole number where the recipe has a float (Hydra and NeMo RL accept it)",
        {},
        lambda v: v["grpo"].update(extraOverrides=["policy.generation.vllm_cfg.gpu_memory_utilization=1"]),
    ),
    "run-name-with-its-own-folders": (
        "a new grpo.runName with the checkpoint and log folders moved with it",
        {},
        lambda v: (
            v["grpo"].update(runName="exp-2"),
            v["grpo"].update(
                extraOverrides=["checkpointing.checkpoint_dir=/data/nemo-rl/exp-2/checkpoints", "logger.log_dir=/data/nemo-rl/exp-2/logs"]
            ),
        ),
    ),
    "outputs-in-own-layout": (
        "checkpoints and logs in a folder layout of the user's own, outside <mount>/nemo-rl/",
        {},
        lambda v: v["grpo"].update(
            extraOverrides=["checkpointing.checkpoint_dir=/data/experiments/a/ckpt", "logger.log_dir=/data/experiments/a/logs"]
        ),
    ),
    "spot-short-run-with-save-period": (
        "a 5-step run on Spot that saves every 2 steps",
        {},
        lambda v: v["grpo"].update(extraOverrides=["grpo.max_num_steps=5", "checkpointing.save_period=2"]),
    ),
    "on-demand-without-checkpoints": (
        "checkpointing off on on-demand nodes (no preemption to resume from)",
        {"provisioning": "on-demand"},
        lambda v: v["grpo"].update(extraOverrides=["checkpointing.enabled=false"]),
    ),
    "lustre-zone-and-tier-sizes": (
        "a volumeHandle with a zone, and 1548000Gi (a 500 MB/s per TiB size; not one at 1000)",
        {},
        lambda v: v["storage"]["lustre"].update(volumeHandle="my-project/us-central1-a/nemo-rl-lustre", capacity="1548000Gi"),
    ),
    "secret-key-names": (
        "Secret key names that start like tokens but are names (hf_token, wandb_api_key)",
        {"wandb": True},
        lambda v: v["secrets"].update(hfTokenKey="hf_token", wandbApiKeyKey="wandb_api_key"),
    ),
    "shared-reservation-image-digest": (
        "a reservation shared from another project, an image pinned by digest, and DAC_OVERRIDE added back",
        {"provisioning": "reservation", "reservation": "res-a", "reservation_project": "other-project"},
        lambda v: (
            v["image"].update(digest="sha256:" + "0" * 64),
            v["worker"]["securityContext"]["capabilities"].update(add=["DAC_OVERRIDE"]),
        ),
    ),
    "seq-divisible-multiple-of-tp": (
        "make_sequence_length_divisible_by 16 with TP 8 (NeMo RL pads to a multiple of it; any multiple of TP works)",
        {},
        lambda v: v["grpo"].update(extraOverrides=["policy.make_sequence_length_divisible_by=16"]),
    ),
    "on-policy-ratio-lifts-tp-rule": (
        "logprob batch 2 != micro batch 1 with TP 8 and force_on_policy_ratio (grpo.setup sets NRL_IGNORE_TP_ACCURACY_CHECK)",
        {},
        lambda v: v["grpo"].update(
            extraOverrides=["loss_fn.force_on_policy_ratio=true", "policy.train_global_batch_size=1024", "policy.logprob_batch_size=2"]
        ),
    ),
    "vllm-tp-across-nodes": (
        "vLLM TP 16 over two dedicated 8-GPU generation nodes (one placement group across nodes)",
        {"nodes": 4, "generation_nodes": 2},
        lambda v: v["grpo"].update(extraOverrides=["policy.generation.vllm_cfg.tensor_parallel_size=16"]),
    ),
    "one-node-split-generation": (
        "one node split 4 training / 4 generation GPUs, generation num_nodes null",
        {"model": "qwen2.5-1.5b", "nodes": 1},
        lambda v: v["grpo"].update(
            extraOverrides=[
                "policy.generation.colocated.enabled=false",
                "policy.generation.colocated.resources.num_nodes=null",
                "policy.generation.colocated.resources.gpus_per_node=4",
            ]
        ),
    ),
    "ipblock-cidrs": (
        "NetworkPolicy peers by IPv4 and IPv6 CIDR, with an exception inside the first",
        {},
        lambda v: v["access"]["networkPolicy"].update(
            allowFrom=[{"ipBlock": {"cidr": "10.8.0.0/16", "except": ["10.8.1.0/24"]}}, {"ipBlock": {"cidr": "fd00::/8"}}]
        ),
    ),
}


def seed_split(opts: dict[str, Any]) -> dict[str, Any]:
    """The options with the seed tutorial's split for Gemma 3 27B on 2+ nodes (half the nodes for
    vLLM) unless they choose: the cases were written against it, the generator's default before it
    followed NeMo RL's recipe (colocated)."""
    if "generation_nodes" in opts or opts.get("model", "gemma3-27b") != "gemma3-27b" or opts.get("nodes", 2) < 2:
        return opts
    return {"generation_nodes": max(1, opts.get("nodes", 2) // 2)} | opts


def main() -> int:
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    for i, (name, (rule, key, schema, opts, mutate)) in enumerate(CASES.items()):
        values = build(Options(**({"gpu": "h200"} | seed_split(opts))))
        mutate(values)
        header = f"rule: {rule}\nexpect: {key}\nschema: {str(schema).lower()}"
        (OUT / f"{i:02d}-{name}.yaml").write_text(dump_values(values, header))
    print(f"wrote {len(CASES)} files to {OUT.relative_to(ROOT)}")
    if VALID_OUT.exists():
        shutil.rmtree(VALID_OUT)
    VALID_OUT.mkdir(parents=True)
    for name, (edit, opts, mutate) in VALID_CASES.items():
        values = build(Options(**({"gpu": "h200"} | seed_split(opts))))
        mutate(values)
        (VALID_OUT / f"{name}.yaml").write_text(dump_values(values, f"edit: {edit}"))
    print(f"wrote {len(VALID_CASES)} files to {VALID_OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
