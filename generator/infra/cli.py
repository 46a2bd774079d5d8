"""`python -m generator infra`: write the GKE bring-up (or teardown) shell script.

Every input is checked before anything is written; a bad one stops with a one-line error that
names the option and exit status 1. The script goes to stdout, or atomically to `-o FILE`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shlex
import sys
from pathlib import Path

from generator.core import option_specs
from generator.core.files import InputError, write_atomic
from generator.core.option_specs import OptionSpec, canonical_argv, options_of
from generator.gke import networks
from generator.gke.locations import REGION, ZONE_SUFFIX
from generator.gke.lustre import LUSTRE_THROUGHPUTS, LUSTRE_TIERS, sizes_text
from generator.gke.profiles import DEFAULT_ACCELERATOR, PROFILES, profile
from generator.gke.provisioning import MODES, PROVISIONING, machine_default, not_offered, reservation_missing
from generator.infra.options import NETWORK_MODES, TOPOLOGY_MODES, InfraOptions
from generator.infra.script import bring_up_script, teardown_script
from generator.values.worker_groups import MAX_NODES, GroupSpec, parse_groups, worker_nodes

PROJECT_ID = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
CLUSTER_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")  # RFC 1035, at most 40
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")  # RFC 1123 label
GCE_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")  # RFC 1035, at most 63
GROUP_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,18}[a-z0-9])?$")  # the node pool gpu-<gpu>-<group> stays within 40
RESERVATION_PATH = re.compile(
    r"^projects/[a-z][a-z0-9-]{4,28}[a-z0-9]/reservations/[a-z]([-a-z0-9]{0,61}[a-z0-9])?(/reservationBlocks/[-a-z0-9]+)?$"
)
IMAGE_PATH = re.compile(r"^projects/[a-z][a-z0-9-]{4,28}[a-z0-9]/global/images/[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
IMAGE_TAG = re.compile(r"^v[0-9]+\.[0-9]+\.[0-9]+$")
VALUES_FILE = re.compile(r"^[A-Za-z0-9._/-]{1,200}\.ya?ml$")

DEFAULTS = InfraOptions(gpu=DEFAULT_ACCELERATOR, project="", region="", zone="")


D = DEFAULTS


def _groups(text: str) -> tuple[GroupSpec, ...]:
    try:
        return parse_groups(text)
    except ValueError as e:
        raise _Invalid(str(e)) from None


# In --help order, which is also the order of the script's header command.
INFRA_OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("--gpu", "accelerator profile of the GPU nodes", required=True, choices=lambda: tuple(PROFILES)),
    OptionSpec("--project", "Google Cloud project id", required=True),
    OptionSpec("--region", "region of the cluster and subnets, e.g. us-central1", required=True),
    OptionSpec("--zone", "zone of the GPU nodes and the Lustre instance, e.g. us-central1-b", required=True),
    OptionSpec("--mode", f"GKE mode; default {D.mode}", choices=lambda: MODES),
    OptionSpec("--nodes", f"GPU nodes (8 GPUs each), 1-{MAX_NODES}; default {D.nodes}", type=int, unset_default=True),
    OptionSpec(
        "--provisioning",
        f"how GPU nodes are obtained; default the machine's ({D.provisioning}; reservation where Google offers nothing else)",
        choices=lambda: PROVISIONING,
        unset_default=True,
    ),
    OptionSpec("--reservation", "reservation name or path (with --provisioning reservation)", unset_default=True),
    OptionSpec(
        "--groups",
        "one GPU node pool per worker group instead of --nodes/--provisioning, as the values generator takes them: "
        "NAME=REPLICAS[:PROVISIONING[:RESERVATION]],... e.g. reserved=4:reservation:res-a,spot=4:spot",
        unset_default=True,
        convert=_groups,
        show=lambda groups: ",".join(map(str, groups)),
    ),
    OptionSpec("--cluster", f"GKE cluster name; default {D.cluster}"),
    OptionSpec("--network", f"the cluster's VPC (eth0) and Managed Lustre's, created when missing; default {D.network}"),
    OptionSpec("--network-prefix", "prefix of the VPC and subnet names (same as for the values file)"),
    OptionSpec(
        "--network-mode",
        f"how the GPU nodes' RDMA NICs are attached: rdma (multi-networking, the gVNIC and RoCE VPCs) or dranet"
        f" (GKE managed DRANET, Standard only); default {D.network_mode}",
        choices=lambda: NETWORK_MODES,
    ),
    OptionSpec("--lustre-capacity-gib", f"Managed Lustre capacity; default {D.lustre_capacity_gib}", type=int),
    OptionSpec(
        "--lustre-throughput", f"Managed Lustre MB/s per TiB; default {D.lustre_throughput}", type=int, choices=lambda: LUSTRE_THROUGHPUTS
    ),
    OptionSpec("--namespace", f"Kubernetes namespace of the release (labelled for its Pod Security level); default {D.namespace}"),
    OptionSpec("--kueue", "install Kueue and the queue the chart's RayCluster waits in", switch=True),
    OptionSpec("--kueue-queue", f"the LocalQueue (kueue.queueName); default {D.kueue_queue}"),
    OptionSpec(
        "--topology",
        f"Kueue topology-aware placement of the GPU workers over GKE's topology labels (with --kueue); default {D.topology}",
        choices=lambda: TOPOLOGY_MODES,
    ),
    OptionSpec("--preload-image-disk", "disk image preloaded as a secondary boot disk (Standard)", metavar="DISK_IMAGE"),
    OptionSpec(
        "--rdma-installer-commit", "commit of GoogleCloudPlatform/container-engine-accelerators to apply the NCCL RDMA installer from"
    ),
    OptionSpec("--gib-version", f"gIB image tag of the NCCL RDMA installer; default {D.gib_version}, the pinned manifest's"),
    OptionSpec("--values-out", f"the values overlay the script writes; default {D.values_out}"),
    OptionSpec("--output", "script file to write; default stdout", short="-o", field=None, type=Path),
    OptionSpec("--force", "overwrite an existing file that differs", field=None, switch=True),
    OptionSpec("--teardown", "write the script that deletes what the bring-up created, in reverse order", field=None, switch=True),
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
    if o.dranet:
        _check(
            o.mode == "standard",
            "--network-mode",
            "managed DRANET is for Standard clusters only: use --mode standard or --network-mode rdma",
        )
        _check(profile(o.gpu).dranet, "--network-mode", f"managed DRANET does not serve {o.gpu}: use --network-mode rdma")
    try:
        networks.check_prefix(o.network_prefix)
    except ValueError as e:
        raise _Invalid(f"--network-prefix: {e}") from None


def _check_reservation(option: str, reservation: str) -> None:
    _check(
        bool(GCE_NAME.fullmatch(reservation) or RESERVATION_PATH.fullmatch(reservation)),
        option,
        f"{reservation!r} is neither a reservation name nor projects/P/reservations/R[/reservationBlocks/B]",
    )


def _check_offered(o: InfraOptions) -> None:
    """Each GPU pool is obtained a way Google offers the machine (its profile row decides)."""
    p = profile(o.gpu)
    for g in o.worker_groups:
        _check(not (why := not_offered(p, g.provisioning)), "--groups" if o.groups else "--provisioning", why)


def _reservation_missing(o: InfraOptions, plain: str, group: str = "") -> str:
    """What a reservation pool without its reservation's name is told: the machine's source where
    Google offers it by reservation only (A4X), else `plain`."""
    p = profile(o.gpu)
    return reservation_missing(p, group=group) if machine_default(p) == "reservation" else plain


def _check_groups(o: InfraOptions) -> None:
    names = [g.name for g in o.groups]
    for g in o.groups:
        _check(bool(GROUP_NAME.fullmatch(g.name)), "--groups", f"{g.name!r} is not a lowercase name of at most 20 characters")
        if g.provisioning == "reservation":
            missing = _reservation_missing(o, "a reservation group needs NAME=N:reservation:RESERVATION", group=g.name)
            _check(bool(g.reservation), "--groups", f"group {g.name}: {missing}")
            _check_reservation("--groups", g.reservation)
        else:
            _check(not g.reservation, "--groups", f"group {g.name}: a reservation only with provisioning reservation")
    _check(len(set(names)) == len(names), "--groups", "group names must be unique")
    total = worker_nodes(g.replicas for g in o.groups)
    _check(total <= MAX_NODES, "--groups", f"{total} GPU nodes in all; at most {MAX_NODES}")


def _check_nodes(o: InfraOptions) -> None:
    if o.groups:
        _check_groups(o)
    else:
        _check(1 <= o.nodes <= MAX_NODES, "--nodes", f"must be between 1 and {MAX_NODES}, got {o.nodes}")
        if o.provisioning == "reservation":
            _check(bool(o.reservation), "--reservation", _reservation_missing(o, "required with --provisioning reservation"))
            _check_reservation("--reservation", o.reservation)
        else:
            _check(not o.reservation, "--reservation", f"only with --provisioning reservation (got --provisioning {o.provisioning})")
    _check(
        bool(CLUSTER_NAME.fullmatch(o.cluster)),
        "--cluster",
        f"{o.cluster!r} is not a lowercase RFC 1035 name of at most 40 characters",
    )
    _check(bool(GCE_NAME.fullmatch(o.network)), "--network", f"{o.network!r} is not a VPC name (lowercase RFC 1035, at most 63 characters)")


def _check_storage_and_names(o: InfraOptions) -> None:
    tier = LUSTRE_TIERS[o.lustre_throughput]
    _check(
        tier.allows(o.lustre_capacity_gib),
        "--lustre-capacity-gib",
        f"{o.lustre_capacity_gib} is no size of a --lustre-throughput {o.lustre_throughput} instance"
        f" (nearest: {sizes_text(o.lustre_capacity_gib, (tier,))})",
    )
    _check(bool(DNS_LABEL.fullmatch(o.namespace)), "--namespace", f"{o.namespace!r} is not a lowercase RFC 1123 label")
    _check(bool(DNS_LABEL.fullmatch(o.kueue_queue)), "--kueue-queue", f"{o.kueue_queue!r} is not a lowercase RFC 1123 label")
    _check(o.topology == "none" or o.kueue, "--topology", "topology-aware placement is Kueue's: add --kueue")
    _check(
        bool(COMMIT.fullmatch(o.rdma_installer_commit)), "--rdma-installer-commit", f"{o.rdma_installer_commit!r} is not a 40-digit commit"
    )
    _check(bool(IMAGE_TAG.fullmatch(o.gib_version)), "--gib-version", f"{o.gib_version!r} is not a version tag such as v1.1.1")
    _check(
        bool(VALUES_FILE.fullmatch(o.values_out)) and ".." not in o.values_out.split("/"),
        "--values-out",
        f"{o.values_out!r} is not a relative or absolute .yaml path of letters, digits, '.', '_', '-' and '/'",
    )
    disk = o.preload_image_disk
    if disk:
        _check(o.mode == "standard", "--preload-image-disk", "only with --mode standard (Autopilot has no node pools to attach it to)")
        _check(
            bool(GCE_NAME.fullmatch(disk) or IMAGE_PATH.fullmatch(disk)),
            "--preload-image-disk",
            f"{disk!r} is neither an image name nor projects/P/global/images/NAME",
        )


def options_from_args(args: argparse.Namespace) -> InfraOptions:
    """Validated options; raises _Invalid naming the first bad option."""
    given = [
        s.flag for s in INFRA_OPTIONS if s.flag in ("--nodes", "--provisioning", "--reservation") and getattr(args, s.dest) is not None
    ]
    if args.groups and given:
        raise _Invalid(f"--groups: it sets each group's nodes, provisioning and reservation: drop {', '.join(given)}")
    opts = options_of(args, INFRA_OPTIONS, DEFAULTS)
    if opts.gpu in PROFILES:  # what was not given is obtained the machine's default way
        default = machine_default(PROFILES[opts.gpu])
        if opts.groups:
            opts = dataclasses.replace(opts, groups=tuple(g.for_machine(default) for g in opts.groups))
        elif args.provisioning is None:
            opts = dataclasses.replace(opts, provisioning=default)
    for check in (_check_location, _check_offered, _check_nodes, _check_storage_and_names):
        check(opts)
    return opts


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
