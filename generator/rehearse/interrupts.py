"""Ctrl-C, SIGTERM and SIGHUP held back while a Ray call that must not be cut short runs.

Why: Ray 2.55's state API builds a C++ GlobalStateAccessor, whose io thread is joined only once
connect() has run (ray/_private/state.py GlobalState._connect_and_get_accessor makes the object,
then calls connect()). A KeyboardInterrupt raised between the two destroys an unjoined std::thread:
the process aborts ("terminate called without an active exception", exit -6) or deadlocks,
before any clean-up or message (tests/rehearse/test_interrupts.py shows it on the installed Ray).
Cluster._wait_for_node() and wait_for_nodes() go through that API (ray/_private/services.py
wait_for_node), and a Ctrl-C while a node starts lands there.

Inside `held_back()`, those signals are recorded, one line on stderr says the interrupt is taken,
and the first one is raised again as soon as the Ray call returns: each call ends within its
timeout (cluster.REGISTER_S for a node to register).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def handled_by(handler: Callable[[int, Any], None], signals: Iterable[int]) -> Iterator[None]:
    """`handler` for `signals` during the block; the handlers in force before it afterwards."""
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, before in previous.items():
            signal.signal(sig, before)


@contextlib.contextmanager
def held_back(doing: str) -> Iterator[None]:
    """Hold SIGNALS back for the block; `doing` says what finishes first (one line on stderr).
    Signals ignored when the block starts stay ignored; those handled outside Python are left alone.

    Outside the main thread (where Python cannot set handlers) the block runs unguarded."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def record(signum: int, _frame: Any) -> None:
        if not received:
            print(f"interrupt received: stopping once {doing}", file=sys.stderr, flush=True)
        received.append(signum)

    # An ignored signal (a shell's background job starts with SIGINT ignored) stays ignored, and one
    # whose handler was set outside Python (getsignal: None) is left alone: it could not be put back.
    taken = [sig for sig in SIGNALS if signal.getsignal(sig) not in (signal.SIG_IGN, None)]
    try:
        with handled_by(record, taken):
            yield
    finally:
        if received:
            # The handler in force again acts on it as if it had just arrived: Python's SIGINT
            # handler and the rehearse command's SIGTERM/SIGHUP handler raise KeyboardInterrupt.
            signal.raise_signal(received[0])
