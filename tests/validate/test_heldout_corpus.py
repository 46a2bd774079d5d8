"""A held-out measure of `validate` (issue 25's outside measure): 30 realistic mistakes and 10
legitimate edits written without reading the other corpora, each ONE edit of a generated values
file (an example or a chart ci/ scenario), spread over the issue's classes 1-12.

A mistake is caught when a finding (error or warning) that the unedited file does not have names
the expected key (or a key under it); a legitimate edit is accepted when it adds no error.
The test holds the counts the measure reached, so a rule that stops catching fails it, and lists
what it misses."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from generator.validate.findings import Finding
from generator.validate.values import validate_values
from generator.values.merge import as_helm_sees_it

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = "examples/tutorial-h200.yaml"
SCALE_OUT = "examples/scale-out-h200.yaml"
AUTOPILOT = "charts/nemo-rl-gke/ci/h200-autopilot-values.yaml"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"


@dataclass(frozen=True)
class Case:
    name: str
    cls: int  # the class
    path: str  # dotted values path the one edit sets ("+" at the end: appended to that list)
    value: Any
    key: str = ""  # the key a finding must name (default: path, without a trailing "+")
    base: str = TUTORIAL
    also: tuple[str, ...] = ()  # other keys that name the fix (e.g. the recipe key to set)

    @property
    def expected(self) -> str:
        return self.key or self.path.rstrip("+")


def override(text: str, *also: str) -> dict[str, Any]:
    """One entry added to the (empty) grpo.extraOverrides; validate names an override by its key,
    grpo.extraOverrides[<key>] (generator/validate/rules/context.py), or by its index."""
    key = f"grpo.extraOverrides[{text.split('=', 1)[0]}]"
    return {"path": "grpo.extraOverrides+", "value": text, "key": key, "also": ("grpo.extraOverrides[0]", *also)}


def recipe_override(text: str) -> dict[str, Any]:
    """The tutorial's override of `text`'s key replaced by `text` (the same key, another value); found
    by its key, so a generator that writes its overrides in another order keeps the case."""
    key = text.split("=", 1)[0]
    overrides = yaml.safe_load((ROOT / TUTORIAL).read_text())["grpo"]["overrides"]
    i = next(i for i, o in enumerate(overrides) if o.split("=", 1)[0] == key)
    return {"path": f"grpo.overrides.{i}", "value": text, "key": f"grpo.overrides[{key}]"}


MISTAKES = [
    # 1. what the API server refuses in rendered objects
    Case("label-value-space", 1, "commonLabels", {"team": "ML Research"}, "commonLabels.team"),
    Case(
        "toleration-exists-with-value",
        1,
        "head.tolerations",
        [{"key": "dedicated", "operator": "Exists", "value": "ray"}],
        "head.tolerations[0]",
    ),
    Case("launcher-limit-below-request", 1, "launcher.resources.limits.memory", "512Mi", "launcher.resources"),
    Case("service-account-upper-case", 1, "serviceAccount.name", "NeMo_RL"),
    # 2. what never schedules
    Case(
        "instance-type-of-another-machine",
        2,
        "workerGroups.0.nodeSelector",
        {"node.kubernetes.io/instance-type": "a3-highgpu-8g"},
        "workerGroups[0]",
    ),
    Case("head-cpu-above-cpu-pool", 2, "head.resources.requests.cpu", "32", "head.resources"),
    Case("gpu-label-on-cpu-head", 2, "head.nodeSelector", {"cloud.google.com/gke-accelerator": "nvidia-h200-141gb"}, "head.nodeSelector"),
    Case(
        "required-topology-host",
        2,
        "kueue.topology",
        {"mode": "required", "level": "cloud.google.com/gce-topology-host"},
        "kueue.topology",
        SCALE_OUT,
    ),
    # 3. Autopilot's refusals on every pod
    Case("autopilot-head-capability", 3, "head.securityContext.capabilities.add", ["SYS_ADMIN"], "head.securityContext", AUTOPILOT),
    Case("autopilot-class-lower-case", 3, "gke.gpuComputeClass", "accelerator", base=AUTOPILOT),
    # 4. images
    Case("image-upper-case", 4, "image.repository", "nvcr.io/nvidia/NeMo-RL"),
    Case("image-tag-in-repository", 4, "image.repository", "nvcr.io/nvidia/nemo-rl:v0.7.0"),
    # 5. Ray start parameters
    Case("object-store-in-megabytes", 5, "head.rayStartParams", {"object-store-memory": "2000"}, "head.rayStartParams"),
    Case("dashboard-on-localhost", 5, "head.rayStartParams", {"dashboard-host": "127.0.0.1"}, "head.rayStartParams"),
    # 6. environment variables
    Case("cuda-visible-devices-half", 6, "extraEnv+", {"name": "CUDA_VISIBLE_DEVICES", "value": "0,1,2,3"}, "extraEnv[0]"),
    Case("nccl-p2p-disable", 6, "extraEnv+", {"name": "NCCL_P2P_DISABLE", "value": "1"}, "extraEnv[0]"),
    Case("shm-without-unit", 6, "head.shmSize", "12"),
    # 7. NeMo RL values that train nothing or stop the run
    Case("temperature-zero", 7, **override("policy.generation.temperature=0")),
    Case("save-period-zero", 7, **override("checkpointing.save_period=0")),
    Case("dataset-hub-name", 7, **override("data.train.dataset_name=openai/gsm8k")),
    # 8. NeMo RL cross-key rules
    Case("megatron-and-dtensor", 8, **override("policy.megatron_cfg.enabled=true")),
    Case("vllm-pipeline-parallel-sync", 8, **override("policy.generation.vllm_cfg.pipeline_parallel_size=2")),
    # 9. models beyond the presets
    Case("train-tp-not-dividing-heads", 9, **recipe_override("policy.dtensor_cfg.tensor_parallel_size=6")),
    Case("vllm-tp-three", 9, **recipe_override("policy.generation.vllm_cfg.tensor_parallel_size=3")),
    # 10. loggers
    Case("wandb-project-with-space", 10, **override("logger.wandb.project=My Project")),
    Case("mlflow-without-server", 10, **override("logger.mlflow_enabled=true", "grpo.overrides[logger.mlflow.tracking_uri]")),
    # 11. lifecycle
    Case("release-gpus-without-follow", 11, "launcher.follow", False, "launcher"),
    Case("prepare-non-root", 11, "prepare.runAsUser", 1000),
    # 12. GKE's documented limits
    Case("gvnic-name-too-long", 12, "network.gvnic.name", "gvnic-network-for-the-ml-research-team-in-us-central1-b-prod-blue"),
    Case("rdma-network-underscore", 12, "network.rdma.0.name", "rdma_0", "network.rdma[0].name"),
]

# Written as legitimate, refused on examination rightly: kept as mistakes the measure catches.
DISPUTED = [
    # grpo.max_num_epochs is 1 and one epoch of GSM8K at 16 prompts per step is 467 steps: the run ends there.
    Case("more-steps-than-one-epoch", 7, **override("grpo.max_num_steps=500")),
    # the head's memory limit then no longer covers its request plus the memory-backed /dev/shm.
    Case("head-request-plus-shm-above-limit", 2, "head.resources.requests.memory", "32Gi", "head.resources"),
]

LEGITIMATE = [
    Case("team-label", 1, "commonLabels", {"team": "ml-research"}),
    Case(
        "head-dedicated-toleration",
        1,
        "head.tolerations",
        [{"key": "dedicated", "operator": "Equal", "value": "ray", "effect": "NoSchedule"}],
    ),
    Case("nccl-debug-subsystems", 6, "extraEnv+", {"name": "NCCL_DEBUG_SUBSYS", "value": "INIT,NET"}),
    Case("fewer-steps", 7, **override("grpo.max_num_steps=200")),
    Case("sampling-temperature", 7, **override("policy.generation.temperature=0.7")),
    Case("head-memory-limit", 2, "head.resources.limits.memory", "48Gi"),
    Case("workload-identity", 1, "serviceAccount.annotations", {"iam.gke.io/gcp-service-account": "rl@my-project.iam.gserviceaccount.com"}),
    Case("save-every-20-steps", 7, **override("checkpointing.save_period=20")),
    Case("cost-center-pod-label", 1, "workerGroups.0.labels", {"cost-center": "1234"}),
    Case(
        "required-topology-block", 2, "kueue.topology", {"mode": "required", "level": "cloud.google.com/gce-topology-block"}, base=SCALE_OUT
    ),
]


@cache
def _base(name: str) -> dict[str, Any]:
    return as_helm_sees_it(yaml.safe_load((ROOT / name).read_text()))


@cache
def _base_findings(name: str) -> frozenset[tuple[str, str]]:
    return frozenset((f.key, f.message) for f in validate_values(copy.deepcopy(_base(name))))


def apply(values: dict[str, Any], path: str) -> tuple[Any, str]:
    """The node holding the last part of `path`, and that part."""
    parts = path.rstrip("+").split(".")
    node: Any = values
    for p in parts[:-1]:
        node = node[int(p)] if isinstance(node, list) else node[p]
    return node, parts[-1]


def new_findings(case: Case) -> list[Finding]:
    v = copy.deepcopy(_base(case.base))
    node, last = apply(v, case.path)
    if case.path.endswith("+"):
        node[last] = [*(node.get(last) or []), case.value]
    elif isinstance(node, list):
        node[int(last)] = case.value
    else:
        node[last] = case.value
    base = _base_findings(case.base)
    return [f for f in validate_values(v) if (f.key, f.message) not in base]


def caught(case: Case, found: list[Finding]) -> bool:
    wanted = (case.expected, *case.also)
    return any(f.key == w or f.key.startswith((w + ".", w + "[")) for f in found for w in wanted)


# The measure this branch reached (before its fixes: see the CHANGELOG); a rule that stops catching fails.
CAUGHT_AT_LEAST = 30
ACCEPTED_AT_LEAST = 10


def test_cases_are_one_edit_each_and_cover_every_class() -> None:
    assert len(MISTAKES) == 30 and len(LEGITIMATE) == 10
    assert {c.cls for c in MISTAKES} == set(range(1, 13))
    assert len({c.name for c in MISTAKES + LEGITIMATE}) == 40
    for case in MISTAKES + DISPUTED + LEGITIMATE:
        if case.path.startswith("grpo.overrides."):  # a recipe override replaced by the same key's other value
            node, last = apply(_base(case.base), case.path)
            assert node[int(last)].split("=", 1)[0] == case.value.split("=", 1)[0]


def test_held_out_mistakes_are_caught_with_their_key() -> None:
    missed = []
    for case in MISTAKES:
        found = new_findings(case)
        if not caught(case, found):
            missed.append(f"{case.name} (class {case.cls}, want {case.expected}): {[(f.key, f.level) for f in found]}")
    print(f"held-out mistakes caught: {len(MISTAKES) - len(missed)}/{len(MISTAKES)}")
    assert len(MISTAKES) - len(missed) >= CAUGHT_AT_LEAST, "\n".join(missed)


@pytest.mark.parametrize("case", DISPUTED, ids=lambda c: c.name)
def test_edits_that_looked_legitimate_are_refused_with_their_key(case: Case) -> None:
    found = new_findings(case)
    assert caught(case, found) and any(f.level == "error" for f in found), found


@pytest.mark.parametrize("case", LEGITIMATE, ids=lambda c: c.name)
def test_held_out_legitimate_edits_add_no_error(case: Case) -> None:
    errors = [(f.key, f.message) for f in new_findings(case) if f.level == "error"]
    assert errors == []
