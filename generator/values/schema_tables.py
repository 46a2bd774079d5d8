"""The parts of the values schema that copy a Python table, generated from it by `scripts/sync.sh`
(into schemas/values.schema.json and the chart's copy):
- the accelerator section, from the profile table (profiles.PROFILES): the enums of
  `accelerator.type`, `.machineType` and `.nodeLabel` and the descriptions that name each profile,
  so adding a profile to the table is all it takes;
- the NeMo RL release lists, from the release table (nemo_rl.releases.RELEASES): the descriptions
  of `image.tag`, `rayVersion`, `grpo.entrypoint` and `head.resources`;
- `gke.mode` (gke.MODES), `workerGroups[].provisioning` (gke.PROVISIONING), the most
  `workerGroups[].replicas` (worker_groups.MAX_NODES) and the most worker groups, `workerGroups`'
  maxItems (kueue_versions.MOST_WORKER_GROUPS, the highest limit of the Kueue table)."""

from __future__ import annotations

import json
from pathlib import PurePosixPath
from typing import Any

from generator.gke import kueue_versions
from generator.gke.profiles import PROFILES
from generator.gke.provisioning import MODES, PROVISIONING
from generator.nemo_rl.releases import RELEASES
from generator.values.worker_groups import MAX_NODES


def _either(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


def accelerator_schema(section: dict[str, Any]) -> dict[str, Any]:
    """`section` (the schema of `accelerator`) with what the profile table decides filled in."""
    profiles = list(PROFILES.values())
    props = section["properties"]
    section["description"] = (
        f"The GPU machine the workers run on. Written by `python -m generator --gpu {'|'.join(PROFILES)}` from its "
        "accelerator profile; `validate` checks that every field belongs to `type`. Change it by regenerating, not by hand."
    )
    props["type"]["description"] = f"Accelerator profile: {_either([f'{p.key} ({p.machine_type})' for p in profiles])}."
    props["type"]["enum"] = [p.key for p in profiles]
    props["machineType"]["description"] = (
        f"Compute Engine machine type of the GPU node pool ({', '.join(f'{p.machine_type} for {p.key.upper()}' for p in profiles)})."
    )
    props["machineType"]["enum"] = [p.machine_type for p in profiles]
    props["nodeLabel"]["description"] = (
        f"Value of the node label cloud.google.com/gke-accelerator that GPU workers select ({_either([p.node_label for p in profiles])})."
    )
    props["nodeLabel"]["enum"] = [p.node_label for p in profiles]
    tuners = ", ".join(
        f"{PurePosixPath(p.nccl_tuner_config_path).name} for {p.key.upper()}" if p.nccl_tuner_config_path else f"empty for {p.key.upper()}"
        for p in profiles
    )
    props["ncclTunerConfigPath"]["description"] = (
        f"NCCL_TUNER_CONFIG_PATH for the gIB plugin on this machine ({tuners}); empty: gIB's set_nccl_env.sh chooses."
    )
    props["gpusPerNode"]["maximum"] = max(p.gpus_per_node for p in profiles)
    sizes = sorted({p.gpus_per_node for p in profiles})
    props["gpusPerNode"]["description"] = (
        f"GPUs each worker pod requests (nvidia.com/gpu): one worker pod takes a whole node ({_either([str(n) for n in sizes])} GPUs)."
    )
    props["cpuArch"]["enum"] = sorted({"amd64", *(p.cpu_arch for p in profiles)})
    return section


def _span(tags: list[str]) -> str:
    return tags[0] if len(tags) == 1 else f"{tags[0]} to {tags[-1]}"


def release_descriptions(props: dict[str, Any]) -> None:
    """The descriptions that list NeMo RL releases, written from the release table."""
    tags = list(RELEASES)
    props["image"]["properties"]["tag"]["description"] = (
        f"Pinned NeMo RL release tag ({_either(tags)}). Never 'latest': rayVersion must match the Ray inside the image."
    )
    rays = ", ".join(f"{t}: {r.ray_version}" for t, r in RELEASES.items())
    props["rayVersion"]["description"] = (
        f"RayCluster spec.rayVersion; must equal the Ray inside the image ({rays}). The generator sets it from the release."
    )
    scripts: dict[str, list[str]] = {}
    for t, r in RELEASES.items():
        scripts.setdefault(r.entrypoint, []).append(t)
    props["grpo"]["properties"]["entrypoint"]["description"] = (
        f"NeMo RL's GRPO script for the release: {_either([f'{s} ({_span(ts)})' for s, ts in scripts.items()])}."
    )
    needs = [t for t, r in RELEASES.items() if r.head_needs_cpu]
    props["head"]["properties"]["resources"]["description"] = (
        "CPU/memory of the head's Ray container. KubeRay gives Ray as many CPUs as the CPU limit"
        + (f"; NeMo RL {'/'.join(needs)} need at least 1" if needs else "")
        + ". The memory limit must cover the request plus shmSize."
    )


def kueue_schema(props: dict[str, Any]) -> None:
    """`kueue.enabled` and `kueue.version`: the worker-group limits of the Kueue version table."""
    limits = ", ".join(
        [f"{kueue_versions.DEFAULT_LIMIT} up to 0.{kueue_versions.LIMITS[-1][0][1] - 1}"]
        + [f"{limit} from {major}.{minor}" for (major, minor), limit in reversed(kueue_versions.LIMITS)]
    )
    props["enabled"]["description"] = (
        "Queue the whole RayCluster in Kueue: it carries kueue.x-k8s.io/queue-name and waits for admission; autoscaling stays off"
        " and the worker groups are limited by kueue.version."
    )
    props["version"] = {
        "description": (
            "The cluster's Kueue version (v0.18.2, 0.19): it decides how many worker groups a RayCluster may have under Kueue"
            f" ({limits}); empty: {kueue_versions.DEFAULT_LIMIT}, which holds under every version. `python -m generator infra"
            " --kueue` writes the version it installs; `doctor` compares it with the cluster's."
        ),
        "type": "string",
        "pattern": kueue_versions.VERSION_PATTERN,
        "maxLength": 20,
    }


def synced_schema_text(text: str) -> str:
    """The schema file's text with the parts that copy a Python table generated from it."""
    schema = json.loads(text)
    props = schema["properties"]
    accelerator_schema(props["accelerator"])
    release_descriptions(props)
    props["gke"]["properties"]["mode"]["enum"] = list(MODES)
    props["workerGroups"]["maxItems"] = kueue_versions.MOST_WORKER_GROUPS
    group = props["workerGroups"]["items"]["properties"]
    group["provisioning"]["enum"] = list(PROVISIONING)
    group["replicas"]["maximum"] = MAX_NODES
    kueue_schema(props["kueue"]["properties"])
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
