"""Property-based tests: generated files always validate and render; mutations never crash."""

from __future__ import annotations

import copy
from typing import Any

from conftest import render, values_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from generator.nemo_rl import run_spec as grpo
from generator.render.manifests import validate_documents
from generator.validate.findings import Finding
from generator.validate.values import validate_values
from generator.values.merge import as_helm_sees_it

options = st.fixed_dictionaries(
    {
        "gpu": st.sampled_from(["b200", "h200"]),
        "nodes": st.integers(1, 64),
        "release": st.sampled_from(["v0.5.0", "v0.6.0", "v0.7.0"]),
        "model": st.sampled_from(sorted(grpo.MODELS)),
        "provisioning": st.sampled_from(["spot", "on-demand", "flex-start"]),
        "max_steps": st.one_of(st.none(), st.integers(1, 12)),  # short runs keep a checkpoint before their end
    }
).flatmap(lambda o: st.tuples(st.just(o), st.one_of(st.none(), st.integers(0, max(0, o["nodes"] - 1)))))


def _build(opts: dict[str, Any], gen: int | None) -> dict[str, Any] | None:
    try:
        return values_for(**opts, generation_nodes=gen)
    except grpo.SpecError as e:
        # Refusals must be impossible splits, stated with the numbers.
        assert any(why in str(e) for why in ("cannot be split", "does not divide", "do not both fit")), str(e)
        return None


@settings(max_examples=150, deadline=None)
@given(options)
def test_every_generated_file_validates(case):
    opts, gen = case
    v = _build(opts, gen)
    if v is None:
        return
    errors = [f for f in validate_values(v) if f.level == "error"]
    assert errors == [], [f"{f.key}: {f.message}" for f in errors]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=options)
def test_every_generated_file_renders_valid_objects(helms, case):
    opts, gen = case
    v = _build(opts, gen)
    if v is None:
        return
    objs = render(helms[0], [v])
    assert validate_documents(objs) == []


def _leaves(node: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(node, dict):
        return [p for k, child in node.items() for p in _leaves(child, (*path, k))] or [path]
    if isinstance(node, list):
        return [p for i, child in enumerate(node) for p in _leaves(child, (*path, i))] or [path]
    return [path]


BASE = values_for()
LEAVES = _leaves(BASE)
junk = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**12), 10**12) | st.floats(allow_nan=True) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(LEAVES), junk, st.booleans())
def test_a_mutated_file_never_crashes_the_validator(path, value, parent):
    doc = copy.deepcopy(BASE)
    target = path[:-1] if parent and len(path) > 1 else path
    node = doc
    for part in target[:-1]:
        node = node[part]
    node[target[-1]] = value
    findings = validate_values(as_helm_sees_it(doc))
    assert all(isinstance(f, Finding) and f.key and f.message for f in findings)


@settings(max_examples=200, deadline=None)
@given(junk)
def test_arbitrary_documents_never_crash_the_validator(doc):
    findings = validate_values(as_helm_sees_it(doc))
    assert all(isinstance(f, Finding) for f in findings)
