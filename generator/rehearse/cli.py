"""`python -m generator rehearse VALUES_FILE [-f MORE] [--set K=V]... [--drill preempt] [--max-nodes 16]`:
rehearse the run's Ray resource requests (and, with --drill preempt, a Spot reclaim) on a local Ray cluster shaped
like the rendered RayCluster, before any GPU is paid for.

Exit status: 0 every request placed (drill passed); 1 not; 2 bad input or more worker nodes than
--max-nodes; 130 interrupted. Every Ray process the rehearsal starts is ended on the way out,
also on Ctrl-C, SIGTERM and errors.
"""

from __future__ import annotations

import argparse
import signal
from pathlib import Path
from typing import Any

from generator.core.arg_types import int_range
from generator.helm.runner import DEFAULT_RELEASE
from generator.values.worker_groups import MAX_NODES

HELP = "rehearse the run's Ray resource requests on a local Ray cluster"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("values", type=Path, metavar="VALUES_FILE", help="the values file, as given to helm install -f")
    p.add_argument("--drill", choices=("preempt",), default=None, help="preempt: reclaim a GPU node mid-run and check the resume")
    p.add_argument(
        "--max-nodes",
        type=int_range("--max-nodes", 1, MAX_NODES),
        default=16,
        help="most GPU worker nodes to start locally (one Ray node each); default 16",
    )
    from generator.core.arguments import add_release_name

    add_release_name(p, f"Helm release name; default {DEFAULT_RELEASE}")
    from generator.values.layers import add_layer_arguments

    add_layer_arguments(p, "merged over VALUES_FILE in this order; the merged result is rehearsed")


def _interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    from generator.rehearse.interrupts import handled_by
    from generator.rehearse.run import Request, rehearse

    with handled_by(_interrupt, (signal.SIGTERM, signal.SIGHUP)):
        request = Request(
            args.values,
            release=args.release,
            drill=args.drill,
            max_nodes=args.max_nodes,
            more=tuple(args.more),
            sets=tuple(args.sets),
        )
        return rehearse(request)
