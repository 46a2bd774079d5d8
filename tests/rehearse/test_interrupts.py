"""held_back(): Ctrl-C, SIGTERM and SIGHUP wait for the Ray call in progress, then act as before.

Why it exists: a KeyboardInterrupt between Ray's GlobalStateAccessor construction and its connect()
aborts or deadlocks the process; the last test shows that hazard on the real Ray object."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from generator.rehearse.interrupts import SIGNALS, handled_by, held_back


class Arrived(Exception):
    pass


def _arrived(signum: int, _frame: Any) -> None:
    raise Arrived(signum)


@pytest.fixture
def own_handlers() -> Iterator[None]:
    """A handler of this test's own for each signal, whatever pytest was started with (a shell's
    background job has SIGINT ignored)."""
    with handled_by(_arrived, SIGNALS):
        yield


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_a_signal_during_the_block_is_raised_once_the_block_has_finished(
    sig: int, own_handlers: None, capsys: pytest.CaptureFixture[str]
) -> None:
    finished = False
    with pytest.raises(Arrived) as caught, held_back("the node is up"):
        os.kill(os.getpid(), sig)
        os.kill(os.getpid(), signal.SIGINT)  # a second one: still one line, the first one raised
        finished = True
    assert finished
    assert caught.value.args == (sig,)
    assert capsys.readouterr().err == "interrupt received: stopping once the node is up\n"
    assert all(signal.getsignal(s) is _arrived for s in SIGNALS)


def test_without_a_signal_nothing_is_said_and_the_handlers_are_back(own_handlers: None, capsys: pytest.CaptureFixture[str]) -> None:
    with held_back("the node is up"):
        assert all(signal.getsignal(s) is not _arrived for s in SIGNALS)
    assert capsys.readouterr().err == ""
    assert all(signal.getsignal(s) is _arrived for s in SIGNALS)


def test_an_error_in_the_block_passes_through_with_the_handlers_back(own_handlers: None) -> None:
    with pytest.raises(ValueError, match="ray failed"), held_back("the node is up"):
        raise ValueError("ray failed")
    assert all(signal.getsignal(s) is _arrived for s in SIGNALS)


def test_an_ignored_signal_stays_ignored_and_is_not_announced(own_handlers: None, capsys: pytest.CaptureFixture[str]) -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    with held_back("the node is up"):
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGHUP)
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    assert capsys.readouterr().err == ""


def test_outside_the_main_thread_the_block_runs_unguarded(own_handlers: None) -> None:
    seen: list[Any] = []

    def body() -> None:
        with held_back("the node is up"):
            seen.append(signal.getsignal(signal.SIGINT))

    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert seen == [_arrived]


@pytest.mark.ray
def test_the_hazard_an_unconnected_ray_state_accessor_ends_the_process_badly() -> None:
    """What held_back() guards against, on the real Ray: the accessor Ray's state API builds, freed
    before connect() (what a KeyboardInterrupt between the two does), aborts the process (SIGABRT,
    "terminate called without an active exception") or, once its io thread runs, deadlocks it.
    When a Ray release fixes this, this test fails and held_back() can be reconsidered."""
    code = (
        "from ray._raylet import GcsClientOptions, GlobalStateAccessor\n"
        "o = GcsClientOptions.create('127.0.0.1:1', None, allow_cluster_id_nil=True, fetch_cluster_id_if_nil=False)\n"
        "a = GlobalStateAccessor(o)\n"
        "del a\n"
        "print('survived', flush=True)\n"
    )
    try:
        proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired as hung:
        assert "survived" not in str(hung.stdout or "")
        return
    assert proc.returncode == -signal.SIGABRT, proc.stdout + proc.stderr
    assert "terminate called without an active exception" in proc.stderr
