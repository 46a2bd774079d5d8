"""`python -m generator validate` on the invalid corpus (tests/validate/data/invalid/): each file
fails naming its key, in process and through the CLI in one call, and what the schema refuses Helm
refuses too."""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import render_text
from validate_harness import INVALID, SCHEMA_LEVEL, header, run_cli

from generator.helm.runner import HelmError
from generator.validate.values import validate_values
from generator.values.merge import as_helm_sees_it


def test_the_invalid_corpus_is_large_and_covers_every_rule_family():
    assert len(INVALID) >= 40
    families = {p.name.split("-", 2)[1] for p in INVALID}
    assert {"acc", "res", "net", "nemo", "sto", "name", "kueue", "sec", "schema"} <= families


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_each_broken_file_fails_naming_its_key(path):
    expect = header(path)["expect"]
    findings = validate_values(as_helm_sees_it(yaml.safe_load(path.read_text())))
    errors = [f for f in findings if f.level == "error"]
    assert errors, f"{path.name}: no error"
    assert expect in {f.key for f in errors}, [f"{f.key}: {f.message}" for f in errors]


def test_the_cli_reports_the_corpus_one_line_per_problem():
    proc = run_cli("validate", *map(str, INVALID))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    for path in INVALID:
        assert f"{path}: {header(path)['expect']}: " in proc.stdout
    for line in proc.stdout.splitlines():
        assert line.count(": ") >= 2 and "\n" not in line  # FILE: key: message - fix


def test_the_cli_reports_the_corpus_as_json_for_ci():
    sample = INVALID[::6]  # the text report above covers every file; this, the JSON shape
    proc = run_cli("validate", "--format", "json", *map(str, sample))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    report = json.loads(proc.stdout)
    assert report["valid"] is False
    by_file = {f["file"]: f for f in report["files"]}
    assert len(by_file) == len(sample)
    for path in sample:
        entry = by_file[str(path)]
        assert entry["valid"] is False
        assert header(path)["expect"] in {f["key"] for f in entry["findings"] if f["level"] == "error"}


@pytest.mark.parametrize("path", SCHEMA_LEVEL, ids=[p.stem for p in SCHEMA_LEVEL])
def test_schema_level_breakage_also_fails_helm(helm_major, path):
    with pytest.raises(HelmError, match="values don't meet the specifications of the schema"):
        render_text(helm_major, [path])


# --- the valid corpus ---------------------------------------------------------------------
