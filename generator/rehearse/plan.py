"""The run's settings that decide what NeMo RL asks Ray for, read from the rendered entrypoint (the
recipe merged with the overrides, as NeMo RL merges them) and the values keys a user would change.

The result is the plan the stand-in driver (rehearse/job/driver.py) follows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from generator.core.errors import InputError
from generator.nemo_rl.recipe_config import Override, OverrideError, check_overrides, lookup, parse_entrypoint
from generator.nemo_rl.releases import release
from generator.vendored import load_release_recipe


class RunConfigError(Exception):
    """NeMo RL would stop on the config before asking Ray for anything."""


@dataclass(frozen=True)
class Settings:
    release: str
    venv_reservation_skips_cpuless_nodes: bool
    num_nodes: int
    gpus_per_node: int
    colocated: bool
    generation_nodes: int | None
    generation_gpus_per_node: int | None
    backend: str
    math_workers: int
    checkpointing: bool
    recipe_source: str  # <release>/<recipe>, under vendor/nemo-rl/


def _int(cfg: dict[str, Any], key: str, default: int | None) -> int | None:
    value = lookup(cfg, key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise RunConfigError(f"{key}={value!r}: NeMo RL needs a whole number here")
    return int(value)


def settings(tag: str, entrypoint: str) -> Settings:
    """The run's settings from the release's own recipe (carried under vendor/nemo-rl/) and the
    overrides; a release or recipe the repository does not carry is a MissingDataError."""
    try:
        command = parse_entrypoint(entrypoint)
    except OverrideError as e:
        raise InputError(f"launch.json entrypoint: {e}") from None
    base = load_release_recipe(tag, command.recipe)
    cfg, problems = check_overrides(base, list(enumerate(command.overrides)))
    if problems:  # every one of them, each with its fix (the same check as `validate`)
        lines = [f"{e}" + (f" - {e.fix}" if e.fix else "") for _, _, e in problems]
        raise RunConfigError("OverridesError: Failed to parse Hydra overrides: " + "; ".join(lines))
    rel = release(tag)
    num_nodes = _int(cfg, "cluster.num_nodes", 1) or 0
    gpus_per_node = _int(cfg, "cluster.gpus_per_node", 1) or 0
    if num_nodes < 1 or gpus_per_node < 1:
        raise RunConfigError(f"cluster.num_nodes={num_nodes} and cluster.gpus_per_node={gpus_per_node} must both be at least 1")
    return Settings(
        release=tag,
        venv_reservation_skips_cpuless_nodes=not rel.head_needs_cpu,
        num_nodes=num_nodes,
        gpus_per_node=gpus_per_node,
        colocated=bool(lookup(cfg, "policy.generation.colocated.enabled", True)),
        generation_nodes=_int(cfg, "policy.generation.colocated.resources.num_nodes", None),
        generation_gpus_per_node=_int(cfg, "policy.generation.colocated.resources.gpus_per_node", None),
        backend=str(lookup(cfg, "policy.generation.backend", "vllm")),
        math_workers=_int(cfg, "env.math.num_workers", 8) or 0,
        checkpointing=bool(lookup(cfg, "checkpointing.enabled", True)),
        recipe_source=f"{tag}/{command.recipe}",
    )


def override_path(values: dict[str, Any], key: str) -> str:
    """How to name the values entry that sets one NeMo RL key (as `validate` names it)."""
    grpo = values.get("grpo") or {}
    for list_name in ("extraOverrides", "overrides"):
        for arg in reversed(grpo.get(list_name) or []):
            try:
                if Override.parse(str(arg)).key == key:
                    return f"grpo.{list_name}[{key}]"
            except OverrideError:
                continue
    return f"grpo.overrides[{key}] (not set: the recipe's value applies)"


def values_keys(values: dict[str, Any], head_cpu_key: str, worker_cpu_key: str) -> dict[str, str]:
    groups = values.get("workerGroups") or []
    return {
        "head_cpu": head_cpu_key,
        "worker_cpu": worker_cpu_key,
        "num_nodes": override_path(values, "cluster.num_nodes"),
        "gpus_per_node": override_path(values, "cluster.gpus_per_node"),
        "generation_nodes": override_path(values, "policy.generation.colocated.resources.num_nodes"),
        "generation_gpus_per_node": override_path(values, "policy.generation.colocated.resources.gpus_per_node"),
        "replicas": "workerGroups[0].replicas" if len(groups) == 1 else "workerGroups[*].replicas",
        "image_tag": "image.tag",
    }
