"""The repository's shell scripts: shellcheck-clean; and scripts/e2e-gke.sh, which bills a real
project, refuses to start without an explicit project and a confirmation, and never in CI (run
here with a stand-in gcloud/kubectl that records any call: none may happen)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((ROOT / "scripts").glob("*.sh"))
E2E = ROOT / "scripts" / "e2e-gke.sh"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_are_shellcheck_clean(script):
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck is missing: run scripts/bootstrap.sh (installs Debian's shellcheck)"
    proc = subprocess.run([shellcheck, "--severity=style", str(script)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout


def e2e(tmp_path: Path, *args: str, ci: bool = False, stdin: str = "") -> tuple[subprocess.CompletedProcess[str], list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    calls = tmp_path / "calls"
    for tool in ("gcloud", "kubectl", "helm"):
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> "{calls}"\n')
        (bin_dir / tool).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"PATH": f"{bin_dir}:{os.environ['PATH']}", "E2E_DIR": str(tmp_path / "e2e")}
    if ci:
        env["CI"] = "true"
    proc = subprocess.run(["bash", str(E2E), *args], input=stdin, capture_output=True, text=True, env=env, check=False, timeout=60)
    return proc, (calls.read_text().splitlines() if calls.exists() else [])


@pytest.mark.parametrize(
    ("args", "ci", "stdin", "message"),
    [
        ((), False, "", "error: --project is required"),
        (("--project", "my-project"), True, "", "error: CI is set: this script bills a real Google Cloud project and never runs in CI"),
        (("--project", "my-project"), False, "my-project\n", "error: no terminal to confirm on: pass --confirm my-project"),
        (("--project", "my-project", "--confirm", "my-projekt"), False, "", "error: not confirmed ('my-projekt' is not 'my-project')"),
        (("--project", "my-project", "--gpu", "a100", "--confirm", "my-project"), False, "", "error: --gpu must be h200 or b200"),
    ],
    ids=["no-project", "in-ci", "no-terminal", "wrong-confirmation", "bad-gpu"],
)
def test_the_e2e_script_refuses_before_it_creates_anything(tmp_path, args, ci, stdin, message):
    proc, calls = e2e(tmp_path, *args, ci=ci, stdin=stdin)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert calls == []  # no gcloud, kubectl or helm call
    assert not (tmp_path / "e2e").exists()
