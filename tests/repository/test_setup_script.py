"""The README's first command, `scripts/setup.sh`, in a fresh clone of this checkout: it writes a
values file per accelerator profile, validates, lints and renders them, and ends with the next
steps. The clone borrows this checkout's .venv and .tools (installing them is what CI's own run of
scripts/test.sh already does), so the script's own steps are what is tested."""

from __future__ import annotations

import subprocess
from pathlib import Path

from generator.gke.profiles import PROFILES
from generator.helm.pins import PINS

ROOT = Path(__file__).resolve().parents[2]


def test_setup_runs_in_a_fresh_clone(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    for kept in (".venv", ".tools"):
        (clone / kept).symlink_to(ROOT / kept)
    run = subprocess.run(["scripts/setup.sh"], cwd=clone, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    for gpu in PROFILES:
        assert (clone / f"values-{gpu}.yaml").is_file()
        assert sorted(p.name for p in (clone / "out" / f"values-{gpu}").glob("*.yaml")), gpu
    assert "==> render and validate every object" in run.stdout
    assert "Done. Next, the cheapest proof that a cluster works" in run.stdout
    # the next steps start with the quickstart: a 1-node infra script, the quickstart values with its overlay
    assert "python -m generator infra --gpu h200 --nodes 1 " in run.stdout
    assert "helm install nemo-rl charts/nemo-rl-gke --namespace=nemo-rl -f examples/quickstart-h200.yaml -f values-infra.yaml" in run.stdout
    # `source .venv/bin/activate` puts the pinned Helm 4 on PATH as `helm`
    helm = subprocess.run([str(clone / ".venv" / "bin" / "helm"), "version", "--short"], capture_output=True, text=True, check=False)
    assert helm.stdout.startswith(PINS[0].version), helm.stdout + helm.stderr
    assert "Traceback" not in run.stdout + run.stderr
