"""`python -m generator --gpu ...`: files written, refusals, atomicity, accelerator differences."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from generator import cli
from generator.values.build import Options, build

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "generator", *args], cwd=cwd, capture_output=True, text=True, env=env, check=False)


def test_writes_values_file_named_after_gpu_in_current_folder(tmp_path):
    proc = run("--gpu", "b200", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    values = yaml.safe_load((tmp_path / "values-b200.yaml").read_text())
    assert values["accelerator"]["type"] == "b200"
    assert values["accelerator"]["nodeLabel"] == "nvidia-b200"
    assert [p.name for p in tmp_path.iterdir()] == ["values-b200.yaml"]


def test_written_file_is_commented_from_the_schema(tmp_path):
    run("--gpu", "h200", cwd=tmp_path)
    text = (tmp_path / "values-h200.yaml").read_text()
    assert text.startswith("# Values for the nemo-rl-gke chart, written by:\n#   python -m generator --gpu h200\n")
    assert "# NCCL_TUNER_CONFIG_PATH for the gIB plugin" in text
    assert "# Name of the RayCluster and prefix of every object" in text


def test_options_change_the_values(tmp_path):
    proc = run(
        "--gpu", "h200", "--nodes", "4", "--name", "grpo-a", "--storage-claim", "my-lustre",
        "--network-prefix", "team1", "--provisioning", "reservation", "--reservation", "res-1",
        "--existing-networks", "-o", "custom.yaml", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    v = yaml.safe_load((tmp_path / "custom.yaml").read_text())
    assert v["workerGroups"][0]["replicas"] == 4
    assert v["workerGroups"][0]["provisioning"] == "reservation"
    assert v["workerGroups"][0]["reservationName"] == "res-1"
    assert v["fullnameOverride"] == "grpo-a"
    assert v["storage"]["existingClaim"] == "my-lustre"
    assert v["network"]["gvnic"]["vpc"] == "team1-gvnic-net"
    assert v["network"]["rdma"][7]["subnet"] == "team1-rdma-sub-7"
    assert v["network"]["createObjects"] is False
    assert "--nodes 4" in (tmp_path / "custom.yaml").read_text().splitlines()[1]
    assert (tmp_path / "custom.yaml").read_text().splitlines()[1].endswith(" --existing-networks")


def test_refuses_to_overwrite_a_different_file_without_force(tmp_path):
    target = tmp_path / "values-h200.yaml"
    target.write_text("# my edits\nfoo: 1\n")
    proc = run("--gpu", "h200", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "--force" in proc.stderr
    assert target.read_text() == "# my edits\nfoo: 1\n"
    proc = run("--gpu", "h200", "--force", cwd=tmp_path)
    assert proc.returncode == 0
    assert "accelerator:" in target.read_text()


def test_same_content_is_not_a_conflict(tmp_path):
    assert run("--gpu", "h200", cwd=tmp_path).returncode == 0
    proc = run("--gpu", "h200", cwd=tmp_path)
    assert proc.returncode == 0
    assert "unchanged" in proc.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--gpu", "a100"], "--gpu"),
        (["--gpu", "h200", "--nodes", "0"], "--nodes must be between 1 and 64"),
        (["--gpu", "h200", "--nodes", "many"], "--nodes must be a whole number"),
        (["--gpu", "h200", "--network-prefix", "Bad_Prefix"], "network prefix"),
        (["--gpu", "h200", "--network-prefix", "abc\n"], "network prefix"),
        (["--gpu", "h200", "--name", "9lives"], "fullnameOverride"),
        (["--gpu", "h200", "--provisioning", "cheap"], "--provisioning"),
        ([], "--gpu"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, args, needle):
    proc = run(*args, cwd=tmp_path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert needle in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_unwritable_target_leaves_no_partial_file(tmp_path):
    (tmp_path / "ro").mkdir()
    os.chmod(tmp_path / "ro", 0o500)
    try:
        proc = run("--gpu", "h200", "-o", "ro/v.yaml", cwd=tmp_path)
        if os.geteuid() == 0:
            # root ignores directory permissions; the write succeeds and is complete
            assert proc.returncode == 0
            assert yaml.safe_load((tmp_path / "ro" / "v.yaml").read_text())["accelerator"]["type"] == "h200"
        else:
            assert proc.returncode == 2
            assert proc.stderr == "error: ro/v.yaml: cannot write: Permission denied\n"
            assert list((tmp_path / "ro").iterdir()) == []
    finally:
        os.chmod(tmp_path / "ro", 0o700)


def test_interrupted_write_leaves_no_temp_and_keeps_old_file(tmp_path, monkeypatch):
    from generator.core import files as values_io

    target = tmp_path / "v.yaml"
    target.write_text("old\n")

    def boom(*_a, **_k):
        raise OSError("disk full")

    monkeypatch.setattr(values_io.os, "replace", boom)
    with pytest.raises(values_io.InputError, match=r"v\.yaml: cannot write: disk full$"):
        values_io.write_atomic(target, "new\n", force=True)
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["v.yaml"]


def test_missing_output_folder_is_reported(tmp_path):
    proc = run("--gpu", "h200", "-o", "nope/v.yaml", cwd=tmp_path)
    assert proc.returncode == 2
    assert "no such directory" in proc.stderr


def _leaves(node, prefix=""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, f"{prefix}.{k}" if prefix else k)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _leaves(v, f"{prefix}[{i}]")
    else:
        yield prefix, node


ACCELERATOR_DEPENDENT = {
    "accelerator.type",
    "accelerator.machineType",
    "accelerator.nodeLabel",
    "accelerator.ncclTunerConfigPath",
    "accelerator.minGkeVersion",
    "worker.resources.requests.cpu",
    "worker.resources.requests.memory",
    "worker.resources.limits.cpu",
    "worker.resources.limits.memory",
    "worker.shmSize",
}


@pytest.mark.parametrize("nodes", [1, 2, 16])
def test_b200_and_h200_differ_only_in_accelerator_dependent_keys(nodes):
    b = dict(_leaves(build(Options(gpu="b200", nodes=nodes))))
    h = dict(_leaves(build(Options(gpu="h200", nodes=nodes))))
    assert b.keys() == h.keys()
    differing = {k for k in b if b[k] != h[k]}
    assert differing <= ACCELERATOR_DEPENDENT
    # and the ones that must differ do
    assert {"accelerator.type", "accelerator.nodeLabel", "accelerator.ncclTunerConfigPath", "accelerator.machineType"} <= differing


def test_chart_default_values_are_the_generated_h200_file():
    text = (ROOT / "charts" / "nemo-rl-gke" / "values.yaml").read_text()
    from generator.generate import render_text

    assert text == render_text(Options(gpu="h200"), ["--gpu", "h200"]), (
        "charts/nemo-rl-gke/values.yaml drifted from the generator: run scripts/sync.sh"
    )


def test_help_exits_zero(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0
    assert "generate" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "cost", "points_to_quickstart"),
    [
        (["--nodes", "1"], "# Cost: 1 GPU node(s) (a3-ultragpu-8g) billed for the whole run: 300 steps of gemma3-27b.", True),
        ([], "# Cost: 2 GPU node(s) (a3-ultragpu-8g) billed for the whole run: 300 steps of gemma3-27b.", True),
        (
            ["--nodes", "1", "--model", "qwen2.5-1.5b"],
            "# Cost: 1 GPU node(s) (a3-ultragpu-8g) billed for the whole run: 20 steps of",
            False,
        ),
        (["--nodes", "1", "--max-steps", "5"], "billed for the whole run: 5 steps of gemma3-27b.", True),
    ],
)
def test_the_header_says_what_the_run_costs_and_where_the_cheapest_run_is(tmp_path, args, cost, points_to_quickstart):
    """`--nodes 1` alone is the default model's whole run on one node, not the quickstart: the
    header says so before anyone installs it."""
    proc = run("--gpu", "h200", *args, "-o", "v.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    head = (tmp_path / "v.yaml").read_text().split("\n\n", 1)[0]
    assert cost in head
    pointer = "# The cheapest proof that a cluster works is examples/quickstart-h200.yaml (1 node, Qwen2.5-1.5B, 20 steps"
    assert (pointer in head) is points_to_quickstart
    assert (ROOT / "examples" / "quickstart-h200.yaml").is_file()
