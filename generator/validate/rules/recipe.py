"""The run's recipe: the chosen release's own config (carried under vendor/nemo-rl/), merged over
its `defaults:` chain, with every override applied in order as NeMo RL applies them (Hydra and
OmegaConf: generator/nemo_rl/recipe_config.py). Every problem is reported, not only the first."""

from __future__ import annotations

from collections.abc import Iterator

from generator.nemo_rl.recipe_config import Override, OverrideError, grpo_override_args
from generator.validate.findings import Finding, error, warning
from generator.validate.rules.context import Context
from generator.vendored import MissingDataError, carried_releases, load_release_recipe


def _in_image(ctx: Context) -> Iterator[Finding]:
    """The preparation Job checks the run with the image's own NeMo RL code (prepare.checkRun);
    without it nothing but this offline check stands between a bad override and the GPUs."""
    prep = ctx.values.get("prepare") or {}
    if prep.get("enabled") and prep.get("checkRun", True):
        return
    key = "prepare.checkRun" if prep.get("enabled") else "prepare.enabled"
    yield warning(
        key,
        "off: nothing checks the run with its image's own NeMo RL config code before the launcher submits it",
        "set prepare.enabled and prepare.checkRun to true",
    )


def check(ctx: Context) -> Iterator[Finding]:
    """What nemo_rl/utils/config.py refuses at start (v0.5.0 to v0.7.0): load_config_with_inheritance
    a recipe that is not a mapping, parse_hydra_overrides an override Hydra cannot apply."""
    if not ctx.grpo.get("enabled", True):
        return
    yield from _in_image(ctx)
    tag = ctx.values["image"]["tag"]
    if ctx.recipe_check is None:
        try:
            load_release_recipe(tag, ctx.grpo["recipe"])  # raises, naming what is missing
        except MissingDataError as e:
            yield error("image.tag" if tag not in carried_releases() else "grpo.recipe", e.message, e.fix)
        return
    unparsed = set()
    for where, arg in grpo_override_args(ctx.grpo):
        try:
            Override.parse(arg)
        except OverrideError:
            unparsed.add(where)  # Hydra's grammar refuses it: reported by the nemo_rl rules, with Hydra's message
    for where, key, e in ctx.recipe_check[1]:
        if where not in unparsed:
            yield error(f"{where.split('[', 1)[0]}[{key}]", f"{e} ({tag}'s {ctx.grpo['recipe']})", e.fix)
