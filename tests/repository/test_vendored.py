"""The repository stands alone: the data it carries under vendor/, checked and refreshed by its
own script, and nothing in the tree that reads a path outside the checkout."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from generator import vendored
from generator.nemo_rl.releases import RELEASES
from generator.nemo_rl.run_spec import MODELS
from generator.vendored import DRA_DRIVER, GKE_NETWORKING, KUBERAY, NEMO_RL, NEMO_RL_SRC, SETS, MissingDataError


@pytest.mark.parametrize("data", SETS, ids=lambda d: d.name)
def test_every_vendored_file_matches_its_checksum(data):
    assert vendored.verify(data) == []
    listed = (data.root / vendored.SUMS).read_text().splitlines()
    assert len(listed) == len(list(vendored._data_files(data.root))) > 0


@pytest.mark.parametrize("data", SETS, ids=lambda d: d.name)
def test_provenance_names_repository_commit_and_license(data):
    text = (data.root / vendored.PROVENANCE).read_text()
    assert text == vendored.provenance_text(data)
    assert f"https://github.com/{data.repository}" in text and data.license in text
    for version, commit in data.versions.items():
        assert f"| {version} | {commit} |" in text
        if data.pinned_by == "commit":
            assert len(commit) == 40
        else:  # a Go module's hash as go.sum writes it
            assert commit.startswith("h1:") and commit.endswith("=")


def test_an_edited_or_added_file_is_found(tmp_path):
    copy = tmp_path / "nemo-rl"
    shutil.copytree(NEMO_RL.root, copy)
    recipe = copy / "v0.7.0" / "examples" / "configs" / "grpo_math_1B.yaml"
    recipe.write_text(recipe.read_text() + "# edited\n")
    (copy / "v0.7.0" / "extra.yaml").write_text("a: 1\n")
    problems = vendored.verify(NEMO_RL, copy)
    assert len(problems) == 2
    assert "grpo_math_1B.yaml: checksum differs" in problems[0] and "extra.yaml: not listed" in problems[1]


def test_every_release_the_generator_offers_is_carried_with_its_recipes_and_defaults_chains():
    assert set(RELEASES) <= set(NEMO_RL.versions)
    for tag in RELEASES:
        for model in MODELS.values():
            chain = vendored.defaults_chain(vendored.recipe_path(tag, model.recipe))
            assert all(p.is_file() for p in chain), (tag, model.recipe)
            recipe = vendored.load_release_recipe(tag, model.recipe)
            assert recipe["policy"]["model_name"]
            assert recipe["checkpointing"]["save_period"] == model.save_period, (tag, model.recipe)


def test_both_kuberay_versions_carry_raycluster_and_rayjob():
    for version in KUBERAY.versions:
        kinds = {yaml.safe_load(p.read_text())["spec"]["names"]["kind"] for p in vendored.crd_files(version)}
        assert kinds == {"RayCluster", "RayJob"}


def _fixtures_folder(tmp_path: Path) -> Path:
    """A folder laid out as the refresh script expects, made from the vendored files."""
    src = tmp_path / "src"
    for version in KUBERAY.versions:
        shutil.copytree(KUBERAY.root / version, src / "crds" / f"kuberay-{version}")
    for tag in NEMO_RL.versions:
        shutil.copytree(NEMO_RL.root / tag, src / "nemo-rl" / tag)
    for version in GKE_NETWORKING.versions:
        shutil.copytree(GKE_NETWORKING.root / version, src / "crds" / f"gke-networking-api-{version}")
    for tag in NEMO_RL_SRC.versions:
        shutil.copytree(NEMO_RL_SRC.root / tag, src / "nemo-rl-src" / tag)
    for version in DRA_DRIVER.versions:
        shutil.copytree(DRA_DRIVER.root / version, src / "crds" / f"dra-driver-nvidia-gpu-{version}")
    return src


def test_refresh_rewrites_the_same_tree_from_a_folder(tmp_path):
    src = _fixtures_folder(tmp_path)
    out = tmp_path / "vendor"
    report = vendored.refresh(src, out)
    assert report == [
        f"{out / 'kuberay'}: 4 files",
        f"{out / 'nemo-rl'}: 18 files",
        f"{out / 'gke-networking-api'}: 2 files",
        f"{out / 'nemo-rl-src'}: 72 files",
        f"{out / 'dra-driver-nvidia-gpu'}: 1 files",
    ]
    for data in SETS:
        for p in sorted(data.root.rglob("*")):
            if p.is_file():
                assert (out / data.name / p.relative_to(data.root)).read_bytes() == p.read_bytes(), p


def test_refresh_refuses_a_folder_missing_a_defaults_parent_and_changes_nothing(tmp_path):
    src = _fixtures_folder(tmp_path)
    (src / "nemo-rl" / "v0.6.0" / "examples" / "configs" / "grpo_math_1B.yaml").unlink()
    out = tmp_path / "vendor"
    (out / "kuberay").mkdir(parents=True)
    (out / "kuberay" / "keep").write_text("old")
    with pytest.raises(MissingDataError, match=r"NeMo RL v0\.6\.0 lacks examples/configs/grpo_math_1B\.yaml"):
        vendored.refresh(src, out)
    assert [p.name for p in out.rglob("*")] == ["kuberay", "keep"]


def test_refresh_refuses_a_release_without_its_start_up_source_and_changes_nothing(tmp_path):
    src = _fixtures_folder(tmp_path)
    (src / "nemo-rl-src" / "v0.5.0" / "examples" / "run_grpo_math.py").unlink()
    out = tmp_path / "vendor"
    out.mkdir()
    with pytest.raises(MissingDataError, match=r"NeMo RL v0\.5\.0's start-up source lacks examples/run_grpo_math\.py"):
        vendored.refresh(src, out)
    assert list(out.iterdir()) == []


def test_the_start_up_source_is_at_the_configs_commits_and_only_python():
    assert NEMO_RL_SRC.versions == NEMO_RL.versions
    for tag in NEMO_RL_SRC.versions:
        files = [p for p in (NEMO_RL_SRC.root / tag).rglob("*") if p.is_file()]
        assert files and all(p.suffix == ".py" for p in files)


def test_the_script_checks_and_refuses_with_one_line(tmp_path):
    ok = subprocess.run([str(ROOT / "scripts" / "vendor.sh"), "check"], capture_output=True, text=True, check=False)
    assert ok.returncode == 0 and ok.stdout == "vendor/: 97 files match their checksums\n"
    bad = subprocess.run([str(ROOT / "scripts" / "vendor.sh"), "refresh", str(tmp_path)], capture_output=True, text=True, check=False)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert bad.stderr == f"error: {tmp_path}/crds/kuberay-v1.3.2: missing - give a folder holding crds/kuberay-<version>/ for v1.3.2\n"


def test_an_uncarried_release_or_recipe_is_an_error_naming_both():
    with pytest.raises(MissingDataError) as e:
        vendored.recipe_path("v0.4.0", "examples/configs/grpo_math_1B.yaml")
    assert "NeMo RL v0.4.0" in str(e.value) and "grpo_math_1B.yaml" in str(e.value) and "v0.5.0, v0.6.0, v0.7.0" in e.value.fix
    with pytest.raises(MissingDataError) as e:
        vendored.recipe_path("v0.7.0", "examples/configs/grpo_math_70B.yaml")
    assert e.value.message == "NeMo RL v0.7.0 recipe examples/configs/grpo_math_70B.yaml: not in this repository (vendor/nemo-rl/v0.7.0/)"


# Spelled in pieces, so this file does not match itself.
FORBIDDEN = (
    "/" + "work/",
    "../" + "shared",
    "shared/" + "fixtures",
    "NEMO_RL_GKE_" + "FIXTURES",
    "/opt/" + "wheels",
    "/opt/" + "pypi",
    "/root/" + ".pyenv",
)


def test_nothing_in_the_tree_names_a_path_outside_the_repository():
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    hits = []
    for name in filter(None, files):
        path = ROOT / name
        if not path.is_file() or name.startswith("vendor/"):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        hits += [f"{name}: {word}" for word in FORBIDDEN if word in text]
    assert hits == []


def test_the_cli_outside_its_venv_is_one_line_naming_the_venv(tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    proc = subprocess.run(
        [str(tmp_path / "bare" / "bin" / "python"), "-m", "generator", "--gpu", "h200"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.splitlines()
    assert "lacks yaml, ruamel.yaml, jsonschema, kubernetes_validate" in line
    assert f"source {ROOT / '.venv'}/bin/activate" in line and "scripts/setup.sh" in line
    assert proc.stdout == ""
