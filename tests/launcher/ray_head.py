"""A real local Ray head for the launcher tests (GPUs declared, no hardware needed).

Its processes carry the rehearsal's environment tag, so stopping it ends exactly them (the same
mechanism `python -m generator rehearse` uses), never other Ray clusters on the machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

from generator.rehearse.cluster import RAY_SETTINGS, TAG_ENV, end_tagged, free_port, tagged_pids

BIN = Path(sys.executable).parent


@dataclass
class RayHead:
    address: str  # dashboard URL (Jobs API)
    gcs_port: int
    workdir: Path
    temp_dir: Path  # Ray's session folder (short: Ray puts unix sockets under it)
    tag: str

    def env(self) -> dict[str, str]:
        # Jobs run `python` from PATH, as in the NeMo RL image: put this venv first.
        return {
            **os.environ,
            "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
            **RAY_SETTINGS,
            TAG_ENV: self.tag,
        }

    def pids(self) -> list[int]:
        return tagged_pids(self.tag, self.workdir)


def start(workdir: Path, num_cpus: int = 2, num_gpus: int = 8, attempts: int = 3) -> RayHead:
    """A head on free ports; started again on new ones if another process took a port first
    (GCS, dashboard and client ports are picked before Ray binds them)."""
    errors = []
    for _ in range(attempts):
        head, error = _start_once(workdir, num_cpus, num_gpus)
        if head is not None:
            return head
        errors.append(error)
    raise RuntimeError(f"Ray head did not start in {attempts} attempts: " + " | ".join(errors))


def _start_once(workdir: Path, num_cpus: int, num_gpus: int) -> tuple[RayHead | None, str]:
    workdir.mkdir(parents=True, exist_ok=True)  # a folder holding no `ray` folder
    gcs, dash = free_port(), free_port()
    temp_dir = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))
    head = RayHead(f"http://127.0.0.1:{dash}", gcs, workdir, temp_dir, f"launcher-tests-{uuid.uuid4().hex[:12]}")
    cmd = [
        str(BIN / "ray"), "start", "--head", f"--port={gcs}", f"--dashboard-port={dash}",
        "--dashboard-host=127.0.0.1", f"--num-cpus={num_cpus}", f"--num-gpus={num_gpus}",
        "--disable-usage-stats", "--include-dashboard=true", f"--temp-dir={temp_dir}",
        # Agents and workers bind port 0 (the kernel picks, atomically), never Ray's fixed defaults
        # (agent 52365, workers from 10002) or a port picked beforehand: another Ray cluster starting
        # at the same moment could take it, and an agent that cannot bind serves no jobs.
        "--dashboard-agent-listen-port=0", "--dashboard-agent-grpc-port=0", "--runtime-env-agent-port=0",
        "--metrics-export-port=0", "--min-worker-port=0", "--max-worker-port=0",
        f"--ray-client-server-port={free_port()}",  # Ray refuses 0 here
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=workdir, env=head.env(), capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        stop(head)
        return None, f"ray start failed: {proc.stderr[-2000:]}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{head.address}/api/gcs_healthz", timeout=2) as r:  # noqa: S310 - http to the local head
                if r.status == 200:
                    return head, ""
        except OSError:
            time.sleep(0.5)
    stop(head)
    return None, "Ray dashboard did not come up within 90 s"


def stop(head: RayHead) -> None:
    end_tagged(head.tag, head.workdir)
    logs = head.temp_dir / "session_latest" / "logs"
    if logs.is_dir():  # kept in pytest's tmp folder (the last 3 runs) for post-mortems
        shutil.copytree(logs, head.workdir / "ray-logs", dirs_exist_ok=True, ignore_dangling_symlinks=True)
    shutil.rmtree(head.temp_dir, ignore_errors=True)
