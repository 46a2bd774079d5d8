"""`render` and `rehearse` take Helm's layers (`-f`, `--set`...) and render the merged result, as
`helm install -f VALUES -f MORE --set K=V` would install it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml
from conftest import CI_DIR, ROOT

from generator.helm.runner import default_helm
from generator.rehearse.run import Request, render

BASE = CI_DIR / "h200-multi-group-values.yaml"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "generator", *args], cwd=cwd, capture_output=True, text=True, env=env, check=False)


def _overlay(tmp_path: Path) -> Path:
    base = yaml.safe_load(BASE.read_text())
    groups = base["workerGroups"]
    groups[0]["replicas"] += 2
    more = tmp_path / "more.yaml"
    more.write_text(yaml.safe_dump({"workerGroups": groups}))
    return more


def test_render_renders_the_layers_merged_as_helm_does(tmp_path):
    more = _overlay(tmp_path)
    sets = ["--set", "launcher.releaseGpus=false", "--set-string", "image.tag=25.11"]
    proc = run("render", str(BASE), "-f", "more.yaml", *sets, "--out", "out", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    written = (tmp_path / "out" / "h200-multi-group-values" / "all.yaml").read_text()
    helm = default_helm()
    assert written == helm.template([BASE, more], extra=sets)  # byte for byte what Helm installs
    assert written != helm.template([BASE])
    assert f"{BASE} -f more.yaml --set launcher.releaseGpus=... --set-string image.tag=... ->" in proc.stdout  # values never echoed
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["h200-multi-group-values"]  # one release, not one per file


def test_render_with_layers_takes_one_values_file(tmp_path):
    more = _overlay(tmp_path)
    proc = run("render", str(BASE), str(more), "-f", str(more), "--out", "out", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "give one VALUES and each further file with -f" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_render_without_layers_renders_each_file_on_its_own(tmp_path):
    proc = run("render", str(BASE), str(CI_DIR / "b200-values.yaml"), "--out", "out", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["b200-values", "h200-multi-group-values"]
    assert (tmp_path / "out" / "h200-multi-group-values" / "all.yaml").read_text() == default_helm().template([BASE])


def test_render_names_the_layers_in_a_helm_error(tmp_path):
    proc = run("render", str(BASE), "--set", "workerGroups[0].replicas=many", "--out", "out", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"error: {BASE} --set workerGroups[0].replicas=...: helm ")
    assert "workerGroups[0].replicas: " in proc.stderr


def test_rehearse_rehearses_the_merged_values(tmp_path):
    more = _overlay(tmp_path)
    alone = render(Request(BASE))[1]
    values, layered, _ = render(Request(BASE, more=(more,), sets=(("--set", "launcher.releaseGpus=false"),)))
    assert len(layered.nodes) == len(alone.nodes) + 2  # the overlay's replicas, one Ray node each
    assert values["launcher"]["releaseGpus"] is False


def test_rehearse_takes_the_layer_flags(tmp_path):
    (tmp_path / "empty.yaml").write_text("")
    proc = run("rehearse", str(BASE), "-f", "empty.yaml", "--set", "a=b", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "empty.yaml: is empty" in proc.stderr


def _zero_replicas(tmp_path: Path) -> Path:
    groups = yaml.safe_load(BASE.read_text())["workerGroups"]
    groups[0]["replicas"] = 0
    layer = tmp_path / "layer.yaml"
    layer.write_text(yaml.safe_dump({"workerGroups": groups}))
    return layer


def test_each_command_names_the_layer_that_set_a_refused_value(tmp_path):
    # The key is in both files; the finding says which one's value was used.
    _zero_replicas(tmp_path)
    for command, extra in (("render", ["--out", "out"]), ("rehearse", []), ("validate", [])):
        proc = run(command, str(BASE), "-f", "layer.yaml", *extra, cwd=tmp_path)
        assert proc.returncode in (1, 2), proc.stderr
        text = proc.stdout + proc.stderr
        assert "workerGroups[0].replicas" in text and "[set by layer.yaml]" in text, (command, text)
    proc = run("validate", str(_zero_replicas(tmp_path)), "--set", "workerGroups[0].replicas=0", "--format", "json", cwd=tmp_path)
    (finding,) = [f for f in yaml.safe_load(proc.stdout)["files"][0]["findings"] if f["key"] == "workerGroups[0].replicas"]
    assert finding["set_by"] == "--set workerGroups[0].replicas"


def test_the_base_file_is_named_when_it_set_the_value(tmp_path):
    layer = tmp_path / "layer.yaml"
    layer.write_text("launcher:\n  releaseGpus: false\n")
    bad = tmp_path / "bad.yaml"
    groups = yaml.safe_load(BASE.read_text())
    groups["workerGroups"][0]["replicas"] = 0
    bad.write_text(yaml.safe_dump(groups))
    proc = run("validate", "bad.yaml", "-f", "layer.yaml", cwd=tmp_path)
    assert proc.returncode == 1
    assert "workerGroups[0].replicas" in proc.stdout and "[set by bad.yaml]" in proc.stdout
    assert "layer.yaml]" not in proc.stdout
