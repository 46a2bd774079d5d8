"""An override whose value is an omegaconf interpolation (`key=${other.key}`), judged against the
real judge: Hydra applies the override to the merged recipe in struct mode and omegaconf resolves
the whole config (`OmegaConf.to_container(config, resolve=True)`, what NeMo RL's entry scripts do
at start). The cases are generated from every scalar key of each release's recipe, not listed:
  - `key=${ref}` with `ref` a key of the same type: the judge resolves it and `check_overrides`
    accepts it, whatever the key's type (the false rejection of issue 25);
  - `key=${no.such.key}`: the judge stops, and so does `check_overrides`;
  - `key=${ref}` with `ref` of another type: `check_overrides` says exactly what it says of the
    literal value `ref` resolves to (an interpolation is no loophole, and no special case)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from generator.nemo_rl.recipe_config import (
    _text,
    check_overrides,
    dotted_keys,
    is_interpolation,
    load_recipe,
    lookup,
    register_resolvers,
)
from generator.nemo_rl.releases import RELEASES
from generator.nemo_rl.run_spec import MODELS
from generator.vendored import recipe_path

TAGS = sorted(RELEASES)
RECIPE = MODELS["qwen2.5-1.5b"].recipe  # the base recipe (grpo_math_1B.yaml), every other one's parent


def judge(config: dict[str, Any], args: list[str]) -> dict[str, Any] | None:
    """The run's config as omegaconf resolves it after Hydra's overrides, or None when it stops."""
    register_resolvers()
    cfg = OmegaConf.create(config)
    OmegaConf.set_struct(cfg, True)
    try:
        parsed = OverridesParser.create().parse_overrides(args)
        ConfigLoaderImpl._apply_overrides_to_config(overrides=parsed, cfg=cfg)
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except OmegaConfBaseException:
        return None


def kind(value: Any) -> type | None:
    return type(value) if isinstance(value, bool | int | float | str) else None


def scalar_keys(resolved: dict[str, Any]) -> list[str]:
    return [k for k in dotted_keys(resolved) if kind(lookup(resolved, k)) is not None]


def batches(tag: str) -> Iterator[tuple[str, dict[str, tuple[str, Any]]]]:
    """Every scalar key of the recipe as a target, in two halves (alternate keys); each target
    refers to a key of the other half, so no reference is itself overridden in its batch:
    ("same", {target: (reference, its value)}) with a reference of the target's type, and
    ("other", ...) with one of another type."""
    resolved = judge(load_recipe(recipe_path(tag, RECIPE)), [])
    assert resolved is not None, f"{tag}: the recipe itself does not resolve"
    keys = scalar_keys(resolved)
    for half in (0, 1):
        targets, refs = keys[half::2], keys[1 - half :: 2]
        for which in ("same", "other"):
            batch = {}
            for key in targets:
                want = kind(lookup(resolved, key))
                fits = [r for r in refs if (kind(lookup(resolved, r)) is want) == (which == "same")]
                if which == "other":  # an int where a float is expected is no mismatch for NeMo RL
                    fits = [r for r in fits if not (want is float and kind(lookup(resolved, r)) is int)]
                if fits:
                    batch[key] = (fits[0], lookup(resolved, fits[0]))
            yield which, batch


def problems(tag: str, args: list[str]) -> dict[str, str]:
    """{key: problem} of `check_overrides` over the recipe with `args`."""
    _, found = check_overrides(load_recipe(recipe_path(tag, RECIPE)), ((a, a) for a in args))
    return {key: str(p) for _, key, p in found}


@pytest.mark.parametrize("tag", TAGS)
def test_interpolations_are_judged_as_omegaconf_resolves_them(tag):
    """Per key, the verdict on `key=${ref}` is the verdict on the literal `ref` resolves to; with a
    reference of the key's own type omegaconf resolves the run's config and the key keeps its type."""
    base = load_recipe(recipe_path(tag, RECIPE))
    plain = judge(base, []) or {}
    recipe_types = {k: kind(lookup(plain, k)) for k in dotted_keys(plain)}
    seen, report = 0, []
    for which, batch in batches(tag):
        interps = [f"{k}=${{{ref}}}" for k, (ref, _) in batch.items()]
        literals = [f"{k}={_text(v)}" for k, (_, v) in batch.items()]
        ours, as_literal = problems(tag, interps), problems(tag, literals)
        resolved = judge(base, interps)
        assert resolved is not None, f"{tag}: omegaconf does not resolve {interps}"
        for key, (ref, _) in batch.items():
            seen += 1
            if (key in ours) != (key in as_literal):
                report.append(f"{key}=${{{ref}}}: ours {ours.get(key, 'accepts')}; the literal: {as_literal.get(key, 'accepted')}")
            if which == "same" and kind(lookup(resolved, key)) is recipe_types[key] and key in ours:
                report.append(f"{key}=${{{ref}}} resolves to the key's own type, yet: {ours[key]}")
    assert seen > 200, seen
    assert not report, "\n".join(report[:20])


@pytest.mark.parametrize("tag", TAGS)
def test_an_interpolation_of_a_missing_key_stops_the_judge_and_is_refused(tag):
    base = load_recipe(recipe_path(tag, RECIPE))
    keys = scalar_keys(judge(base, []) or {})
    args = [f"{key}=${{grpo.no_such_key}}" for key in keys]
    ours = problems(tag, args)
    assert sorted(k for k, p in ours.items() if "names a key the run's config lacks" in p) == sorted(keys)
    for arg in args[::25]:
        assert judge(base, [arg]) is None, arg


def test_the_base_recipes_own_interpolation_is_accepted():
    """NeMo RL's base recipe writes max_new_tokens: ${policy.max_total_sequence_length}."""
    for tag in TAGS:
        arg = "policy.generation.max_new_tokens=${policy.max_total_sequence_length}"
        assert problems(tag, [arg, "grpo.max_num_steps=${grpo.val_period}"]) == {}


def test_the_last_override_wins_over_an_interpolation():
    tag = TAGS[-1]
    assert problems(tag, ["grpo.max_num_steps=${grpo.nope}", "grpo.max_num_steps=5"]) == {}
    assert problems(tag, ["grpo.max_num_steps=5", "grpo.max_num_steps=${grpo.nope}"])


@pytest.mark.parametrize(
    ("text", "holds"),
    [
        ("${a.b}", True),
        ("x${a}y", True),
        ("${mul:${a},2}", True),
        ("${oc.env:HOME,/root}", True),
        ("\\${a}", False),
        ("plain", False),
        ("${a", False),
    ],
)
def test_interpolations_are_read_by_omegaconfs_grammar(text, holds):
    assert is_interpolation(text) is holds
