"""Command line: `python -m generator --gpu GPU` (a profile of profiles.py) and its subcommands."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

from generator.core.errors import InputError


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


# The subcommands, each a module that owns its arguments: HELP, add_arguments(parser), run(args).
COMMANDS: dict[str, str] = {
    "generate": "generator.generate",
    "validate": "generator.validate.cli",
    "render": "generator.render.cli",
    "infra": "generator.infra.cli",
    "rehearse": "generator.rehearse.cli",
    "doctor": "generator.cluster.doctor",
    "status": "generator.cluster.status",
}
SUBCOMMANDS = tuple(COMMANDS)


def build_parser(
    only: str | None = None,
) -> tuple[argparse.ArgumentParser, dict[str, Callable[[argparse.Namespace], int]]]:
    """The parser of every subcommand, or with `only`, of that one alone (the others are named but
    not imported: each subcommand's module pulls in what it needs, and start-up pays for one)."""
    parser = _Parser(
        prog="python -m generator",
        description="Write, check and render values files for the nemo-rl-gke Helm chart.",
        epilog="Without a subcommand: generate (python -m generator --gpu h200).",
    )
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    handlers = {}
    for name, module_name in COMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name)
            continue
        module = importlib.import_module(module_name)
        module.add_arguments(sub.add_parser(name, help=module.HELP))
        handlers[name] = module.run
    return parser, handlers


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush of what could not be written
    does not print a second error."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


class StdoutError(OSError):
    """A write to standard output failed (a full disk, a closed terminal)."""


class _GuardedStdout:
    """sys.stdout whose write errors say that they are errors of standard output."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except BrokenPipeError:
            raise
        except OSError as e:
            raise StdoutError(e.errno, e.strerror) from None

    def write(self, text: str) -> int:
        return self._call(self._stream.write, text)

    def flush(self) -> None:
        self._call(self._stream.flush)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def main(argv: Sequence[str] | None = None) -> int:
    real = sys.stdout
    sys.stdout = _GuardedStdout(real)  # type: ignore[assignment]
    try:
        try:
            return _main(argv)
        finally:
            sys.stdout.flush()  # here, not at exit, so a failed write is reported like any other
    except BrokenPipeError:
        # The reader went away (`... | head`): nothing to tell it; fail like a process killed by SIGPIPE.
        _quiet_stdout()
        return 128 + signal.SIGPIPE
    except StdoutError as e:
        _quiet_stdout()
        with contextlib.suppress(OSError):
            print(f"error: cannot write to standard output: {e.strerror or e}", file=sys.stderr)
        return 1
    except OSError as e:
        where = f"{e.filename}: {e.strerror or e}" if e.filename is not None else str(e)
        print(f"error: {where}", file=sys.stderr)
        return 1
    finally:
        sys.stdout = real


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in SUBCOMMANDS and argv[0] not in ("-h", "--help"):
        argv = ["generate", *argv]
    parser, handlers = build_parser(argv[0] if argv and argv[0] in SUBCOMMANDS else None)
    if not argv:
        parser.print_usage(sys.stderr)
        from generator.gke.profiles import PROFILES

        print(f"python -m generator: error: give --gpu {'|'.join(PROFILES)} or a subcommand (see --help)", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    try:
        return handlers[args.command](args)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
