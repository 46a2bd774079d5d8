"""`python -m generator --gpu ...`: build, check and write one values file."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from generator.core.files import InputError, dump_values, write_atomic
from generator.validate.findings import ERROR
from generator.validate.values import validate_values
from generator.values.build import Options, build, layout_notes, total_nodes
from generator.values.options import generate_argv, options_from_args

# The cheapest run that proves a cluster works (README, Quickstart): what a file that is not it points to.
QUICKSTART_MODEL = "qwen2.5-1.5b"
QUICKSTART = "examples/quickstart-{gpu}.yaml (1 node, Qwen2.5-1.5B, 20 steps: about 1 node-hour)"


def max_steps(values: dict[str, Any]) -> int | None:
    for entry in values.get("grpo", {}).get("overrides") or []:
        key, _, value = str(entry).partition("=")
        if key == "grpo.max_num_steps" and value.isdigit():
            return int(value)
    return None


def cost(opts: Options, values: dict[str, Any]) -> str:
    """What the file costs to run, said before anyone installs it: its GPU nodes for the run's
    length, and the cheaper quickstart when this is not it."""
    nodes, steps = total_nodes(opts), max_steps(values)
    machine = values.get("accelerator", {}).get("machineType", opts.gpu)
    text = f"Cost: {nodes} GPU node(s) ({machine}) billed for the whole run: {steps or '?'} steps of {opts.model}."
    if nodes > 1 or opts.model != QUICKSTART_MODEL:
        text += f"\nThe cheapest proof that a cluster works is {QUICKSTART.format(gpu=opts.gpu)}."
    return text


def header(argv: list[str], notes: list[str] | None = None, costs: str = "") -> str:
    chosen = "".join(f"Chosen by the generator: {note}\n" for note in notes or [])
    return (
        "Values for the nemo-rl-gke chart, written by:\n"
        f"  python -m generator {shlex.join(argv)}\n"
        f"{chosen}" + (f"{costs}\n" if costs else "") + "Edit by hand or regenerate; check with: python -m generator validate FILE\n"
        "Install with: helm install RELEASE charts/nemo-rl-gke -f FILE"
    )


def render_text(opts: Options, argv: list[str]) -> str:
    return render_with_notes(opts, argv)[0]


def render_with_notes(opts: Options, argv: list[str]) -> tuple[str, list[str]]:
    """The values file's text and what the generator chose instead of refusing (its header says it too)."""
    try:
        values = build(opts)
    except ValueError as e:
        raise InputError(str(e)) from None
    findings = validate_values(values, objects=False)  # the chart tests render what the generator writes
    problems = [f"{f.key}: {f.message}" for f in findings if f.level == ERROR]
    if problems:
        raise InputError("the options give invalid values: " + "; ".join(problems))
    notes = layout_notes(opts)
    return dump_values(values, header(argv, notes, cost(opts, values))), notes


HELP = "write a values file for one accelerator (the default)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from generator.values.options import add_generate_args

    add_generate_args(p)


def run(args: argparse.Namespace) -> int:
    return generate(args)


def generate(args: argparse.Namespace) -> int:
    opts = options_from_args(args)
    out: Path = args.output or Path(f"values-{opts.gpu}.yaml")
    text, notes = render_with_notes(opts, generate_argv(args))
    outcome = write_atomic(out, text, force=args.force)
    for note in notes:  # after the write: a refused write prints its one error line only
        print(f"note: {note}", file=sys.stderr)
    print(f"{out}: {outcome} ({opts.gpu}, {total_nodes(opts)} GPU node(s))", file=sys.stderr)
    return 0
