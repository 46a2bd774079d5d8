"""`python -m generator status [RELEASE] [--namespace N] [--watch]`: a release's RayCluster, its pods
by group (with the scheduler's reason for a Pending one), the preparation and launcher Jobs, the
run's Ray job state (through the API server's service proxy to the head's dashboard: no
port-forward) and its progress (the latest training step). Read-only.

Exit 0 when the release was found, 1 when the namespace holds no RayCluster or Job of that
release or they could not be read (said as "could not read", never as "none"), 2 for environment
errors (no kubeconfig, an API server that cannot be reached or refuses
the credentials)."""

from __future__ import annotations

import argparse
import sys
import time

HELP = "show a release's Ray cluster, pods, Jobs, run state and training progress (read-only)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from generator.cluster.kube import add_cluster_arguments

    p.add_argument("release", nargs="?", default="nemo-rl", metavar="RELEASE", help="the Helm release name; default nemo-rl")
    add_cluster_arguments(p)
    p.add_argument("--watch", action="store_true", help="print it again every --interval seconds until interrupted (Ctrl-C)")
    p.add_argument("--interval", type=float, default=15.0, metavar="S", help="seconds between two looks with --watch; default 15")
    p.add_argument("--format", choices=("text", "json"), default="text")


def run(args: argparse.Namespace) -> int:
    from generator.cluster import status_report
    from generator.cluster.kube import ClusterError, connect
    from generator.cluster.state import read

    try:
        kube = connect(args.kubeconfig, args.context, args.namespace)
        while True:
            state = read(kube, args.release)
            if args.format == "json":
                print(status_report.as_json(state, kube.server, kube.context), flush=True)
            else:
                stamp = time.strftime("%H:%M:%S")
                print(f"release {args.release} in namespace {kube.namespace} ({kube.server}, context {kube.context}) at {stamp}")
                print("\n".join(status_report.lines(state)), flush=True)
            if not args.watch:
                break
            time.sleep(max(1.0, args.interval))
            print(flush=True)
    except ClusterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if state.unknown:
        unread = " and ".join(k for k in ("rayclusters", "jobs") if k in state.unread)
        print(f"status: could not read the {unread} of namespace {kube.namespace}: release {args.release} not shown", file=sys.stderr)
        return 1
    if not state.found:
        print(f"status: no RayCluster or Job of release {args.release} in namespace {kube.namespace}", file=sys.stderr)
        return 1
    return 0
