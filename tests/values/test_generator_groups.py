"""`python -m generator --groups ...`: several worker groups, and the options they replace."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "generator", "--gpu", "h200", "-o", "v.yaml", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, timeout=60, check=False)


def test_groups_become_worker_groups_and_the_header_records_them(tmp_path):
    proc = run("--groups", "train=2:reservation:res-a,generate=2:spot", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "v.yaml").read_text()
    groups = yaml.safe_load(text)["workerGroups"]
    assert [(g["name"], g["replicas"], g["provisioning"], g["reservationName"]) for g in groups] == [
        ("train", 2, "reservation", "res-a"),
        ("generate", 2, "spot", ""),
    ]
    assert "--groups train=2:reservation:res-a,generate=2:spot" in text.splitlines()[1]


@pytest.mark.parametrize(
    ("groups", "needle"),
    [
        ("a=0", "--groups entry 'a=0': REPLICAS must be between 1 and 64"),
        ("a=65", "--groups entry 'a=65': REPLICAS must be between 1 and 64"),
        ("a=99999999999999999999", "--groups entry 'a=99999999999999999999': use NAME=REPLICAS"),  # once hung
        ("a=\u00b2", "--groups entry 'a=\u00b2': use NAME=REPLICAS"),  # a digit to str.isdigit, not to int()
        ("a=\u0663", "--groups entry 'a=\u0663': use NAME=REPLICAS"),  # Arabic-Indic three
        ("a=40,b=30", "--groups: 70 GPU nodes in all; at most 64"),
        ("a=2:cheap", "provisioning must be one of"),
    ],
)
def test_bad_groups_are_one_line_naming_the_entry(tmp_path, groups, needle):
    proc = run("--groups", groups, cwd=tmp_path)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: ") and needle in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("extra", "flags"),
    [
        (["--nodes", "4"], "--nodes"),
        (["--provisioning", "flex-start"], "--provisioning"),
        (["--provisioning", "reservation", "--reservation", "r"], "--provisioning, --reservation"),
    ],
)
def test_options_that_groups_replace_are_refused_not_ignored(tmp_path, extra, flags):
    proc = run("--groups", "a=1,b=1", *extra, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: --groups sets each group's nodes, provisioning and reservation: drop {flags}"
    assert list(tmp_path.iterdir()) == []
