"""Command line: `python -m generator --gpu GPU` (a profile of profiles.py) and its subcommands."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .values_io import InputError

SUBCOMMANDS = ("generate", "validate", "render", "infra", "rehearse")


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _generate(args: argparse.Namespace) -> int:
    from .generate import generate

    return generate(args)


def _validate(args: argparse.Namespace) -> int:
    from .validate_cli import run

    return run(args)


def _render(args: argparse.Namespace) -> int:
    from .render_cli import run

    return run(args)


def _infra(args: argparse.Namespace) -> int:
    from .infra_cli import run

    return run(args)


def _rehearse(args: argparse.Namespace) -> int:
    from .rehearse_cli import run

    return run(args)


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, Callable[[argparse.Namespace], int]]]:
    parser = _Parser(
        prog="python -m generator",
        description="Write, check and render values files for the nemo-rl-gke Helm chart.",
        epilog="Without a subcommand: generate (python -m generator --gpu h200).",
    )
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    gen = sub.add_parser("generate", help="write a values file for one accelerator (the default)")
    from .generate_options import add_generate_args

    add_generate_args(gen)

    val = sub.add_parser("validate", help="check values files: schema, then the semantic rules")
    val.add_argument("files", nargs="+", type=Path, metavar="FILE")
    val.add_argument("--format", choices=("text", "json"), default="text")
    val.add_argument("--strict", action="store_true", help="fail on warnings too")
    val.add_argument(
        "--no-chart-defaults",
        action="store_true",
        help="check the file alone, not merged over the chart's values.yaml as helm install does",
    )
    val.add_argument(
        "--release", default="nemo-rl", help="Helm release name the file will be installed as (names are checked); default nemo-rl"
    )

    ren = sub.add_parser("render", help="render the chart with the pinned Helm and validate every object")
    ren.add_argument("files", nargs="+", type=Path, metavar="VALUES")
    ren.add_argument("--out", type=Path, required=True, help="folder for the rendered manifests")
    from .render_cli import release_name

    ren.add_argument("--release", default="nemo-rl", type=release_name, help="Helm release name; default nemo-rl")
    ren.add_argument("--helm", default=None, help="helm binary to use instead of the pinned Helm 4")

    from .infra_cli import add_infra_args

    inf = sub.add_parser("infra", help="write the cluster bring-up (or teardown) shell script")
    add_infra_args(inf)

    from .rehearse_cli import add_rehearse_args

    reh = sub.add_parser("rehearse", help="rehearse the run's Ray resource requests on a local Ray cluster")
    add_rehearse_args(reh)

    handlers = {"generate": _generate, "validate": _validate, "render": _render, "infra": _infra, "rehearse": _rehearse}
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
    parser, handlers = build_parser()
    if argv and argv[0] not in SUBCOMMANDS and argv[0] not in ("-h", "--help"):
        argv = ["generate", *argv]
    elif not argv:
        parser.print_usage(sys.stderr)
        print("python -m generator: error: give --gpu b200|h200 or a subcommand (see --help)", file=sys.stderr)
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
