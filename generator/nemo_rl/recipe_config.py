"""NeMo RL recipe configs: merge a recipe's `defaults:` chain and apply command-line overrides
with the libraries NeMo RL itself uses, so a wrong key, a wrong `+` or a wrong value is caught
before a GPU is paid for.

NeMo RL v0.7.0 (nemo_rl/utils/config.py: `load_config_with_inheritance`, `merge_with_override`,
`parse_hydra_overrides`) loads a recipe with OmegaConf, merges it over its `defaults:` chain with
`OmegaConf.merge` (a section marked `_override_: true` replaces the parent's), turns on struct mode
and applies the overrides with Hydra's `OverridesParser` and `ConfigLoaderImpl._apply_overrides_to_config`.
This module calls the same functions (hydra-core and omegaconf, pinned in requirements/user.in):
  key=value    the key must exist in the merged config (struct mode);
  +key=value   the key must not exist yet; missing parents are created;
  ++key=value  sets the key whether or not it exists.
Values follow Hydra's override grammar (https://hydra.cc/docs/advanced/override_grammar/basic/).
On top of Hydra, `check_overrides` reports every problem at once, suggests the spelling of a near
miss, checks a value's type against the recipe's value, and refuses values NeMo RL or vLLM refuse
at start.

Hydra and OmegaConf take 0.2 s to import and more to run, so the common case has a fast path that
never imports them: every override a plain `key=value` (`+`, `++`) whose value is one literal of
Hydra's grammar (see `_plain_value`) set on a leaf of the recipe (`_check_plain`). Anything else
(quoted, lists, interpolations, a missing key, a section replaced) goes through Hydra; a test holds
both paths to the same results.
"""

from __future__ import annotations

import copy
import difflib
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

if TYPE_CHECKING:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import Override as HydraOverride
    from omegaconf import DictConfig


class OverrideError(ValueError):
    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.fix = fix  # how to fix it, when the usual "write key=value" does not apply


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


# --- the recipe, as NeMo RL loads it -------------------------------------------------------------


def _merge(base: DictConfig, child: DictConfig) -> DictConfig:
    """NeMo RL's `merge_with_override`: OmegaConf.merge, where `_override_: true` replaces a section."""
    from omegaconf import DictConfig, OmegaConf

    for key in list(child.keys()):
        node = child[key]
        if isinstance(node, DictConfig) and node.get("_override_", False):
            node.pop("_override_")
            if key in base:
                base.pop(key)
    return cast(DictConfig, OmegaConf.merge(base, child))


def _load(path: Path) -> DictConfig:
    from omegaconf import DictConfig, ListConfig, OmegaConf

    config = OmegaConf.load(path)
    if not isinstance(config, DictConfig):
        raise OverrideError(f"{path}: a recipe must be a mapping")
    if "defaults" in config:
        parents = config.pop("defaults")
        names = [str(parents)] if isinstance(parents, str) else [str(p) for p in parents] if isinstance(parents, ListConfig) else []
        base = OmegaConf.create({})
        for name in names:
            parent = Path(name) if name.startswith("/") else path.parent / name
            base = _merge(base, _load(parent))
        config = _merge(base, config)
    return config


@lru_cache(maxsize=32)
def _load_cached(path: Path, mtime: float) -> dict[str, Any]:
    from omegaconf import OmegaConf

    return cast(dict[str, Any], OmegaConf.to_container(_load(path), resolve=False))


def load_recipe(path: Path) -> dict[str, Any]:
    """The recipe merged over its `defaults:` chain (paths relative to each file), as NeMo RL merges it."""
    path = path.resolve()
    return _deepcopy(_load_cached(path, path.stat().st_mtime))


def _deepcopy(config: dict[str, Any]) -> dict[str, Any]:
    from omegaconf import OmegaConf

    return cast(dict[str, Any], OmegaConf.to_container(OmegaConf.create(config), resolve=False))


# --- one override, parsed by Hydra ---------------------------------------------------------------


@lru_cache(maxsize=1)
def _parser() -> OverridesParser:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def _hydra_parse(arg: str) -> HydraOverride:
    try:
        return _parser().parse_override(arg)
    except Exception as e:  # Hydra's OverrideParseException, or a value Python cannot hold
        raise OverrideError(
            f"{arg!r}: Hydra cannot parse it: {_one_line(e)}", "see https://hydra.cc/docs/advanced/override_grammar/basic/"
        ) from None


def _text(value: Any) -> str:
    """A Python value written back in Hydra's grammar."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, list):
        return "[" + ",".join(_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_text(v)}" for k, v in value.items()) + "}"
    return str(value)


@dataclass(frozen=True)
class Override:
    prefix: str  # "", "+" or "++"
    key: str
    value: Any
    hydra: HydraOverride | None = field(default=None, compare=False, repr=False)

    @classmethod
    def parse(cls, arg: str) -> Override:
        """The override as Hydra reads it (without Hydra when it is a plain one: `_plain_override`)."""
        plain = _plain_override(arg)
        return plain if plain is not None else cls.parse_with_hydra(arg)

    @classmethod
    def parse_with_hydra(cls, arg: str) -> Override:
        ov = _hydra_parse(arg)
        if ov.is_sweep_override() or ov.is_delete() or ov.package is not None:
            raise OverrideError(f"{arg!r}: a sweep, a deletion (~) or a package (@): NeMo RL sets values only", "write key=value")
        prefix = "++" if ov.is_force_add() else "+" if ov.is_add() else ""
        try:
            value = ov.value()
        except Exception as e:
            raise OverrideError(f"{arg!r}: Hydra cannot read its value: {_one_line(e)}") from None
        return cls(prefix, ov.key_or_group, value, ov)

    def to_hydra(self) -> HydraOverride:
        return self.hydra if self.hydra is not None else _hydra_parse(f"{self.prefix}{self.key}={_text(self.value)}")

    def __str__(self) -> str:
        return f"{self.prefix}{self.key}={_text(self.value)}"


# A plain override: an optional + or ++, a dotted key of identifiers, and one literal of Hydra's
# override grammar (hydra/grammar/OverrideLexer.g4: INT, FLOAT, BOOL, NULL, or an unquoted string of
# ID and UNQUOTED_CHAR tokens, which Hydra joins as written). Everything else is Hydra's to read.
_PLAIN_OVERRIDE = re.compile(r"(\+{0,2})([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)=(.*)", re.DOTALL)
_INT = re.compile(r"[+-]?(?:0|[1-9][0-9]*)")
_FLOAT = re.compile(r"[+-]?(?:0|[1-9][0-9]*)(?:\.[0-9]+(?:[eE][+-]?[0-9]+)?|[eE][+-]?[0-9]+)")
_WORD = re.compile(r"[A-Za-z_/][A-Za-z0-9_\-/.]*")
_WORDS_HYDRA_CONVERTS = {"true", "false", "null", "inf", "nan"}  # in any case: a bool, None or a float
_PLAIN_INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\}")


def _plain_value(text: str) -> Any:
    """The value Hydra reads from `text` when it is one plain literal, else _MISSING."""
    if _INT.fullmatch(text):
        return int(text) if len(text) <= 30 else _MISSING  # a huge one: Hydra says what it makes of it
    if _FLOAT.fullmatch(text):
        return float(text)
    if text in ("true", "false"):
        return text == "true"
    if text == "null":
        return None
    if _WORD.fullmatch(text) and text.lower() not in _WORDS_HYDRA_CONVERTS:
        return text
    return _MISSING


def _plain_override(arg: str) -> Override | None:
    """A plain override read without Hydra (what Hydra reads from it: a test holds the two to the
    same result), or None when Hydra must read it."""
    m = _PLAIN_OVERRIDE.fullmatch(arg)
    if m is None:
        return None
    value = _plain_value(m.group(3))
    return None if value is _MISSING else Override(m.group(1), m.group(2), value)


def parse_value(text: str) -> Any:
    """A value as Hydra's grammar reads it (true/false in any case, null, numbers, lists, strings)."""
    return Override.parse(f"k={text}").value


_MISSING = object()
W = TypeVar("W")  # where an override was given


def lookup(config: Mapping[str, Any], key: str, default: Any = _MISSING) -> Any:
    """The value at a dotted key, or `default` when a part of the path is missing."""
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def dotted_keys(config: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Every key of a nested config, as dotted paths (maps and leaves)."""
    out = []
    for k, v in config.items():
        key = f"{prefix}{k}"
        out.append(key)
        if isinstance(v, Mapping):
            out.extend(dotted_keys(v, key + "."))
    return out


# --- values the recipe's types and NeMo RL / vLLM refuse ---------------------------------------


def is_interpolation(value: Any) -> bool:
    """True when omegaconf's own grammar reads `value` as holding an interpolation (`${a.b}`,
    `${mul:${a},2}`, `x${a}`; not an escaped `\\${a}`). NeMo RL resolves the merged config with
    `OmegaConf.to_container(config, resolve=True)` at start, so such a value stands for what it
    resolves to, whatever the key's type (its own recipes write `max_new_tokens: ${policy...}`)."""
    if not isinstance(value, str) or "${" not in value:
        return False
    if _PLAIN_INTERPOLATION.fullmatch(value):
        return True
    from omegaconf import grammar_parser
    from omegaconf.errors import GrammarParseError
    from omegaconf.grammar.gen.OmegaConfGrammarParser import OmegaConfGrammarParser

    try:
        tree = grammar_parser.parse(value)
    except GrammarParseError:
        return False

    def holds(node: Any) -> bool:
        if isinstance(node, OmegaConfGrammarParser.InterpolationContext):
            return True
        return any(holds(c) for c in (node.getChildren() if hasattr(node, "getChildren") else ()))

    return holds(tree)


def register_resolvers() -> None:
    """The resolvers NeMo RL registers before it resolves a config (nemo_rl/utils/config.py
    `register_omegaconf_resolvers` from v0.6.0, `mul` in v0.5.0's examples/run_grpo_math.py),
    with the same meaning, when nothing registered them yet."""
    from omegaconf import OmegaConf

    for name, fn in (("mul", lambda a, b: a * b), ("div", lambda a, b: a / b), ("max", max)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


def _resolve(cfg: DictConfig, key: str) -> tuple[Any, OverrideError | None]:
    """(the value `key` resolves to in the merged config, or _MISSING when it cannot be resolved
    here; the problem NeMo RL's resolution would raise, when it surely would)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import InterpolationKeyError, OmegaConfBaseException, UnsupportedInterpolationType

    try:
        return OmegaConf.select(cfg, key, throw_on_resolution_failure=True), None
    except InterpolationKeyError as e:
        return _MISSING, OverrideError(
            f"{key}: its interpolation names a key the run's config lacks (omegaconf: {_one_line(e)});"
            " NeMo RL resolves the whole config at start and stops",
            "name an existing key, e.g. ${policy.max_total_sequence_length}",
        )
    except UnsupportedInterpolationType as e:
        return _MISSING, OverrideError(
            f"{key}: its interpolation calls a resolver neither omegaconf nor NeMo RL registers (omegaconf: {_one_line(e)})",
            "use ${other.key}, ${oc.env:VAR,default}, ${mul:a,b}, ${div:a,b} or ${max:a,b}",
        )
    except OmegaConfBaseException:
        return _MISSING, None  # e.g. ${oc.env:VAR} with VAR set only in the pod: not decidable here


def _kind(value: Any) -> str | None:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return None if is_interpolation(value) else "str"
    return None


def _type_problem(key: str, old: Any, new: Any) -> OverrideError | None:
    """A value of another type than the recipe's (Hydra itself accepts any: NeMo RL fails later)."""
    want, got = _kind(old), _kind(new)
    if want is None or got is None or got == want:
        return None
    if want == "float" and got == "int":
        return None
    if want == "str" and got in ("int", "float"):
        return None  # a number where a name is expected: often intended (a run name "1"), NeMo RL str()s it
    shown = _text(new)
    if want == "bool":
        return OverrideError(f"{key}={shown}: the recipe's value is a boolean ({_text(old)})", f"write {key}=true or {key}=false")
    if want == "int":
        return OverrideError(f"{key}={shown}: the recipe's value is a whole number ({old})", f"write a whole number, e.g. {key}={old}")
    if want == "float":
        return OverrideError(f"{key}={shown}: the recipe's value is a number ({old})", f"write a number, e.g. {key}={old}")
    return OverrideError(f"{key}={shown}: the recipe's value is a string ({old!r})", f"write {key}=<text>")


@dataclass(frozen=True)
class Bound:
    test: Callable[[float], bool]
    rule: str  # what NeMo RL or vLLM demands, as a sentence
    fix: str


BOUNDS: dict[str, Bound] = {
    # vLLM's CacheConfig: "GPU memory utilization must be less than 1.0" / must be > 0 (a fraction of the GPU).
    "policy.generation.vllm_cfg.gpu_memory_utilization": Bound(
        lambda x: 0 < x <= 1, "vLLM refuses a GPU memory fraction outside (0, 1]", "use a fraction such as 0.6"
    ),
    "policy.dtensor_cfg.tensor_parallel_size": Bound(lambda x: x >= 1, "a tensor-parallel size is at least 1", "use 1 or more"),
    "policy.generation.vllm_cfg.tensor_parallel_size": Bound(lambda x: x >= 1, "a tensor-parallel size is at least 1", "use 1 or more"),
    "grpo.num_generations_per_prompt": Bound(lambda x: x >= 1, "GRPO needs at least one generation per prompt", "use 2 or more"),
    "grpo.num_prompts_per_step": Bound(lambda x: x >= 1, "GRPO needs at least one prompt per step", "use 1 or more"),
    "grpo.max_num_steps": Bound(lambda x: x >= 1, "a run of no steps trains nothing", "use 1 or more"),
}


def _bound_problem(key: str, value: Any) -> OverrideError | None:
    bound = BOUNDS.get(key)
    if bound is None or isinstance(value, bool) or not isinstance(value, int | float) or bound.test(value):
        return None
    return OverrideError(f"{key}={_text(value)}: {bound.rule}", bound.fix)


# --- applying overrides ---------------------------------------------------------------------------


def _struct(config: Mapping[str, Any]) -> DictConfig:
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(dict(config))
    OmegaConf.set_struct(cfg, True)
    return cfg


def _apply(cfg: DictConfig, plain: Mapping[str, Any], ov: Override) -> None:
    """One override, applied by Hydra as NeMo RL applies it; its problems as an OverrideError."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    try:
        ConfigLoaderImpl._apply_overrides_to_config(overrides=[ov.to_hydra()], cfg=cfg)
    except Exception as e:
        hydra = _one_line(e)
        if ov.prefix == "" and lookup(plain, ov.key) is _MISSING:
            near = difflib.get_close_matches(ov.key, dotted_keys(plain), n=1, cutoff=0.8)
            fix = f"did you mean {near[0]}?" if near else f"check its spelling, or add a new key with '+{ov.key}=...'"
            raise OverrideError(f"{ov.key}: not in the recipe's config (Hydra: {hydra})", fix) from None
        if ov.prefix == "+":
            raise OverrideError(f"+{ov.key}: already in the recipe's config (Hydra: {hydra})", f"write {ov.key}=... without '+'") from None
        raise OverrideError(f"{ov}: Hydra refuses it: {hydra}") from None


def _check_value(plain: Mapping[str, Any], ov: Override, value: Any = _MISSING) -> OverrideError | None:
    """The override's value (or `value`, what its interpolation resolved to) against the recipe's."""
    old = lookup(plain, ov.key)
    new = ov.value if value is _MISSING else value
    return (_type_problem(ov.key, old, new) if old is not _MISSING else None) or _bound_problem(ov.key, new)


def _check_interpolations(
    cfg: DictConfig, pending: Mapping[str, tuple[W, Override, Mapping[str, Any]]]
) -> list[tuple[W, str, OverrideError]]:
    """Each override whose value is an interpolation, judged by what it resolves to once every
    override is applied (omegaconf resolves the run's config after the last one)."""
    problems: list[tuple[W, str, OverrideError]] = []
    for key, (where, ov, before) in pending.items():
        value, bad = _resolve(cfg, key)
        if bad is None and value is not _MISSING:
            bad = _check_value(before, ov, value)
        if bad is not None:
            problems.append((where, key, bad))
    return problems


def _check_plain(
    config: Mapping[str, Any], entries: list[tuple[W, str]]
) -> tuple[dict[str, Any], list[tuple[W, str, OverrideError]]] | None:
    """check_overrides without Hydra when every override is plain and sets a leaf the way Hydra
    would without question: `key=` and `++key=` an existing leaf, `+key=` and `++key=` a new key
    (its missing or null sections created). None when any is not (then Hydra applies them all)."""
    parsed = []
    for where, arg in entries:
        ov = _plain_override(arg)
        if ov is None:
            return None
        parsed.append((where, ov))
    plain = copy.deepcopy(dict(config))
    problems: list[tuple[W, str, OverrideError]] = []
    for where, ov in parsed:
        *parents, leaf = ov.key.split(".")
        node: Any = plain
        for part in parents:
            if not isinstance(node, dict):
                return None
            if ov.prefix and node.get(part) is None:
                node[part] = {}  # `+`/`++` create a missing or null section, as Hydra does
            node = node.get(part)
        if not isinstance(node, dict):
            return None
        exists, old = leaf in node, node.get(leaf)
        if isinstance(old, dict | list) or (ov.prefix == "" and not exists) or (ov.prefix == "+" and exists):
            return None  # a section merged or replaced, a missing key, a key added twice: Hydra says what happens
        if isinstance(old, str) and "${" in old and not _PLAIN_INTERPOLATION.fullmatch(old):
            return None  # whether the recipe's value is an interpolation is omegaconf's grammar to say
        bad = _check_value(plain, ov)
        node[leaf] = ov.value
        if bad is not None:
            problems.append((where, ov.key, bad))
    return plain, problems


def check_overrides(
    config: Mapping[str, Any], entries: Iterable[tuple[W, str]]
) -> tuple[dict[str, Any], list[tuple[W, str, OverrideError]]]:
    """Apply every override in order, as NeMo RL does, and collect every problem instead of stopping
    at the first: (the config with every good override applied, [(where, key, problem)]).
    `key` is the override's key, or its whole text when Hydra cannot parse it."""
    entries = list(entries)
    plain_result = _check_plain(config, entries)
    return plain_result if plain_result is not None else check_overrides_with_hydra(config, entries)


def check_overrides_with_hydra(
    config: Mapping[str, Any], entries: Iterable[tuple[W, str]]
) -> tuple[dict[str, Any], list[tuple[W, str, OverrideError]]]:
    """check_overrides, every override read and applied by Hydra."""
    from omegaconf import OmegaConf

    register_resolvers()
    plain = _deepcopy(dict(config))
    cfg = _struct(plain)
    problems: list[tuple[W, str, OverrideError]] = []
    pending: dict[str, tuple[W, Override, Mapping[str, Any]]] = {}  # interpolations, judged at the end
    for where, arg in entries:
        try:
            ov = Override.parse_with_hydra(arg)
        except OverrideError as e:
            problems.append((where, arg, e))
            continue
        try:
            _apply(cfg, plain, ov)
        except OverrideError as e:
            problems.append((where, ov.key, e))
            continue
        pending.pop(ov.key, None)
        if is_interpolation(ov.value):
            pending[ov.key] = (where, ov, plain)
        elif (bad := _check_value(plain, ov)) is not None:
            problems.append((where, ov.key, bad))
        plain = cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=False))
    return plain, problems + _check_interpolations(cfg, pending)


def apply_override(config: dict[str, Any], ov: Override) -> None:
    """Apply one override in place; an OverrideError names what NeMo RL would refuse."""
    from omegaconf import OmegaConf

    register_resolvers()
    cfg = _struct(config)
    _apply(cfg, config, ov)
    if is_interpolation(ov.value):
        value, bad = _resolve(cfg, ov.key)
        bad = bad or (_check_value(config, ov, value) if value is not _MISSING else None)
    else:
        bad = _check_value(config, ov)
    if bad is not None:
        raise bad
    config.clear()
    config.update(cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=False)))


def apply_overrides(config: dict[str, Any], args: list[str]) -> dict[str, Any]:
    """Every override applied; the first problem as an OverrideError (all of them in its message
    when there are several: `check_overrides` returns them one by one)."""
    out, problems = check_overrides(config, ((i, a) for i, a in enumerate(args)))
    if problems:
        first = problems[0][2]
        if len(problems) == 1:
            raise first
        rest = "; ".join(str(p) for _, _, p in problems[1:])
        raise OverrideError(f"{first} (and {len(problems) - 1} more: {rest})", first.fix)
    return out


def grpo_override_args(grpo: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(values path, argument) of each override in the values file's `grpo` section, in the order
    the chart passes them to NeMo RL: grpo.overrides, then grpo.extraOverrides."""
    given = [(f"grpo.overrides[{i}]", str(a)) for i, a in enumerate(grpo.get("overrides") or [])]
    return given + [(f"grpo.extraOverrides[{i}]", str(a)) for i, a in enumerate(grpo.get("extraOverrides") or [])]


def winning(overrides: Iterable[tuple[W, Override]]) -> dict[str, tuple[W, Override]]:
    """Each key's override that takes effect: NeMo RL applies them in order, so the last one wins
    (a key keeps the place of its first setting)."""
    out: dict[str, tuple[W, Override]] = {}
    for where, ov in overrides:
        out[ov.key] = (where, ov)
    return out


@dataclass(frozen=True)
class Command:
    script: str
    recipe: str
    overrides: list[str]


def parse_entrypoint(entrypoint: str) -> Command:
    """Split the chart's `cd DIR && uv run python SCRIPT --config RECIPE overrides...`."""
    words = shlex.split(entrypoint)
    try:
        i = words.index("python")
        script = words[i + 1]
        if words[i + 2] != "--config":
            raise OverrideError("expected --config after the script")
        return Command(script, words[i + 3], words[i + 4 :])
    except (ValueError, IndexError):
        raise OverrideError(f"not a NeMo RL command: {entrypoint[:120]!r}") from None
