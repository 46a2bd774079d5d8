"""`python -m generator infra`: write the GKE bring-up (or teardown) shell script.

Every input is checked before anything is written; a bad one stops with a one-line error that
names the option and exit status 1. The script goes to stdout, or atomically to `-o FILE`.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import shlex
import sys
from pathlib import Path

from . import networks
from .gke import MODES, PROVISIONING
from .infra_script import bring_up_script, teardown_script
from .infra_steps import InfraOptions
from .lustre import LUSTRE_MIN_GIB, LUSTRE_THROUGHPUTS
from .profiles import ACCELERATORS
from .values_io import InputError, write_atomic
from .worker_groups import MAX_NODES

PROJECT_ID = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
REGION = re.compile(r"^[a-z]+-[a-z]+[0-9]{1,2}$")
ZONE_SUFFIX = re.compile(r"^-[a-z]$")
CLUSTER_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")  # RFC 1035, at most 40
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")  # RFC 1123 label
GCE_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")  # RFC 1035, at most 63
RESERVATION_PATH = re.compile(
    r"^projects/[a-z][a-z0-9-]{4,28}[a-z0-9]/reservations/[a-z]([-a-z0-9]{0,61}[a-z0-9])?(/reservationBlocks/[-a-z0-9]+)?$"
)
IMAGE_PATH = re.compile(r"^projects/[a-z][a-z0-9-]{4,28}[a-z0-9]/global/images/[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")

DEFAULTS = InfraOptions(gpu="h200", project="", region="", zone="")


def add_infra_args(p: argparse.ArgumentParser) -> None:
    d = DEFAULTS
    p.add_argument("--gpu", required=True, choices=ACCELERATORS, help="accelerator profile of the GPU nodes")
    p.add_argument("--project", required=True, help="Google Cloud project id")
    p.add_argument("--region", required=True, help="region of the cluster and subnets, e.g. us-central1")
    p.add_argument("--zone", required=True, help="zone of the GPU nodes and the Lustre instance, e.g. us-central1-b")
    p.add_argument("--mode", choices=MODES, default=d.mode, help=f"GKE mode; default {d.mode}")
    p.add_argument("--nodes", type=int, default=d.nodes, help=f"GPU nodes (8 GPUs each), 1-{MAX_NODES}; default {d.nodes}")
    p.add_argument(
        "--provisioning", choices=PROVISIONING, default=d.provisioning, help=f"how GPU nodes are obtained; default {d.provisioning}"
    )
    p.add_argument("--reservation", default="", help="reservation name or path (with --provisioning reservation)")
    p.add_argument("--cluster", default=d.cluster, help=f"GKE cluster name; default {d.cluster}")
    p.add_argument("--network-prefix", default=d.network_prefix, help="prefix of the VPC and subnet names (same as for the values file)")
    p.add_argument(
        "--lustre-capacity-gib", type=int, default=d.lustre_capacity_gib, help=f"Managed Lustre capacity; default {d.lustre_capacity_gib}"
    )
    p.add_argument(
        "--lustre-throughput",
        type=int,
        choices=LUSTRE_THROUGHPUTS,
        default=d.lustre_throughput,
        help=f"Managed Lustre MB/s per TiB; default {d.lustre_throughput}",
    )
    p.add_argument("--bucket", default="", help="Cloud Storage bucket name; default <project>-<cluster>")
    p.add_argument("--namespace", default=d.namespace, help=f"Kubernetes namespace of the service account; default {d.namespace}")
    p.add_argument("--ksa", default=d.ksa, help=f"Kubernetes service account with bucket access; default {d.ksa}")
    p.add_argument(
        "--preload-image-disk", default="", metavar="DISK_IMAGE", help="disk image preloaded as a secondary boot disk (Standard)"
    )
    p.add_argument("-o", "--output", type=Path, help="script file to write; default stdout")
    p.add_argument("--force", action="store_true", help="overwrite an existing file that differs")
    p.add_argument("--teardown", action="store_true", help="write the script that deletes everything, in reverse order")
    p.add_argument("--dry-run", action="store_true", help="write a script whose default is --dry-run (print, do not run)")


class _Invalid(Exception):
    """One bad option: the message starts with the option's name."""


def _check(ok: bool, option: str, message: str) -> None:
    if not ok:
        raise _Invalid(f"{option}: {message}")


def options_from_args(args: argparse.Namespace) -> InfraOptions:
    """Validated options; raises _Invalid naming the first bad option."""
    _check(
        bool(PROJECT_ID.fullmatch(args.project)),
        "--project",
        f"{args.project!r} is not a project id (6-30 lowercase letters, digits or '-', starting with a letter, not ending with '-')",
    )
    _check(bool(REGION.fullmatch(args.region)), "--region", f"{args.region!r} is not a region name such as us-central1")
    _check(
        args.zone.startswith(args.region) and bool(ZONE_SUFFIX.fullmatch(args.zone[len(args.region) :])),
        "--zone",
        f"{args.zone!r} is not a zone of region {args.region} (such as {args.region}-a)",
    )
    try:
        networks.check_prefix(args.network_prefix)
    except ValueError as e:
        raise _Invalid(f"--network-prefix: {e}") from None
    _check(1 <= args.nodes <= MAX_NODES, "--nodes", f"must be between 1 and {MAX_NODES}, got {args.nodes}")
    if args.provisioning == "reservation":
        _check(bool(args.reservation), "--reservation", "required with --provisioning reservation")
        _check(
            bool(GCE_NAME.fullmatch(args.reservation) or RESERVATION_PATH.fullmatch(args.reservation)),
            "--reservation",
            f"{args.reservation!r} is neither a reservation name nor projects/P/reservations/R[/reservationBlocks/B]",
        )
    else:
        _check(not args.reservation, "--reservation", f"only with --provisioning reservation (got --provisioning {args.provisioning})")
    _check(
        bool(CLUSTER_NAME.fullmatch(args.cluster)),
        "--cluster",
        f"{args.cluster!r} is not a lowercase RFC 1035 name of at most 40 characters",
    )
    tier_min = LUSTRE_MIN_GIB[args.lustre_throughput]
    _check(
        args.lustre_capacity_gib >= tier_min and args.lustre_capacity_gib % tier_min == 0,
        "--lustre-capacity-gib",
        f"must be a multiple of {tier_min} with --lustre-throughput {args.lustre_throughput}, got {args.lustre_capacity_gib}",
    )
    _check(bool(DNS_LABEL.fullmatch(args.namespace)), "--namespace", f"{args.namespace!r} is not a lowercase RFC 1123 label")
    _check(bool(DNS_LABEL.fullmatch(args.ksa)), "--ksa", f"{args.ksa!r} is not a lowercase RFC 1123 label")
    disk = args.preload_image_disk
    if disk:
        _check(args.mode == "standard", "--preload-image-disk", "only with --mode standard (Autopilot has no node pools to attach it to)")
        _check(
            bool(GCE_NAME.fullmatch(disk) or IMAGE_PATH.fullmatch(disk)),
            "--preload-image-disk",
            f"{disk!r} is neither an image name nor projects/P/global/images/NAME",
        )
    opts = InfraOptions(
        gpu=args.gpu,
        project=args.project,
        region=args.region,
        zone=args.zone,
        mode=args.mode,
        nodes=args.nodes,
        provisioning=args.provisioning,
        reservation=args.reservation,
        cluster=args.cluster,
        network_prefix=args.network_prefix,
        lustre_capacity_gib=args.lustre_capacity_gib,
        lustre_throughput=args.lustre_throughput,
        bucket=args.bucket,
        namespace=args.namespace,
        ksa=args.ksa,
        preload_image_disk=disk,
        dry_run=args.dry_run,
    )
    bucket = opts.bucket_name
    source = "--bucket" if args.bucket else "--bucket (default <project>-<cluster>)"
    _check(
        bool(BUCKET_NAME.fullmatch(bucket)) and ".." not in bucket and "google" not in bucket and not bucket.startswith("goog"),
        source,
        f"{bucket!r} is not a bucket name (3-63 lowercase letters, digits, '-', '_' or '.'; no 'google')",
    )
    _check(not _is_ip_address(bucket), source, f"{bucket!r} is an IP address; Cloud Storage refuses those as bucket names")
    return opts


def _is_ip_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def canonical_argv(opts: InfraOptions) -> str:
    """The options that shape the script, for its header (not -o/--force)."""
    argv = ["--gpu", opts.gpu, "--project", opts.project, "--region", opts.region, "--zone", opts.zone]
    flags = {
        "mode": "--mode",
        "nodes": "--nodes",
        "provisioning": "--provisioning",
        "reservation": "--reservation",
        "cluster": "--cluster",
        "network_prefix": "--network-prefix",
        "lustre_capacity_gib": "--lustre-capacity-gib",
        "lustre_throughput": "--lustre-throughput",
        "bucket": "--bucket",
        "namespace": "--namespace",
        "ksa": "--ksa",
        "preload_image_disk": "--preload-image-disk",
    }
    for field, flag in flags.items():
        value = getattr(opts, field)
        if value != getattr(DEFAULTS, field):
            argv += [flag, str(value)]
    return shlex.join(argv)


def run(args: argparse.Namespace) -> int:
    try:
        opts = options_from_args(args)
    except _Invalid as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    argv = canonical_argv(opts)
    if args.teardown:
        argv += " --teardown"
    if opts.dry_run:
        argv += " --dry-run"
    text = teardown_script(opts, argv) if args.teardown else bring_up_script(opts, argv)
    out: Path | None = args.output
    if out is None:
        sys.stdout.write(text)
        return 0
    try:
        outcome = write_atomic(out, text, force=args.force)
    except InputError as e:
        print(f"error: -o: {e}", file=sys.stderr)
        return 1
    os.chmod(out, 0o755)  # noqa: S103 - a shell script to run, world-readable like the checkout
    kind = "teardown" if args.teardown else "bring-up"
    print(f"{out}: {outcome} ({kind} script, {opts.gpu}, {opts.mode}); try: bash {out} --dry-run", file=sys.stderr)
    return 0
