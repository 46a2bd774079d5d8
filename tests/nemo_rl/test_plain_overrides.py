"""The Hydra-free fast path (recipe_config._plain_override, _check_plain; Context._plain_setting)
gives exactly what Hydra and OmegaConf give, wherever it answers at all."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf

from generator.nemo_rl import recipe_config as rc
from generator.validate.rules import context as context_module
from generator.validate.rules.context import Context
from generator.vendored import load_release_recipe

ROOT = Path(__file__).resolve().parents[2]
VALUES_FILES = sorted([*(ROOT / "examples").glob("*.yaml"), *(ROOT / "charts" / "nemo-rl-gke" / "ci").glob("*-values.yaml")])
VALUES_FILES.append(ROOT / "charts" / "nemo-rl-gke" / "values.yaml")
# the files the generator wrote (a few ci/ files are hand-written overlays of a part)
VALUES_FILES = [p for p in VALUES_FILES if p.read_text(encoding="utf-8").startswith("# Values for the nemo-rl-gke chart, written by")]

VALUE_TEXTS = [
    # numbers as Hydra's lexer reads them, and near misses
    *(
        [
            "0",
            "1",
            "-1",
            "+5",
            "10",
            "007",
            "1_000",
            "-0",
            "1.5",
            "-0.5",
            "+0.25",
            "1e-5",
            "1E5",
            "1.0e+3",
            "2.5e-06",
            ".5",
            "5.",
            "0.0",
            "00.5",
            "1e",
            "1.e5",
        ]
    ),
    *(["inf", "-inf", "+inf", "Inf", "INF", "nan", "NaN", "-nan", "infinity", "Infinity", "nan.5", "inf_x"]),
    *(["true", "false", "True", "TRUE", "False", "tRuE", "null", "NULL", "Null", "none", "None", "true_x", "falsey"]),
    # strings
    *(
        [
            "Qwen/Qwen2.5-1.5B",
            "/data/nemo-rl/run/checkpoints",
            "a-inf",
            "e5",
            "E5",
            "a..b",
            "x.y",
            "_a",
            "a/b/",
            "a-b-",
            "gsm8k",
            "test",
            "vllm",
        ]
    ),
    *(["a:b", "a@b", "a$b", "a%b", "a*b", "a?b", "a|b", "a\\b"]),
    "a b",
    "1" * 5000,  # more digits than Python converts by default
    "9" * 31,
    " a",
    "a ",
    "",
    "'quoted'",
    '"quoted"',
    "${a.b}",
    "x${a}",
    "a,b",
    "[1,2]",
    "{a:1}",
    "choice(1,2)",
    "a=b",
    "\\${a}",
]
KEYS = ["a", "a.b", "+a.b", "++a.b", "a_b.c1", "a-b", "a/b", "a@b", "a.b@c", "~a", "1a", "a..b", "+++a"]


def _hydra(arg: str) -> tuple[str, str, Any, type] | str:
    try:
        ov = rc.Override.parse_with_hydra(arg)
    except rc.OverrideError as e:
        return f"refused: {e}"
    return ov.prefix, ov.key, ov.value, type(ov.value)


@pytest.mark.parametrize("key", KEYS)
def test_a_plain_override_reads_as_hydra_reads_it(key):
    taken = 0
    for text in VALUE_TEXTS:
        arg = f"{key}={text}"
        plain = rc._plain_override(arg)
        if plain is None:
            continue
        taken += 1
        assert (plain.prefix, plain.key, plain.value, type(plain.value)) == _hydra(arg), arg
    if key in ("a", "a.b", "+a.b", "++a.b", "a_b.c1"):
        assert taken > 30  # the fast path covers the common literals


def _overrides(path: Path) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    values = yaml.safe_load(path.read_text(encoding="utf-8"))
    return load_release_recipe(values["image"]["tag"], values["grpo"]["recipe"]), rc.grpo_override_args(values["grpo"])


def _same(fast: Any, slow: Any) -> None:
    assert fast[0] == slow[0]
    assert [(w, k, str(e), e.fix) for w, k, e in fast[1]] == [(w, k, str(e), e.fix) for w, k, e in slow[1]]


@pytest.mark.parametrize("path", VALUES_FILES, ids=lambda p: p.name)
def test_every_generated_file_takes_the_fast_path_with_hydras_result(path):
    base, args = _overrides(path)
    fast = rc._check_plain(base, args)
    assert fast is not None, "a generated file's overrides are plain: the generator stays under 0.3 s"
    _same(fast, rc.check_overrides_with_hydra(base, args))


MISTAKES = [
    "grpo.max_num_steps=abc",
    "grpo.max_num_steps=0",
    "grpo.max_num_steps=2.5",
    "policy.model_name=5",
    "policy.generation.vllm_cfg.gpu_memory_utilization=1.5",
    "checkpointing.enabled=yes",
    "+data.validation.dataset_name=gsm8k",
    "++grpo.max_num_steps=7",
    "++grpo.brand_new=1",
    "+grpo.new_section.key=x",
    "policy.max_total_sequence_length=true",
    "policy.generation.max_new_tokens=12",
    "grpo.no_such_key=1",
    "+grpo.max_num_steps=3",
    "policy=1",
    "grpo.max_num_steps='3'",
    "policy.generation.max_new_tokens=${policy.max_total_sequence_length}",
]


@pytest.mark.parametrize("mistake", MISTAKES)
def test_mistakes_get_hydras_findings_on_either_path(mistake):
    base, args = _overrides(ROOT / "examples" / "quickstart-h200.yaml")
    entries = [*args, ("grpo.extraOverrides[0]", mistake)]
    _same(rc.check_overrides(base, entries), rc.check_overrides_with_hydra(base, entries))


@pytest.mark.parametrize("path", VALUES_FILES[:: max(1, len(VALUES_FILES) // 6)], ids=lambda p: p.name)
def test_settings_read_without_omegaconf_are_omegaconfs(path):
    values = yaml.safe_load(path.read_text(encoding="utf-8"))
    ctx = Context(values)
    assert ctx.recipe_check is not None
    config = OmegaConf.create(ctx.recipe_check[0])
    keys = [*rc.dotted_keys(ctx.recipe_check[0]), "no.such.key", "grpo.no_such_key", "policy.model_name.deeper"]
    answered = 0
    for key in keys:
        try:
            want = OmegaConf.select(config, key, default=None)
        except Exception:
            want = None
        section = isinstance(want, DictConfig | ListConfig)
        if section:
            want = OmegaConf.to_container(want, resolve=False)
        got = ctx._plain_setting(key, 0, sections=True)
        if got is context_module._SLOW:
            continue
        answered += 1
        assert got == want, key
        if not section:
            assert ctx.setting(key) == want, key
    assert answered > len(keys) // 2
