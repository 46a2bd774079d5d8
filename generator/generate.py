"""`python -m generator --gpu ...`: build, check and write one values file."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from .findings import ERROR
from .validate import validate_values
from .values_builder import Options, build, total_nodes
from .values_io import InputError, dump_values, write_atomic
from .worker_groups import MAX_NODES, GroupSpec, worker_nodes


def header(argv: list[str]) -> str:
    return (
        "Values for the nemo-rl-gke chart, written by:\n"
        f"  python -m generator {shlex.join(argv)}\n"
        "Edit by hand or regenerate; check with: python -m generator validate FILE\n"
        "Install with: helm install RELEASE charts/nemo-rl-gke -f FILE"
    )


def _groups(text: str) -> tuple[GroupSpec, ...]:
    try:
        groups = tuple(GroupSpec.parse(t) for t in text.split(",") if t.strip())
    except ValueError as e:
        raise InputError(str(e)) from None
    total = worker_nodes(g.replicas for g in groups)
    if total > MAX_NODES:
        raise InputError(f"--groups: {total} GPU nodes in all; at most {MAX_NODES}")
    return groups


def options_from_args(args: argparse.Namespace) -> Options:
    given = [
        flag
        for flag, value in (("--nodes", args.nodes), ("--provisioning", args.provisioning), ("--reservation", args.reservation))
        if value is not None
    ]
    if args.groups and given:
        raise InputError(f"--groups sets each group's nodes, provisioning and reservation: drop {', '.join(given)}")
    defaults = Options(gpu=args.gpu)
    return Options(
        gpu=args.gpu,
        nodes=defaults.nodes if args.nodes is None else args.nodes,
        name=args.name,
        storage_claim=args.storage_claim,
        network_prefix=args.network_prefix,
        existing_networks=args.existing_networks,
        provisioning=defaults.provisioning if args.provisioning is None else args.provisioning,
        reservation=defaults.reservation if args.reservation is None else args.reservation,
        release=args.release,
        model=args.model,
        generation_nodes=args.generation_nodes,
        max_steps=args.max_steps,
        prompts_per_step=args.prompts_per_step,
        generations_per_prompt=args.generations_per_prompt,
        run_name=args.run_name,
        wandb=args.wandb,
        secret=args.secret,
        mode=args.mode,
        save_by=args.save_by,
        groups=_groups(args.groups),
        kueue_queue=args.kueue_queue,
    )


def canonical_argv(args: argparse.Namespace) -> list[str]:
    """The generator options that shape the file (not -o/--force), for the header."""
    argv = ["--gpu", args.gpu]
    defaults = Options(gpu=args.gpu)
    opts = options_from_args(args)
    for flag, field in (
        ("--nodes", "nodes"),
        ("--name", "name"),
        ("--storage-claim", "storage_claim"),
        ("--network-prefix", "network_prefix"),
        ("--provisioning", "provisioning"),
        ("--reservation", "reservation"),
        ("--release", "release"),
        ("--model", "model"),
        ("--generation-nodes", "generation_nodes"),
        ("--max-steps", "max_steps"),
        ("--prompts-per-step", "prompts_per_step"),
        ("--generations-per-prompt", "generations_per_prompt"),
        ("--run-name", "run_name"),
        ("--secret", "secret"),
        ("--mode", "mode"),
        ("--save-by", "save_by"),
        ("--kueue-queue", "kueue_queue"),
    ):
        value = getattr(opts, field)
        if value != getattr(defaults, field):
            argv += [flag, str(value)]
    if opts.groups:
        argv += ["--groups", ",".join(map(str, opts.groups))]
    if opts.wandb:
        argv.append("--wandb")
    if opts.existing_networks:
        argv.append("--existing-networks")
    return argv


def render_text(opts: Options, argv: list[str]) -> str:
    try:
        values = build(opts)
    except ValueError as e:
        raise InputError(str(e)) from None
    findings = validate_values(values)
    problems = [f"{f.key}: {f.message}" for f in findings if f.level == ERROR]
    if problems:
        raise InputError("the options give invalid values: " + "; ".join(problems))
    return dump_values(values, header(argv))


def generate(args: argparse.Namespace) -> int:
    opts = options_from_args(args)
    out: Path = args.output or Path(f"values-{opts.gpu}.yaml")
    text = render_text(opts, canonical_argv(args))
    outcome = write_atomic(out, text, force=args.force)
    print(f"{out}: {outcome} ({opts.gpu}, {total_nodes(opts)} GPU node(s))", file=sys.stderr)
    return 0
