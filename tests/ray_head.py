"""A real local Ray head for the launcher tests (GPUs declared, no hardware needed)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RayHead:
    address: str  # dashboard URL (Jobs API)
    gcs_port: int
    workdir: Path
    temp_dir: Path  # Ray's session folder; every process of this head names it on its command line

    def env(self) -> dict[str, str]:
        # Jobs run `python` from PATH, as in the NeMo RL image: put this venv first.
        return {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}", "RAY_USAGE_STATS_ENABLED": "0"}


def start(workdir: Path, num_cpus: int = 2, num_gpus: int = 8) -> RayHead:
    workdir.mkdir(parents=True, exist_ok=True)  # a folder holding no `ray` folder
    gcs, dash = free_port(), free_port()
    # Short: Ray puts unix sockets under it (107-byte path limit).
    temp_dir = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))
    head = RayHead(f"http://127.0.0.1:{dash}", gcs, workdir, temp_dir)
    cmd = [
        str(BIN / "ray"), "start", "--head", f"--port={gcs}", f"--dashboard-port={dash}",
        "--dashboard-host=127.0.0.1", f"--num-cpus={num_cpus}", f"--num-gpus={num_gpus}",
        "--disable-usage-stats", "--include-dashboard=true", f"--temp-dir={temp_dir}",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=workdir, env=head.env(), capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"ray start failed: {proc.stderr[-2000:]}")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{head.address}/api/gcs_healthz", timeout=2) as r:  # noqa: S310 - http to the local head
                if r.status == 200:
                    return head
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("Ray dashboard did not come up within 60 s")


def own_pids(temp_dir: Path) -> list[int]:
    """Processes of this head only (not other Ray clusters on the machine)."""
    needle = str(temp_dir).encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def stop(head: RayHead) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in own_pids(head.temp_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 10
        while own_pids(head.temp_dir) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not own_pids(head.temp_dir):
            break
    shutil.rmtree(head.temp_dir, ignore_errors=True)
