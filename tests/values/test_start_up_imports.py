"""What the generator and `validate` import at start-up (issue 27: the generator under 0.3 s).

Each heavy library below costs 50-200 ms of imports per process; none is needed to write a valid
file or to find nothing wrong with one: jsonschema runs only for a document the plain schema check
refuses (core/schema.conforms), omegaconf and hydra only for an override or setting their grammar
needs (nemo_rl/recipe_config, validate/rules/context), kubernetes-validate only in `render`. A
change that imports one of them again on these paths fails here, not in a benchmark months later."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from generator.gke.profiles import profile
from generator.gke.provisioning import example_reservation, machine_default

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("jsonschema", "referencing", "jsonschema_specifications", "omegaconf", "hydra", "antlr4", "kubernetes_validate", "kubernetes")


def imported(args: list[str], cwd: Path) -> set[str]:
    """The top-level packages `python -m generator ARGS` imported (python -X importtime's report)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "generator", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    assert lines, "no importtime report"
    return {name.split(".")[0] for name in lines}


@pytest.mark.parametrize("gpu", ["h200", "gb200"])
def test_the_generator_imports_no_heavy_library(gpu, tmp_path):
    p = profile(gpu)  # A4X is offered by reservation only: the generator needs one named
    reservation = ["--reservation", example_reservation(p)] if machine_default(p) == "reservation" else []
    modules = imported(["--gpu", gpu, *reservation, "-o", str(tmp_path / "v.yaml")], tmp_path)
    assert "generator" in modules and "yaml" in modules  # the report is read right
    assert sorted(m for m in modules if m in HEAVY) == []


def test_validate_of_a_valid_file_imports_no_heavy_library(tmp_path):
    modules = imported(["validate", str(ROOT / "examples" / "quickstart-h200.yaml")], tmp_path)
    assert sorted(m for m in modules if m in HEAVY) == []


def test_validate_of_a_schema_mistake_still_reports_jsonschema_s_finding(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "examples" / "quickstart-h200.yaml").read_text().replace("provisioning: spot", "provisioning: preemptible", 1))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-m", "generator", "validate", str(bad)]
    proc = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode != 0
    assert "workerGroups[0].provisioning: 'preemptible' is not one of:" in proc.stdout + proc.stderr
