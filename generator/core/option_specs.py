"""Command-line options declared once: each `OptionSpec` gives the argparse argument, the field of
the options object it fills, and how it is written back in a generated file's header (the
canonical command that reproduces the file)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class OptionSpec:
    flag: str  # "--nodes"
    help: str = ""
    short: str = ""  # "-o"
    field: str | None = ""  # the options object's field; "" derives it from the flag; None: not an option (-o, --force)
    type: Callable[[str], Any] | None = None
    choices: Callable[[], Sequence[Any]] | None = None  # read when the parser is built (the tables may grow)
    required: bool = False  # required options are always in the header
    switch: bool = False  # store_true
    metavar: str | None = None
    section: str = ""  # argparse argument group title; "" the parser's own
    unset_default: bool = False  # argparse default None, to tell "not given" from the default
    convert: Callable[[Any], Any] | None = None  # a given value to the field's value
    show: Callable[[Any], str] = str  # the field's value as written in the header
    header: int | None = 0  # place in the header's command (ties keep the table order); None: left out

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def name(self) -> str:
        return self.field or self.dest


def _argument_kwargs(s: OptionSpec, defaults: Any) -> dict[str, Any]:
    if s.switch:
        return {"action": "store_true", "help": s.help}
    kw: dict[str, Any] = {"help": s.help or None}
    if s.required:
        kw["required"] = True
    elif s.field is not None:
        kw["default"] = None if s.unset_default else getattr(defaults, s.name)
    optional = {"type": s.type, "metavar": s.metavar, "choices": None if s.choices is None else tuple(s.choices())}
    return kw | {k: v for k, v in optional.items() if v is not None}


def add_arguments(parser: argparse.ArgumentParser, specs: Iterable[OptionSpec], defaults: Any) -> None:
    """One argparse argument per spec; defaults come from the options object `defaults`."""
    groups: dict[str, Any] = {}
    for s in specs:
        if s.section and s.section not in groups:
            groups[s.section] = parser.add_argument_group(s.section)
        target = groups[s.section] if s.section else parser
        target.add_argument(*([s.short, s.flag] if s.short else [s.flag]), **_argument_kwargs(s, defaults))


def options_of(args: argparse.Namespace, specs: Iterable[OptionSpec], defaults: T, **fields: Any) -> T:
    """The options object for the parsed `args`: an option not given keeps the default."""
    values: dict[str, Any] = {}
    for s in specs:
        if s.field is None:
            continue
        value = getattr(args, s.dest)
        if value is None:
            values[s.name] = getattr(defaults, s.name)
        else:
            values[s.name] = s.convert(value) if s.convert is not None else value
    return type(defaults)(**values | fields)


def canonical_argv(opts: Any, specs: Iterable[OptionSpec], defaults: Any) -> list[str]:
    """The options that shape the output, as the shortest command that gives them: required ones,
    then every other that differs from its default, in header order."""
    argv: list[str] = []
    for s in sorted((s for s in specs if s.field is not None and s.header is not None), key=lambda s: s.header or 0):
        value = getattr(opts, s.name)
        if s.switch:
            argv += [s.flag] if value else []
        elif s.required or value != getattr(defaults, s.name):
            argv += [s.flag, s.show(value)]
    return argv
