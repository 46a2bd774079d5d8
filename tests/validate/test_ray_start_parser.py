"""`validate` against the real judge of `ray start` parameters: KubeRay's command line (pod.go's
`setMissingRayStartParams` and `convertParamMap`, as generator/gke/ray_start.py cites), split by
real bash as the container's `bash -c` does, parsed by Ray's own click command
(`ray.scripts.scripts.start`, never run). The corpus is generated: the values keys are every
`rayStartParams` map the values schema declares, the option names every option of the installed
Ray's command plus near misses of each, the values one of each shape click and bash read
differently. A case the judge refuses and `validate` accepts, or the reverse, fails with the case."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import click
import pytest
from ray.scripts.scripts import start

from generator.core.schema import load_schema
from generator.gke import ray_start
from generator.validate.rules import ray_start as rule
from generator.validate.rules.context import Context

# One value of each shape: whole numbers, signs, floats, words, booleans in KubeRay's and click's
# spellings, the shell's word splitting and quoting, JSON, Ray's choices, empty.
VALUES = (
    "8", "0", "-1", "+3", "1_000", "1.5", "1e3", "abc", "", "true", "false", "TRUE", "yes", "off",
    "a b", "'a b'", "'x", '"y"', '{"a":1}', "[1,2]", "auto", "pretty", "record", "78643200", "1024",
)  # fmt: skip

# Where the judge is not Ray's parser: rules that refuse what Ray parses, each with its reason.
EXCLUSIONS = {
    "the chart sets it": "head.rayStartParams.dashboard-host: the chart writes it; a second one is a duplicate key",
    "dashboard off": "include-dashboard false on the head: Ray starts, but the launcher and the probes need the dashboard",
    "minimum object store": "ray/_private/services.py refuses it when ray start runs, after parsing",
    "KubeRay passes a true value": (
        "a bare --option needing a value: click takes the next option (KubeRay's next parameter)"
        " as its value, so the parse passes and that option is lost"
    ),
}
# KubeRay's own parameters on every pod (pod.go setMissingRayStartParams / generateRayStartCommand).
KUBERAY = {"metrics-export-port": "8080", "dashboard-agent-listen-port": "52365", "num-cpus": "4", "memory": "17179869184"}


def schema_maps() -> list[str]:
    """Every values key whose schema is the rayStartParams map."""
    schema = load_schema()
    found = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            if node.get("$ref") == "#/$defs/rayStartParams":
                found.append(path)
            for key, sub in (node.get("properties") or {}).items():
                walk(sub, f"{path}.{key}" if path else key)

    walk(schema, "")
    return found


def options() -> list[str]:
    """Ray's options and a near miss of each (underscores, a letter dropped)."""
    names = [p.opts[-1][2:] for p in start.params if isinstance(p, click.Option)]
    return names + [n.replace("-", "_") for n in names if "-" in n] + [n[:-1] for n in names[::3]]


def cases() -> Iterator[tuple[str, str, str]]:
    for where in schema_maps():
        for key in options():
            for value in VALUES:
                yield where, key, value


def kuberay_line(where: str, key: str, value: str) -> str:
    head = where.startswith("head")
    params = dict(KUBERAY) | ({"dashboard-host": "0.0.0.0"} if head else {"address": "nemo-rl-head-svc:6379"})
    params[key] = value
    params["block"] = "true"
    return ("ray start --head " if head else "ray start ") + "".join(ray_start.kuberay_words(k, params[k]) for k in sorted(params))


def bash_words(lines: list[str]) -> list[list[str] | None]:
    """Each command line as bash splits it (None when bash cannot parse it), in one bash process."""
    script = 'ray() { shift; printf "%s\\0" "$@"; }; for c in "$@"; do eval "$c" 2>/dev/null || printf "\\2"; printf "\\1"; done'
    out = subprocess.run(["bash", "-c", script, "_", *lines], capture_output=True, check=True).stdout.decode()
    records = out.split("\x01")[:-1]
    assert len(records) == len(lines)
    return [None if r.endswith("\x02") else r.split("\x00")[:-1] for r in records]


def ray_refuses(words: list[str] | None) -> str | None:
    if words is None:
        return "bash cannot parse the line"
    try:
        start.make_context("start", list(words))
    except click.ClickException as e:
        return e.format_message()
    return None


def ours(where: str, key: str, value: str) -> list[str]:
    part = where.split(".", maxsplit=1)[0]
    values = {"head": {}, "worker": {}}
    values[part]["rayStartParams"] = {key: value}
    return [f.message for f in rule.check(Context(values)) if f.level == "error"]


def excluded(messages: list[str]) -> bool:
    return bool(messages) and all(any(mark in m for mark in EXCLUSIONS) for m in messages)


def test_the_options_table_is_the_installed_rays():
    names = {p.opts[-1][2:] for p in start.params if isinstance(p, click.Option)}
    assert set(ray_start.OPTIONS) == names
    flags = {p.opts[-1][2:] for p in start.params if isinstance(p, click.Option) and (p.is_flag or p.count)}
    assert {k for k, kind in ray_start.OPTIONS.items() if kind == "flag"} == flags


def test_validate_agrees_with_kuberay_bash_and_rays_parser():
    all_cases = list(cases())
    assert len(all_cases) >= 500
    verdicts = bash_words([kuberay_line(*c) for c in all_cases])
    disagreements, refused = [], 0
    for case, words in zip(all_cases, verdicts, strict=True):
        judge, mine = ray_refuses(words), ours(*case)
        refused += judge is not None
        if (judge is None) != (not mine) and not (judge is None and excluded(mine)):
            disagreements.append(f"{case[0]}.{case[1]}={case[2]!r}: ray start: {judge or 'accepts'}; validate: {mine or 'accepts'}")
    assert 0 < refused < len(all_cases)
    assert not disagreements, f"{len(disagreements)} of {len(all_cases)}:\n" + "\n".join(disagreements[:30])


@pytest.mark.parametrize(
    ("where", "key", "value", "message"),
    [
        ("head", "include-dashboard", "false", "dashboard off"),
        ("head", "dashboard-host", "127.0.0.1", "the chart sets it"),
        ("worker", "object-store-memory", "1000000", "minimum object store"),
    ],
)
def test_what_starts_ray_but_breaks_the_run_is_refused(where, key, value, message):
    assert ray_refuses(bash_words([kuberay_line(where, key, value)])[0]) is None
    assert any(message in m for m in ours(where, key, value))
