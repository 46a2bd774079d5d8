"""scripts/testbed.sh: the test bed by hand.

    scripts/testbed.sh build             build what is missing (Go's caches make a rebuild a link)
    scripts/testbed.sh up [--gpu h200] [--nodes 2] [--network rdma] [--kuberay v1.6.2]
                                         start it; prints the KUBECONFIG line to paste
                                         (--gpu gb200 --network dranet: A4X nodes with managed DRANET)
    scripts/testbed.sh env               print `export KUBECONFIG=...` for the running one
    scripts/testbed.sh status            what runs, per process
    scripts/testbed.sh down              stop every process and delete its data

Its state lives in .cache/testbed/ (certificates, etcd's data, logs/, kubeconfig). The
processes outlive `up` until `down`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from generator.core.paths import ROOT
from generator.gke import networks
from generator.gke.profiles import DEFAULT_ACCELERATOR, PROFILES
from testbed import bed, components
from testbed.build import BuildError, build
from testbed.processes import ProcessError, Supervisor, _alive
from testbed.toolchain import ToolchainError

STATE = ROOT / ".cache" / "testbed"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scripts/testbed.sh", description="the real-cluster test bed, by hand")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="build every component that is missing or out of date")
    u = sub.add_parser("up", help="start the test bed and print its KUBECONFIG")
    u.add_argument("--gpu", choices=sorted(PROFILES), default=DEFAULT_ACCELERATOR, help="the GPU pool's accelerator")
    u.add_argument("--nodes", type=int, default=2, help="nodes in the GPU pool (default 2)")
    u.add_argument(
        "--network",
        choices=networks.MODES,
        default=networks.DEFAULT_MODE,
        help="the GPU pool's network mode (dranet: the pool's nodes carry managed DRANET's labels and NICs)",
    )
    u.add_argument(
        "--kuberay",
        action="append",
        choices=[c.version for c in components.KUBERAY],
        help="a KubeRay version to run (repeat for several; default: every one)",
    )
    sub.add_parser("env", help="print the export line for the running test bed's KUBECONFIG")
    sub.add_parser("status", help="list the test bed's processes")
    sub.add_parser("down", help="stop the test bed and delete its state")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "build":
            for b in build():
                print(f"{b.component.folder} {b.component.version}: {'built' if b.rebuilt else 'up to date'} ({b.seconds:.1f} s)")
            return 0
        if args.command == "up":
            if args.nodes < 1:
                print("error: --nodes must be at least 1", file=sys.stderr)
                return 2
            dranet = args.network == "dranet"
            if dranet and not PROFILES[args.gpu].dranet:
                print(f"error: --network dranet: {args.gpu} has no managed DRANET; choose another --gpu or --network", file=sys.stderr)
                return 2
            t = bed.up(STATE, bed.default_infra(args.gpu, args.nodes), kuberay=args.kuberay or (), detached=True, dranet=dranet)
            for c in t.clusters:
                print(f"context {c.name}: {c.server} (Kubernetes {t.kubernetes}, KubeRay {c.kuberay})")
            print(f"started in {sum(v for k, v in t.timings.items() if k != 'build'):.1f} s (+ {t.timings['build']:.1f} s build)")
            print(f"export KUBECONFIG={t.kubeconfig}")
            return 0
        if args.command == "env":
            t = bed.load(STATE)
            if t is None:
                print("error: no test bed is running; start one with scripts/testbed.sh up", file=sys.stderr)
                return 1
            print(f"export KUBECONFIG={t.kubeconfig}")
            return 0
        if args.command == "status":
            records = Supervisor(STATE).records() if STATE.exists() else []
            if not records:
                print("no test bed is running")
                return 1
            for r in records:
                print(f"{r.name:40} pid {r.pid:<8} {'running' if _alive(r) else 'gone'}")
            return 0
        stopped = bed.down(STATE)
        print(f"stopped {len(stopped)} processes" if stopped else "no test bed was running")
        return 0
    except (BuildError, ToolchainError, ProcessError, TimeoutError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        if STATE.exists():
            print(f"logs: {Path(STATE) / 'logs'}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        bed.down(STATE)
        return 130


if __name__ == "__main__":
    sys.exit(main())
