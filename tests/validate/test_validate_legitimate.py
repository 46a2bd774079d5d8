"""`python -m generator validate` on what must pass: every generated layout at every release, the
chart's scenarios, and the legitimate edits corpus (tests/validate/data/valid/), which Helm lints
and renders too."""

from __future__ import annotations

import pytest
import yaml
from conftest import render_text, values_for
from validate_harness import LEGITIMATE, ROOT, run_cli

from generator.validate.values import validate_values
from generator.values.merge import as_helm_sees_it

VALID = [
    (gpu, nodes, gen, tag)
    for gpu in ("b200", "h200")
    for nodes in (1, 2, 4, 8, 16, 64)
    for gen in ("colocated", "dedicated")
    for tag in ("v0.5.0", "v0.6.0", "v0.7.0")
    if not (gen == "dedicated" and nodes == 1)
]


@pytest.mark.parametrize(("gpu", "nodes", "gen", "tag"), VALID, ids=[f"{g}-{n}n-{s}-{t}" for g, n, s, t in VALID])
def test_generated_files_are_valid(gpu, nodes, gen, tag):
    opts = {"generation_nodes": 0} if gen == "colocated" else {"generation_nodes": nodes // 2}
    model = "qwen2.5-1.5b" if gen == "colocated" else "gemma3-27b"
    v = values_for(gpu, nodes=nodes, release=tag, model=model, **opts)
    findings = validate_values(v)
    assert [f for f in findings if f.level == "error"] == []


@pytest.mark.parametrize("path", sorted((ROOT / "charts" / "nemo-rl-gke" / "ci").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_chart_scenario_validates(path):
    findings = validate_values(as_helm_sees_it(yaml.safe_load(path.read_text())))
    assert [f"{f.key}: {f.message}" for f in findings if f.level == "error"] == []


def test_the_legitimate_edits_corpus_exists():
    assert {p.stem for p in LEGITIMATE} >= {"cpu-as-number", "external-secret-go-duration", "tokenizers-env"}


@pytest.mark.parametrize("path", LEGITIMATE, ids=[p.stem for p in LEGITIMATE])
def test_a_legitimate_edit_passes_validate_lint_and_render(helm_major, path):
    proc = run_cli("validate", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 error(s)" in proc.stderr + proc.stdout
    assert "0 chart(s) failed" in helm_major.lint([path])
    from generator.render.manifests import parse_documents, validate_documents

    assert validate_documents(parse_documents(render_text(helm_major, [path]))) == []
