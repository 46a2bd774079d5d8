"""The chart's launcher (charts/nemo-rl-gke/files/launcher.py), run for real against the local
cluster: its rendered spec (ConfigMap key launch.json) with only what a laptop needs changed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from generator.core.paths import CHART_DIR
from generator.rehearse.cluster import LocalCluster
from generator.rehearse.report import Output
from generator.rehearse.topology import Rendered

LAUNCHER = CHART_DIR / "files" / "launcher.py"
LAUNCHER_TIMEOUTS = {"files_s": 5, "head_s": 60, "gpus_s": 60, "previous_s": 60, "running_s": 120}
POLL_S = 0.2
RUN_LIMIT_S = 900


def make_spec(rendered: Rendered, address: str, entrypoint: str, checkpoint_dir: Path, drill: bool) -> tuple[dict[str, Any], list[str]]:
    """The chart's launch.json with the local address, the stand-in and short waits."""
    spec = dict(rendered.launch_spec)
    notes = []
    spec.update(
        address=address,
        entrypoint=entrypoint,
        checkpoint_dir=str(checkpoint_dir),
        wait_for_files=[],
        timeouts=LAUNCHER_TIMEOUTS,
        poll_interval_s=POLL_S,
        rehearsal=True,  # no GPU node here: the launcher prints no billing warning only a cluster makes true
    )
    if spec.get("outcome_dir"):  # the run's outcome beside the local checkpoints, not in /var/lib
        spec["outcome_dir"] = spec["outcome_volume_dir"] = str(checkpoint_dir.parent / "launcher")
    if spec.pop("config_verdict", None):
        notes.append("config_verdict dropped (on GKE the preparation Job checks the run with the image's own NeMo RL code first)")
    if spec.pop("gpu_release", None):
        notes.append("gpu_release dropped (releasing the GPU workers needs the Kubernetes API; the tests cover it)")
    else:
        notes.append("launcher.releaseGpus is false: on GKE the GPU workers would stay up after the run, billed until `helm uninstall`")
    local_ray = _local_ray_version()
    if spec.get("ray_version") and spec["ray_version"] != local_ray:
        notes.append(f"ray_version {spec['ray_version']} -> {local_ray} (the local Ray)")
        spec["ray_version"] = local_ray
    if not spec.get("follow", False):
        spec["follow"] = True
        notes.append("follow false -> true (to see the run's end)")
    restarts = int(spec.get("max_restarts", 0))
    if drill and restarts < 1:
        spec["max_restarts"] = 1
        notes.append("max_restarts 0 -> 1 (launcher.maxRestarts is 0: on GKE a preempted run would not be resubmitted)")
    elif not drill and restarts:
        spec["max_restarts"] = 0
        notes.append(f"max_restarts {restarts} -> 0 (a placement failure fails every attempt alike)")
    return spec, notes


def _local_ray_version() -> str:
    from importlib.metadata import version

    return version("ray")


def _end_with_parent() -> None:
    """Linux: the launcher gets SIGTERM when the rehearsal dies without cleaning up (kill -9), as
    Ray's own processes do (PR_SET_PDEATHSIG); elsewhere nothing happens."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


class Launcher:
    """The chart's launcher as a subprocess; its output (with the run's logs) is echoed line by line."""

    def __init__(self, spec_path: Path, cluster: LocalCluster, out: Output) -> None:
        self.out = out
        self.lines: list[str] = []
        self._seen = threading.Condition()
        self.proc = subprocess.Popen(
            [sys.executable, str(LAUNCHER), str(spec_path)],
            cwd=cluster.workdir,
            env=cluster.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # Ctrl-C reaches the rehearsal, which ends the launcher
            preexec_fn=_end_with_parent,  # noqa: PLW1509 - only a prctl call, before exec
        )
        self._reader = threading.Thread(target=self._read, name="launcher-output", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.rstrip("\n")
            self.out.line(line)
            with self._seen:
                self.lines.append(line)
                self._seen.notify_all()
        with self._seen:
            self._seen.notify_all()

    def wait_for_line(self, prefix: str, timeout: float) -> bool:
        """True once a line starting with prefix was printed; False on timeout or launcher exit."""
        deadline = time.monotonic() + timeout
        with self._seen:
            while True:
                if any(ln.startswith(prefix) for ln in self.lines):
                    return True
                left = deadline - time.monotonic()
                if left <= 0 or not self._reader.is_alive():
                    return False
                self._seen.wait(min(left, 0.5))

    def wait(self, timeout: float = RUN_LIMIT_S) -> int:
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.out.note(f"the launcher was still running after {timeout:g} s; stopping it")
            self.stop()
            rc = 1
        self._reader.join(10)
        return rc

    def stop(self) -> None:
        proc = self.proc
        if proc.poll() is not None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=5)
                return
            except subprocess.TimeoutExpired:
                continue
