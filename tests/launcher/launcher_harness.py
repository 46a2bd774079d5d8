"""Shared pieces of the launcher tests: stand-in entrypoints and a way to run the launcher as the
chart runs it (a subprocess with a spec file). The Ray head fixtures are in conftest.py."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from dataclasses import dataclass
from pathlib import Path

from generator.rehearse.cluster import LocalCluster

LAUNCHER = Path(__file__).resolve().parents[2] / "charts" / "nemo-rl-gke" / "files" / "launcher.py"


def stand_in(tmp_path: Path, name: str, body: str) -> str:
    """A stand-in for NeMo RL: a script the run's entrypoint executes."""
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return f"python {path}"


def _launcher_args(head, tmp_path: Path, check: bool, spec: dict) -> list[str]:
    base = {"address": head.address, "poll_interval_s": 0.3, "metadata": {"nemo-rl-gke.release": spec.get("submission_id", "x")}}
    path = tmp_path / f"spec-{uuid.uuid4().hex[:6]}.json"
    path.write_text(json.dumps(base | spec))
    return [sys.executable, str(LAUNCHER), *(["--check"] if check else []), str(path)]


def run_launcher(
    head, tmp_path: Path, *, check: bool = False, timeout: float = 180, env: dict[str, str] | None = None, **spec
) -> subprocess.CompletedProcess[str]:
    """The launcher to its end; `env` replaces the head's environment (e.g. to add the API's address)."""
    args = _launcher_args(head, tmp_path, check, spec)
    return subprocess.run(args, cwd=head.workdir, env=env or head.env(), capture_output=True, text=True, timeout=timeout, check=False)


def start_launcher(head, tmp_path: Path, env: dict[str, str] | None = None, **spec) -> subprocess.Popen[str]:
    """The launcher running in the background; its stdout (with stderr) is read line by line."""
    args = _launcher_args(head, tmp_path, False, spec)
    return subprocess.Popen(args, cwd=head.workdir, env=env or head.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def jobs_with_prefix(client, prefix: str) -> dict[str, str]:
    return {j.submission_id: str(j.status) for j in client.list_jobs() if (j.submission_id or "").startswith(prefix)}


def new_id() -> str:
    return f"run-{uuid.uuid4().hex[:10]}"


SUCCEEDS = """
import time
for i in range(3):
    print(f"grpo step {i} reward 0.5", flush=True)
    time.sleep(0.2)
"""


# NeMo RL with its data spent (grpo.max_num_epochs passes over GSM8K, grpo.py v0.5.0-v0.7.0): the
# last step of the last epoch is saved (is_last_step) and grpo_train returns without a line of its
# own; the job is SUCCEEDED short of grpo.max_num_steps. Here 2 epochs of 2 steps, 20 asked.
EPOCHS_END = """
import json, os, sys
ckpt, log = sys.argv[1], sys.argv[2]
os.makedirs(os.path.join(ckpt, 'step_4'))
open(os.path.join(ckpt, 'step_4', 'training_info.json'), 'w').write(json.dumps({'total_steps': 4}))
print(open(log).read(), flush=True)
"""


@dataclass
class ClusterHead:
    """What the harness needs of a head (the Jobs API address, a folder, the environment), for a
    multi-node local Ray cluster."""

    cluster: LocalCluster

    @property
    def address(self) -> str:
        return self.cluster.dashboard_url

    @property
    def workdir(self) -> Path:
        return self.cluster.workdir

    def env(self) -> dict[str, str]:
        return self.cluster.env()
