"""Layered values, merged by Helm itself: `-f base.yaml -f overlay.yaml --set k=v --set-file k=path`.

Helm's merge (files in order, then --set-json, --set, --set-string, --set-file, each with Helm's
own parser for keys, list indexes, escapes and types) is not re-implemented here: the pinned Helm
renders a scratch chart whose only template prints `.Values` as JSON, over the chart's own
`values.yaml` (or over nothing, for `--no-chart-defaults`), with no schema, so that every problem
comes back as a finding of `validate` rather than as Helm's first error.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from generator.core.files import InputError, load_values
from generator.core.paths import CHART_DIR

SET_FLAGS = ("--set", "--set-string", "--set-file", "--set-json")


@dataclass(frozen=True)
class Layers:
    files: tuple[Path, ...]
    sets: tuple[tuple[str, str], ...] = ()  # (flag, "key=value"), as given
    chart_defaults: bool = True
    set_file_keys: frozenset[str] = field(default_factory=frozenset)  # keys whose value is a file's content

    @property
    def name(self) -> str:
        """How reports name the merged configuration (never a --set value: it may be a token)."""
        parts = [str(self.files[0]), *(f"-f {f}" for f in self.files[1:])]
        parts += [f"{flag} {arg.split('=', 1)[0]}=..." for flag, arg in self.sets]
        return " ".join(parts)


@dataclass(frozen=True)
class Configuration:
    """One configuration as `helm install` would take it: its name in reports and its values."""

    name: str
    values: Any
    set_file_keys: frozenset[str] = field(default_factory=frozenset)
    layers: Layers | None = None  # how it was layered, when it was

    def origin(self, key: str) -> str:
        """Which layer set `key` (a finding's dotted key), when several layers were merged: "" else."""
        return origin(self.layers, key) if self.layers is not None else ""


_PART = re.compile(r"\[([^\]]*)\]|([^.\[\]]+)")


def key_parts(key: str) -> list[str | int]:
    """`workerGroups[0].replicas` as ["workerGroups", 0, "replicas"] (findings' and --set's notation)."""
    return [int(i) if i.isdigit() else (i or name) for i, name in _PART.findall(key)]


def _sets(doc: Any, parts: list[str | int]) -> bool:
    """Whether a values document sets the key: it holds the key, or a list or value above it
    (Helm replaces a list whole, so the file holding the list set each entry)."""
    node = doc
    for part in parts:
        if not (isinstance(node, dict) and part in node):
            return isinstance(node, list)
        node = node[part]
    return True


def origin(spec: Layers, key: str) -> str:
    """The layer that set `key` last (a file, or a --set flag by its key), when more than one layer
    was merged and the key is not only the chart's default: "" otherwise."""
    if len(spec.files) + len(spec.sets) < 2:
        return ""
    parts = key_parts(key)
    found = ""
    for f in spec.files:
        if _sets(load_values(f), parts):
            found = str(f)
    for flag, arg in spec.sets:
        set_parts = key_parts(arg.split("=", 1)[0])
        n = min(len(set_parts), len(parts))
        if set_parts[:n] == parts[:n]:
            found = f"{flag} {arg.split('=', 1)[0]}"
    return found


def configurations(
    files: Sequence[Path], more: Sequence[Path] = (), sets: Sequence[tuple[str, str]] = (), chart_defaults: bool = True
) -> list[Configuration]:
    """With -f or --set flags: FILE and every -f merged into one configuration by the pinned Helm;
    without: each file on its own, over the chart's values.yaml (unless `chart_defaults` is off)."""
    from generator.values.merge import as_helm_sees_it

    if more or sets:
        spec = layers([*files, *more], sets, chart_defaults)
        return [Configuration(spec.name, merge(spec), spec.set_file_keys, spec)]
    out = []
    for path in files:
        doc = load_values(path)
        out.append(Configuration(str(path), as_helm_sees_it(doc) if chart_defaults else doc))
    return out


def helm_failure(spec: Layers, error: str) -> str:
    """Helm's error in one line naming the key, and with layers the layer that set it."""
    from generator.helm.runner import error_key, one_line

    source = origin(spec, key) if (key := error_key(error)) else ""
    return one_line(error) + (f" [set by {source}]" if source else "")


def add_layer_arguments(p: argparse.ArgumentParser, how: str) -> None:
    """-f MORE and the --set flags, as `helm install` takes them (args.more, args.sets)."""
    layered = p.add_argument_group(f"layered values (as helm install takes them; {how})")
    layered.add_argument(
        "-f", "--values", dest="more", action="append", type=Path, default=[], metavar="MORE", help="a further values file"
    )
    for flag in SET_FLAGS:
        layered.add_argument(flag, dest="sets", action="append", type=lambda v, f=flag: (f, v), default=[], metavar="KEY=VALUE")


def layers(files: Sequence[Path], sets: Sequence[tuple[str, str]], chart_defaults: bool) -> Layers:
    for flag, arg in sets:
        if "=" not in arg:
            raise InputError(f"{flag} {arg.split(',', 1)[0]!r}: expected key=value")
    keys = frozenset(arg.split("=", 1)[0] for flag, arg in sets if flag == "--set-file")
    return Layers(tuple(files), tuple(sets), chart_defaults, keys)


def merge(spec: Layers) -> dict[str, Any]:
    """The values `helm install -f ... --set ...` would use, computed by the pinned Helm."""
    from generator.helm.runner import HelmError, one_line, pinned_or_input_error

    for f in spec.files:
        load_values(f)  # size, type, YAML syntax and duplicate keys, each a one-line error naming the file
    helm = pinned_or_input_error()
    with tempfile.TemporaryDirectory(prefix="nemo-rl-gke-layers-") as tmp:
        chart = Path(tmp) / "layers"
        (chart / "templates").mkdir(parents=True)
        (chart / "Chart.yaml").write_text("apiVersion: v2\nname: layers\nversion: 0.0.0\n", encoding="utf-8")
        values = chart / "values.yaml"
        if spec.chart_defaults:
            shutil.copyfile(CHART_DIR / "values.yaml", values)
        else:
            values.write_text("{}\n", encoding="utf-8")
        (chart / "templates" / "values.json").write_text("{{ toJson .Values }}\n", encoding="utf-8")
        args = ["template", "layers", str(chart)]
        for f in spec.files:
            args += ["-f", str(f.resolve())]
        for flag, arg in spec.sets:
            args += [flag, arg]
        try:
            out = helm.run(args)
        except HelmError as e:
            raise InputError(f"{spec.name}: helm {helm.version} could not merge the values: {one_line(str(e))}") from None
    body = "\n".join(line for line in out.splitlines() if line and not line.startswith(("#", "---")))
    return json.loads(body)
