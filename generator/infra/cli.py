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

from generator import option_specs
from generator.gke import networks
from generator.gke.locations import REGION, ZONE_SUFFIX
from generator.gke.lustre import LUSTRE_THROUGHPUTS, LUSTRE_TIERS, sizes_text
from generator.gke.profiles import DEFAULT_ACCELERATOR, PROFILES
from generator.gke.provisioning import MODES, PROVISIONING
from generator.infra.script import bring_up_script, teardown_script
from generator.infra.steps import InfraOptions
from generator.option_specs import OptionSpec, canonical_argv, options_of
from generator.values.files import InputError, write_atomic
from generator.values.worker_groups import MAX_NODES

PROJECT_ID = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
CLUSTER_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")  # RFC 1035, at most 40
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")  # RFC 1123 label
GCE_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")  # RFC 1035, at most 63
RESERVATION_PATH = re.compile(
    r"^projects/[a-z][a-z0-9-]{4,28}[a-z0-9]/reservations/[a-z]([-a-z0-9]{0,61}[a-z0-9])?(/reservationBlocks/[-a-z0-9]+)?$"
)
IMAGE_PATH = re.compile(r"^projects/[a-z][a-z0-9-]{4,28}[a-z0-9]/global/images/[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")

DEFAULTS = InfraOptions(gpu=DEFAULT_ACCELERATOR, project="", region="", zone="")


D = DEFAULTS
# In --help order, which is also the order of the script's header command.
INFRA_OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("--gpu", "accelerator profile of the GPU nodes", required=True, choices=lambda: tuple(PROFILES)),
    OptionSpec("--project", "Google Cloud project id", required=True),
    OptionSpec("--region", "region of the cluster and subnets, e.g. us-central1", required=True),
    OptionSpec("--zone", "zone of the GPU nodes and the Lustre instance, e.g. us-central1-b", required=True),
    OptionSpec("--mode", f"GKE mode; default {D.mode}", choices=lambda: MODES),
    OptionSpec("--nodes", f"GPU nodes (8 GPUs each), 1-{MAX_NODES}; default {D.nodes}", type=int),
    OptionSpec("--provisioning", f"how GPU nodes are obtained; default {D.provisioning}", choices=lambda: PROVISIONING),
    OptionSpec("--reservation", "reservation name or path (with --provisioning reservation)"),
    OptionSpec("--cluster", f"GKE cluster name; default {D.cluster}"),
    OptionSpec("--network-prefix", "prefix of the VPC and subnet names (same as for the values file)"),
    OptionSpec("--lustre-capacity-gib", f"Managed Lustre capacity; default {D.lustre_capacity_gib}", type=int),
    OptionSpec(
        "--lustre-throughput", f"Managed Lustre MB/s per TiB; default {D.lustre_throughput}", type=int, choices=lambda: LUSTRE_THROUGHPUTS
    ),
    OptionSpec("--bucket", "Cloud Storage bucket name; default <project>-<cluster>"),
    OptionSpec("--namespace", f"Kubernetes namespace of the service account; default {D.namespace}"),
    OptionSpec("--ksa", f"Kubernetes service account with bucket access; default {D.ksa}"),
    OptionSpec("--preload-image-disk", "disk image preloaded as a secondary boot disk (Standard)", metavar="DISK_IMAGE"),
    OptionSpec("--output", "script file to write; default stdout", short="-o", field=None, type=Path),
    OptionSpec("--force", "overwrite an existing file that differs", field=None, switch=True),
    OptionSpec("--teardown", "write the script that deletes everything, in reverse order", field=None, switch=True),
    OptionSpec("--dry-run", "write a script whose default is --dry-run (print, do not run)", switch=True, header=None),
)


HELP = "write the cluster bring-up (or teardown) shell script"


def add_arguments(p: argparse.ArgumentParser) -> None:
    option_specs.add_arguments(p, INFRA_OPTIONS, DEFAULTS)


class _Invalid(Exception):
    """One bad option: the message starts with the option's name."""


def _check(ok: bool, option: str, message: str) -> None:
    if not ok:
        raise _Invalid(f"{option}: {message}")


def _check_location(o: InfraOptions) -> None:
    _check(
        bool(PROJECT_ID.fullmatch(o.project)),
        "--project",
        f"{o.project!r} is not a project id (6-30 lowercase letters, digits or '-', starting with a letter, not ending with '-')",
    )
    _check(bool(REGION.fullmatch(o.region)), "--region", f"{o.region!r} is not a region name such as us-central1")
    _check(
        o.zone.startswith(o.region) and bool(ZONE_SUFFIX.fullmatch(o.zone[len(o.region) :])),
        "--zone",
        f"{o.zone!r} is not a zone of region {o.region} (such as {o.region}-a)",
    )
    try:
        networks.check_prefix(o.network_prefix)
    except ValueError as e:
        raise _Invalid(f"--network-prefix: {e}") from None


def _check_nodes(o: InfraOptions) -> None:
    _check(1 <= o.nodes <= MAX_NODES, "--nodes", f"must be between 1 and {MAX_NODES}, got {o.nodes}")
    if o.provisioning == "reservation":
        _check(bool(o.reservation), "--reservation", "required with --provisioning reservation")
        _check(
            bool(GCE_NAME.fullmatch(o.reservation) or RESERVATION_PATH.fullmatch(o.reservation)),
            "--reservation",
            f"{o.reservation!r} is neither a reservation name nor projects/P/reservations/R[/reservationBlocks/B]",
        )
    else:
        _check(not o.reservation, "--reservation", f"only with --provisioning reservation (got --provisioning {o.provisioning})")
    _check(
        bool(CLUSTER_NAME.fullmatch(o.cluster)),
        "--cluster",
        f"{o.cluster!r} is not a lowercase RFC 1035 name of at most 40 characters",
    )


def _check_storage_and_names(o: InfraOptions) -> None:
    tier = LUSTRE_TIERS[o.lustre_throughput]
    _check(
        tier.allows(o.lustre_capacity_gib),
        "--lustre-capacity-gib",
        f"{o.lustre_capacity_gib} is no size of a --lustre-throughput {o.lustre_throughput} instance"
        f" (nearest: {sizes_text(o.lustre_capacity_gib, (tier,))})",
    )
    _check(bool(DNS_LABEL.fullmatch(o.namespace)), "--namespace", f"{o.namespace!r} is not a lowercase RFC 1123 label")
    _check(bool(DNS_LABEL.fullmatch(o.ksa)), "--ksa", f"{o.ksa!r} is not a lowercase RFC 1123 label")
    disk = o.preload_image_disk
    if disk:
        _check(o.mode == "standard", "--preload-image-disk", "only with --mode standard (Autopilot has no node pools to attach it to)")
        _check(
            bool(GCE_NAME.fullmatch(disk) or IMAGE_PATH.fullmatch(disk)),
            "--preload-image-disk",
            f"{disk!r} is neither an image name nor projects/P/global/images/NAME",
        )


def _check_bucket(o: InfraOptions) -> None:
    bucket = o.bucket_name
    source = "--bucket" if o.bucket else "--bucket (default <project>-<cluster>)"
    _check(
        bool(BUCKET_NAME.fullmatch(bucket)) and ".." not in bucket and "google" not in bucket and not bucket.startswith("goog"),
        source,
        f"{bucket!r} is not a bucket name (3-63 lowercase letters, digits, '-', '_' or '.'; no 'google')",
    )
    _check(not _is_ip_address(bucket), source, f"{bucket!r} is an IP address; Cloud Storage refuses those as bucket names")


def options_from_args(args: argparse.Namespace) -> InfraOptions:
    """Validated options; raises _Invalid naming the first bad option."""
    opts = options_of(args, INFRA_OPTIONS, DEFAULTS)
    for check in (_check_location, _check_nodes, _check_storage_and_names, _check_bucket):
        check(opts)
    return opts


def _is_ip_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def infra_argv(opts: InfraOptions) -> str:
    """The options that shape the script, for its header (not -o/--force)."""
    return shlex.join(canonical_argv(opts, INFRA_OPTIONS, DEFAULTS))


def run(args: argparse.Namespace) -> int:
    try:
        opts = options_from_args(args)
    except _Invalid as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    argv = infra_argv(opts)
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
