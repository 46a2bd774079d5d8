"""core.schema.conforms (the plain check that spares `validate` and the generator jsonschema on a
valid document) against jsonschema itself: it must say "valid" exactly when jsonschema finds
nothing, so iter_errors' findings are jsonschema's whenever there is something to find."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import values_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_schema import BAD

from generator.core.schema import _validator, conforms, iter_errors
from generator.validate.values import with_helm_keys
from generator.values.build import Options, build

ROOT = Path(__file__).resolve().parents[2]


def jsonschema_valid(doc: Any) -> bool:
    return next(iter(_validator().iter_errors(doc)), None) is None


def _bases() -> list[dict[str, Any]]:
    docs = [yaml.safe_load(p.read_text()) for p in sorted((ROOT / "examples").glob("*.yaml"))]
    docs += [values_for(gpu, nodes=n) for gpu in ("b200", "h200") for n in (1, 8)]
    docs += [values_for("gb200", nodes=n, reservation="a4x-r1") for n in (1, 8)]  # A4X: reservation only
    docs += [
        build(Options(gpu="h200", mode="autopilot", name="my-run")),
        build(Options(gpu="h200", network="tcp", storage_claim="my-claim", kueue_queue="q", wandb=True, secret="s")),  # noqa: S106 - a Secret's name
        build(Options(gpu="b200", provisioning="reservation", reservation="r1", release="v0.5.0")),
    ]
    return [with_helm_keys(d) for d in docs]


BASES = _bases()


@pytest.mark.parametrize("i", range(len(BASES)))
def test_every_generated_and_example_file_takes_the_plain_path(i):
    assert jsonschema_valid(BASES[i])
    assert conforms(BASES[i])


@pytest.mark.parametrize("case", sorted(BAD))
def test_the_schema_mistakes_go_to_jsonschema(case):
    doc = {**values_for(), **BAD[case][0]}
    assert not conforms(doc)
    assert list(iter_errors(doc)), case


def _leaves(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _leaves(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _leaves(v, (*path, i))
    return out


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=70000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", "x", "gpu", "a" * 64, "10.0.0.1", "spot", "h200", "/data", "v0.7.0", "Ab_c", "1", "true", "a\n"]),
    st.text(max_size=8),
)
KEYS = st.sampled_from(["name", "x", "replicas", "1"])
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=2), st.dictionaries(KEYS, SCALARS, max_size=2))
PATHS = [_leaves(b) for b in BASES]


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    """A base with one to three edits: a value replaced (any JSON type), a key removed or added."""
    i = draw(st.integers(0, len(BASES) - 1))
    doc = copy.deepcopy(BASES[i])
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(PATHS[i]))
        parent: Any = doc
        try:
            for p in path[:-1]:
                parent = parent[p]
        except (KeyError, IndexError, TypeError):
            continue
        if not path:
            continue
        last = path[-1]
        action = draw(st.sampled_from(["set", "drop", "add"]))
        if isinstance(parent, dict) and action == "drop":
            parent.pop(last, None)
        elif isinstance(parent, dict) and action == "add":
            parent[draw(st.sampled_from(["extra", "name", "replicas", "enabled"]))] = draw(VALUES)
        elif isinstance(parent, dict | list):
            try:
                parent[last] = draw(VALUES)
            except IndexError:
                continue
    return doc


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_plain_check_agrees_with_jsonschema_on_edited_files(doc):
    assert conforms(doc) == jsonschema_valid(doc)
