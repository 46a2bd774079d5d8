"""Start the test bed's processes, wait on their health endpoints, stop them by PID.

Every process is recorded in `<state>/processes.json` as it starts (name, PID, executable), so a
later `down`, in this process or another, stops exactly those: a PID whose executable is no longer
the recorded one (the PID was reused) is left alone. Each process gets its own session, and its
output goes to `<state>/logs/<name>.log`.

Attached (the test session): each child also asks the kernel to kill it when its parent dies
(PR_SET_PDEATHSIG), so a test run killed outright leaves nothing behind. Detached
(`scripts/testbed.sh up`): they outlive the command until `down`.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

STATE_FILE = "processes.json"
_PR_SET_PDEATHSIG = 1


class ProcessError(Exception):
    pass


@dataclass(frozen=True)
class Record:
    name: str
    pid: int
    exe: str


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def _alive(record: Record) -> bool:
    exe = _exe(record.pid)
    if not exe:
        return False
    try:
        with open(f"/proc/{record.pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return False
    except OSError:
        return False
    return exe.removesuffix(" (deleted)") == record.exe


class Supervisor:
    def __init__(self, state: Path, detached: bool = False) -> None:
        self.state = state
        self.detached = detached
        self.logs = state / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    # --- the record ----------------------------------------------------------------------

    def records(self) -> list[Record]:
        path = self.state / STATE_FILE
        if not path.exists():
            return []
        return [Record(**r) for r in json.loads(path.read_text())]

    def _save(self, records: list[Record]) -> None:
        path = self.state / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps([asdict(r) for r in records], indent=1))
        tmp.replace(path)

    # --- start and wait ------------------------------------------------------------------

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: Path | None = None) -> Record:
        log = (self.logs / f"{name}.log").open("ab")
        try:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,
                preexec_fn=None if self.detached else _die_with_parent,  # noqa: PLW1509 - prctl only, no locks taken
            )
        finally:
            log.close()
        self._children[name] = proc
        record = Record(name, proc.pid, os.path.realpath(argv[0]))
        self._save([*self.records(), record])
        return record

    def log_tail(self, name: str, lines: int = 6) -> str:
        path = self.logs / f"{name}.log"
        if not path.exists():
            return "(no output)"
        text = path.read_text(errors="replace").strip().splitlines()
        return " | ".join(text[-lines:]) or "(no output)"

    def exited(self, name: str) -> int | None:
        proc = self._children.get(name)
        return proc.poll() if proc else None

    def wait(self, name: str, ready: Callable[[], bool], timeout_s: float) -> float:
        """Seconds until ready() holds; an error naming the process if it exits or times out."""
        start = time.monotonic()
        delay = 0.05
        while True:
            code = self.exited(name)
            if code is not None:
                raise ProcessError(f"{name} exited with {code} while starting: {self.log_tail(name)}")
            with contextlib.suppress(Exception):
                if ready():
                    return time.monotonic() - start
            if time.monotonic() - start > timeout_s:
                raise ProcessError(f"{name} was not ready within {timeout_s:.0f} s: {self.log_tail(name)}")
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)

    # --- stop ----------------------------------------------------------------------------

    def stop_all(self, grace_s: float = 10.0) -> list[str]:
        """Stop every recorded process, newest first: SIGTERM, then SIGKILL after grace_s. Returns
        the names of those that were still running."""
        records = self.records()
        running = [r for r in reversed(records) if _alive(r)]
        for r in running:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(r.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while any(_alive(r) for r in running) and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.1)
        for r in running:
            if _alive(r):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(r.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while any(_alive(r) for r in running) and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.05)
        self._reap()
        left = [r.name for r in running if _alive(r)]
        if left:
            raise ProcessError(f"could not stop {', '.join(left)}")
        self._save([])
        return [r.name for r in running]

    def _reap(self) -> None:
        for proc in self._children.values():
            proc.poll()


# --- health checks -------------------------------------------------------------------------


def http_ok(url: str, context: ssl.SSLContext | None = None, headers: Mapping[str, str] | None = None) -> Callable[[], bool]:
    """A readiness check: GET url answers 200."""

    def check() -> bool:
        req = urllib.request.Request(url, headers=dict(headers or {}))  # noqa: S310 - 127.0.0.1 only
        try:
            with urllib.request.urlopen(req, timeout=2, context=context) as r:  # noqa: S310
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    return check


def tls_to(ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca))
    if cert and key:
        ctx.load_cert_chain(str(cert), str(key))
    return ctx


def tls_unverified() -> ssl.SSLContext:
    """For a component's own self-signed health endpoint (kube-controller-manager, scheduler)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx
