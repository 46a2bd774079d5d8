"""The launcher's log lines, its bounded waits, and the failures that end it (exit 3)."""

from __future__ import annotations

import time
from typing import Any


def log(message: str) -> None:
    print(f"[launcher {time.strftime('%Y-%m-%dT%H:%M:%S')}] {message}", flush=True)


def wait_until(what: str, timeout: float, poll: float, probe: Any, hint: str) -> Any:
    """Call probe() until it returns a truthy value; LaunchFailed after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last_note = 0.0
    while True:
        result = probe()
        if result:
            return result
        now = time.monotonic()
        if now >= deadline:
            raise LaunchFailed(f"timed out after {timeout:.0f}s waiting for {what}; {hint}")
        if now - last_note >= 60:
            log(f"waiting for {what} ...")
            last_note = now
        time.sleep(min(poll, max(0.0, deadline - now)))


class LaunchFailed(Exception):
    """A wait expired or the run failed (exit 3)."""


class GpusTimedOut(LaunchFailed):
    """The GPUs did not all come: the workers that did are released (nothing will use them)."""
