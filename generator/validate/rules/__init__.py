"""Semantic rules on a schema-valid values document, one module per concern."""

from __future__ import annotations

from typing import Any

from generator.validate.findings import Finding
from generator.validate.rules import (
    accelerator,
    autopilot,
    environment,
    epochs,
    images,
    lifecycle,
    loggers,
    model_facts,
    names,
    nemo_rl,
    nemo_rl_asserts,
    networks,
    operations,
    ray_start,
    recipe,
    resources,
    secrets,
    storage,
    training,
)
from generator.validate.rules.context import Context

RULES = (
    accelerator,
    autopilot,
    resources,
    networks,
    nemo_rl,
    nemo_rl_asserts,
    recipe,
    epochs,
    model_facts,
    storage,
    names,
    secrets,
    operations,
    lifecycle,
    ray_start,
    images,
    environment,
    loggers,
    training,
)


def run_checks(values: dict[str, Any], release_name: str = "nemo-rl", set_file_keys: frozenset[str] = frozenset()) -> list[Finding]:
    ctx = Context(values, release_name, set_file_keys=set_file_keys)
    return [f for rule in RULES for f in rule.check(ctx)]
