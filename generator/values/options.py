"""The generator's options (`python -m generator --gpu ...`), each declared once: the argparse
argument, the `values_builder.Options` field and its place in the values file's header."""

from __future__ import annotations

import argparse
from pathlib import Path

from generator.core.arg_types import int_range
from generator.core.errors import InputError
from generator.core.option_specs import OptionSpec, add_arguments, canonical_argv, options_of
from generator.gke import networks
from generator.gke.profiles import PROFILES
from generator.gke.provisioning import MODES, PROVISIONING
from generator.nemo_rl import releases
from generator.nemo_rl import run_spec as grpo
from generator.values.build import Options
from generator.values.worker_groups import MAX_NODES, GroupSpec, parse_groups

MAX_COUNT = 1_000_000  # --max-steps, --prompts-per-step, ...: bounds that keep the arithmetic small
RUN = "the GRPO run"
DEFAULTS = Options(gpu="")


def _groups(text: str) -> tuple[GroupSpec, ...]:
    try:
        return parse_groups(text)
    except ValueError as e:
        raise InputError(str(e)) from None


# In --help order; `header` orders the values file's header command (the canonical argv).
GENERATE_OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("--gpu", "accelerator profile of the GPU nodes", required=True, choices=lambda: tuple(PROFILES)),
    OptionSpec(
        "--nodes",
        "GPU worker nodes (8 GPUs each), 1-64; default 2",
        type=int_range("--nodes", 1, MAX_NODES),
        unset_default=True,
        header=1,
    ),
    OptionSpec("--output", "values file to write; default values-<gpu>.yaml in the current folder", short="-o", field=None, type=Path),
    OptionSpec("--name", "RayCluster/object name prefix (fullnameOverride); default: the Helm release name", header=2),
    OptionSpec("--storage-claim", "use this existing ReadWriteMany PVC instead of a static Lustre volume", header=3),
    OptionSpec(
        "--network",
        "how GPU workers reach each other: rdma (multi-networking), dranet (GKE managed DRANET), tcp; default rdma",
        choices=lambda: networks.MODES,
        header=22,
    ),
    OptionSpec("--network-prefix", "prefix of the VPC and subnet names (same as for `infra`)", header=4),
    OptionSpec(
        "--existing-networks",
        "the cluster already has the GKE Network objects (another release made them): leave them out (network.createObjects: false)",
        switch=True,
        header=20,
    ),
    OptionSpec(
        "--provisioning",
        "how GPU nodes are obtained; default the machine's (spot; reservation where Google offers nothing else)",
        choices=lambda: PROVISIONING,
        unset_default=True,
        header=5,
    ),
    OptionSpec("--reservation", "reservation name (with --provisioning reservation)", unset_default=True, header=6),
    OptionSpec(
        "--reservation-project",
        "project that shares the reservation with the cluster's (cloud.google.com/reservation-project); default the cluster's",
        header=21,
    ),
    OptionSpec(
        "--groups",
        "several worker groups instead of --nodes/--provisioning: NAME=REPLICAS[:PROVISIONING[:RESERVATION]],... "
        "e.g. reserved=4:reservation:res-a,spot=4:spot",
        unset_default=True,
        convert=_groups,
        show=lambda groups: ",".join(map(str, groups)),
        header=18,
    ),
    OptionSpec("--kueue-queue", "queue the RayCluster in this Kueue LocalQueue", header=17),
    OptionSpec("--release", "NeMo RL release", choices=lambda: tuple(releases.RELEASES), header=7),
    OptionSpec("--mode", "GKE mode of the cluster; default standard", choices=lambda: MODES, header=15),
    OptionSpec("--model", "model preset; default the tutorial's gemma3-27b", choices=lambda: tuple(grpo.MODELS), section=RUN, header=8),
    OptionSpec(
        "--generation-nodes",
        "nodes dedicated to vLLM generation; default 0, colocated as the model's NeMo RL recipe (1 on 2 nodes: the seed tutorial's split)",
        type=int_range("--generation-nodes", 0, MAX_COUNT),
        section=RUN,
        header=9,
    ),
    OptionSpec("--max-steps", "total GRPO steps", type=int_range("--max-steps", 1, MAX_COUNT), section=RUN, header=10),
    OptionSpec("--prompts-per-step", type=int_range("--prompts-per-step", 1, MAX_COUNT), section=RUN, header=11),
    OptionSpec("--generations-per-prompt", type=int_range("--generations-per-prompt", 1, MAX_COUNT), section=RUN, header=12),
    OptionSpec("--run-name", "run name: checkpoint/log folder and W&B name", section=RUN, header=13),
    OptionSpec(
        "--save-by",
        "DD:HH:MM:SS after training starts to save and stop (checkpoint_must_save_by); flex-start: 06:22:00:00",
        section=RUN,
        header=16,
    ),
    OptionSpec(
        "--async",
        "asynchronous GRPO: generation runs ahead on the dedicated generation nodes while training trains "
        "(importance-sampling correction on, trajectories at most 1 step old); without --generation-nodes, half "
        "the nodes run vLLM",
        field="async_grpo",
        switch=True,
        section=RUN,
        header=23,
    ),
    OptionSpec("--wandb", "log to Weights & Biases (needs WANDB_API_KEY in the Secret)", switch=True, section=RUN, header=19),
    OptionSpec("--secret", "existing Secret with HF_TOKEN (and WANDB_API_KEY); default nemo-rl-tokens when needed", section=RUN, header=14),
    OptionSpec("--force", "overwrite an existing file that differs", field=None, switch=True),
)


def add_generate_args(p: argparse.ArgumentParser) -> None:
    add_arguments(p, GENERATE_OPTIONS, DEFAULTS)


def options_from_args(args: argparse.Namespace) -> Options:
    given = [s.flag for s in GENERATE_OPTIONS if s.unset_default and s.convert is None and getattr(args, s.dest) is not None]
    if args.groups and given:
        raise InputError(f"--groups sets each group's nodes, provisioning and reservation: drop {', '.join(given)}")
    return options_of(args, GENERATE_OPTIONS, DEFAULTS)


def generate_argv(args: argparse.Namespace) -> list[str]:
    """The generator options that shape the file (not -o/--force), for the header."""
    return canonical_argv(options_from_args(args), GENERATE_OPTIONS, DEFAULTS)
