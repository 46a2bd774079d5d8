"""NeMo RL recipe configs: merge a recipe's `defaults:` chain and apply command-line overrides
with NeMo RL's rules, so a wrong key or a wrong `+` is caught before a GPU is paid for.

Rules (Hydra's override grammar, as NeMo RL applies it):
  key=value    the key must exist in the merged config;
  +key=value   the key must not exist yet (or be null); missing parents are created;
  ++key=value  sets the key whether or not it exists.
Values: true/false (any case) are booleans, null is None, numbers are numbers, else strings.
"""

from __future__ import annotations

import copy
import difflib
import re
import shlex
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_INT = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$")


class OverrideError(ValueError):
    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.fix = fix  # how to fix it, when the usual "write key=value" does not apply


def _merge(base: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in child.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def load_recipe(path: Path) -> dict[str, Any]:
    """The recipe merged over its `defaults:` chain (paths relative to each file)."""
    doc = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader) or {}  # noqa: S506 - a safe loader
    parents = doc.pop("defaults", None)
    merged: dict[str, Any] = {}
    for parent in [parents] if isinstance(parents, str) else parents or []:
        merged = _merge(merged, load_recipe((path.parent / parent).resolve()))
    return _merge(merged, doc)


def parse_value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low == "null":
        return None
    if _INT.fullmatch(text):
        try:
            return int(text)
        except ValueError:  # more digits than Python (so Hydra, in NeMo RL) converts
            digits = len(text.lstrip("+-"))
            raise OverrideError(
                f"a number with {digits} digits: NeMo RL cannot read it", f"write at most {sys.get_int_max_str_digits()} digits"
            ) from None
    if _FLOAT.fullmatch(text):
        return float(text)
    return text


@dataclass(frozen=True)
class Override:
    prefix: str  # "", "+" or "++"
    key: str
    value: Any

    @classmethod
    def parse(cls, arg: str) -> Override:
        m = re.fullmatch(r"^(\+{0,2})([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)=(.*)$", arg)
        if not m:
            raise OverrideError(f"{arg!r} is not an override of the form [+|++]key=value")
        return cls(m.group(1), m.group(2), parse_value(m.group(3)))


_MISSING = object()
W = TypeVar("W")  # where an override was given


def lookup(config: dict[str, Any], key: str, default: Any = _MISSING) -> Any:
    """The value at a dotted key, or `default` when a part of the path is missing."""
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def dotted_keys(config: dict[str, Any], prefix: str = "") -> list[str]:
    """Every key of a nested config, as dotted paths (maps and leaves)."""
    out = []
    for k, v in config.items():
        key = f"{prefix}{k}"
        out.append(key)
        if isinstance(v, dict):
            out.extend(dotted_keys(v, key + "."))
    return out


def apply_override(config: dict[str, Any], ov: Override) -> None:
    current = lookup(config, ov.key)
    if ov.prefix == "" and current is _MISSING:
        near = difflib.get_close_matches(ov.key, dotted_keys(config), n=1, cutoff=0.8)
        fix = f"did you mean {near[0]}?" if near else f"check its spelling, or add a new key with '+{ov.key}=...'"
        raise OverrideError(f"{ov.key}={ov.value}: key not in the recipe's config", fix)
    if ov.prefix == "+" and current is not _MISSING and current is not None:
        raise OverrideError(f"+{ov.key}: key already in the recipe's config", f"write {ov.key}=... without '+'")
    node = config
    parts = ov.key.split(".")
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = ov.value


def apply_overrides(config: dict[str, Any], args: list[str]) -> dict[str, Any]:
    out = copy.deepcopy(config)
    for arg in args:
        apply_override(out, Override.parse(arg))
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
