"""The run's settings that decide what NeMo RL asks Ray for, read from the rendered entrypoint (the
recipe merged with the overrides, as NeMo RL merges them) and the values keys a user would change.

The result is the plan the stand-in driver (rehearse_driver.py) follows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .nemo_config import Override, OverrideError, apply_overrides, load_recipe, lookup, parse_entrypoint
from .releases import RELEASES
from .values_io import InputError

# grpo_math_1B.yaml's values (every release), used when the recipe file is not available.
RECIPE_DEFAULTS: dict[str, Any] = {
    "cluster": {"num_nodes": 1, "gpus_per_node": 1},
    "policy": {"generation": {"backend": "vllm", "colocated": {"enabled": True, "resources": {"num_nodes": None, "gpus_per_node": None}}}},
    "env": {"math": {"num_workers": 8}},
    "checkpointing": {"enabled": True},
}


class RunConfigError(Exception):
    """NeMo RL would stop on the config before asking Ray for anything."""


@dataclass(frozen=True)
class Settings:
    release: str
    known_release: bool
    venv_reservation_skips_cpuless_nodes: bool
    num_nodes: int
    gpus_per_node: int
    colocated: bool
    generation_nodes: int | None
    generation_gpus_per_node: int | None
    backend: str
    math_workers: int
    checkpointing: bool
    recipe_source: str  # where the recipe defaults came from


def _int(cfg: dict[str, Any], key: str, default: int | None) -> int | None:
    value = lookup(cfg, key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise RunConfigError(f"{key}={value!r}: NeMo RL needs a whole number here")
    return int(value)


def recipe_config(tag: str, recipe: str, fixtures: Path | None) -> tuple[dict[str, Any], str]:
    """The recipe merged over its `defaults:` chain, from the release's configs when available."""
    if fixtures is not None:
        path = fixtures / "nemo-rl" / tag / recipe
        if path.is_file():
            return load_recipe(path), f"{tag}/{recipe}"
    return RECIPE_DEFAULTS, "NeMo RL's grpo_math_1B defaults (recipe file not available)"


def _fixtures() -> Path | None:
    from .manifests import fixtures_dir

    try:
        return fixtures_dir()
    except FileNotFoundError:
        return None


def settings(tag: str, entrypoint: str, fixtures: Path | None = None) -> Settings:
    try:
        command = parse_entrypoint(entrypoint)
    except OverrideError as e:
        raise InputError(f"launch.json entrypoint: {e}") from None
    base, source = recipe_config(tag, command.recipe, fixtures if fixtures is not None else _fixtures())
    overrides = command.overrides
    if base is RECIPE_DEFAULTS:
        # Without the recipe, whether a key exists is unknown: apply every override as `++key=value`.
        overrides = ["++" + o.lstrip("+") for o in overrides]
    try:
        cfg = apply_overrides(base, overrides)
    except OverrideError as e:
        raise RunConfigError(f"OverridesError: Failed to parse Hydra overrides: {e}") from None
    rel = RELEASES.get(tag)
    num_nodes = _int(cfg, "cluster.num_nodes", 1) or 0
    gpus_per_node = _int(cfg, "cluster.gpus_per_node", 1) or 0
    if num_nodes < 1 or gpus_per_node < 1:
        raise RunConfigError(f"cluster.num_nodes={num_nodes} and cluster.gpus_per_node={gpus_per_node} must both be at least 1")
    return Settings(
        release=tag,
        known_release=rel is not None,
        # Unknown image tags are treated like v0.5.0/v0.6.0 (the stricter behaviour).
        venv_reservation_skips_cpuless_nodes=rel is not None and not rel.head_needs_cpu,
        num_nodes=num_nodes,
        gpus_per_node=gpus_per_node,
        colocated=bool(lookup(cfg, "policy.generation.colocated.enabled", True)),
        generation_nodes=_int(cfg, "policy.generation.colocated.resources.num_nodes", None),
        generation_gpus_per_node=_int(cfg, "policy.generation.colocated.resources.gpus_per_node", None),
        backend=str(lookup(cfg, "policy.generation.backend", "vllm")),
        math_workers=_int(cfg, "env.math.num_workers", 8) or 0,
        checkpointing=bool(lookup(cfg, "checkpointing.enabled", True)),
        recipe_source=source,
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
