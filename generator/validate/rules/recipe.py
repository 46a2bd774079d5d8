"""The run's recipe: the chosen release's own config (carried under vendor/nemo-rl/), merged over
its `defaults:` chain, with every override applied in order as NeMo RL applies them."""

from __future__ import annotations

import copy
from collections.abc import Iterator

from generator.nemo_rl.recipe_config import Override, OverrideError, apply_override
from generator.validate.findings import Finding, error
from generator.validate.rules.context import Context
from generator.vendored import MissingDataError, carried_releases, load_release_recipe


def check(ctx: Context) -> Iterator[Finding]:
    if not ctx.grpo.get("enabled", True):
        return
    tag = ctx.values["image"]["tag"]
    try:
        config = copy.deepcopy(load_release_recipe(tag, ctx.grpo["recipe"]))
    except MissingDataError as e:
        yield error("image.tag" if tag not in carried_releases() else "grpo.recipe", e.message, e.fix)
        return
    for list_name in ("overrides", "extraOverrides"):
        for arg in ctx.grpo.get(list_name) or []:
            try:
                ov = Override.parse(str(arg))
            except OverrideError:
                continue  # a syntax error: reported by the nemo_rl rules
            try:
                apply_override(config, ov)
            except OverrideError as e:
                yield error(f"grpo.{list_name}[{ov.key}]", f"{e} ({tag}'s {ctx.grpo['recipe']})", e.fix)
