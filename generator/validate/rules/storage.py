"""Shared storage: run folders and HF_HOME on the RWX mount, one run's folder per run name; the
Lustre instance's location and size; placeholders."""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from typing import Any

from generator.gke.locations import REGION
from generator.gke.lustre import ALL_TIERS, LUSTRE_SMALLEST_GIB, LUSTRE_THROUGHPUTS, LUSTRE_TIERS, nearest_sizes
from generator.gke.sizing import parse_quantity
from generator.nemo_rl.run_spec import RUN_OUTPUTS, RUNS_DIR, run_folder
from generator.validate.findings import Finding, error, warning
from generator.validate.rules.context import Context, override_key

# What goes wrong when a run's output lies in another run's folder.
SHARED_OUTPUT = {
    "checkpointing.checkpoint_dir": "this run would resume from that run's checkpoints and write its own among them",
    "logger.log_dir": "its logs would be mixed with that run's",
}


def under(path: str, mount: str) -> bool:
    norm = posixpath.normpath(path)
    return norm == mount or norm.startswith(mount.rstrip("/") + "/")


def run_of(path: str, mount: str) -> str | None:
    """The run whose folder holds `path`, when it lies in the generator's layout <mount>/nemo-rl/<run>/."""
    runs = posixpath.join(mount, RUNS_DIR) + "/"
    norm = posixpath.normpath(path)
    if not norm.startswith(runs):
        return None
    return norm[len(runs) :].split("/", 1)[0]


def _outputs(ctx: Context, mount: str) -> Iterator[Finding]:
    for key in RUN_OUTPUTS:
        value = ctx.get(key)
        if value is None:
            yield error(
                override_key(key),
                "not set: NeMo RL would write it relative to its working directory, inside the pod",
                f"set {key}={run_folder(mount, ctx.grpo['runName'])}/{RUN_OUTPUTS[key]}",
            )
        elif not str(value).startswith("/") or not under(str(value), mount):
            yield error(
                override_key(key),
                f"{value} is not under the shared mount {mount}; head and workers would not see the same files",
                f"put it under {mount}/",
            )


def _run_folders(ctx: Context, mount: str) -> Iterator[Finding]:
    """Checkpoints and logs in this run's folder: a changed grpo.runName (or an output folder edited
    alone) would make two runs share one folder, and a run resumes from the newest step_N there."""
    name = ctx.grpo["runName"]
    runs: dict[str, str] = {}
    for key in RUN_OUTPUTS:
        value = ctx.setting(key)
        run = run_of(value, mount) if isinstance(value, str) else None
        if run is not None:
            runs[key] = run
    own = run_folder(mount, name)
    others = set(runs.values())
    if len(runs) == len(RUN_OUTPUTS) and len(others) == 1 and name not in others:
        other = others.pop()
        yield error(
            "grpo.runName",
            f"{name!r}, but {' and '.join(RUN_OUTPUTS)} are still in run {other}'s folder {run_folder(mount, other)}/:"
            f" {SHARED_OUTPUT['checkpointing.checkpoint_dir']}",
            "set "
            + " and ".join(f"{key}={own}/{sub}" for key, sub in RUN_OUTPUTS.items())
            + f" (python -m generator --run-name {name} writes both), or set grpo.runName back to {other}",
        )
        return
    for key, run in runs.items():
        if run != name:
            yield error(
                ctx.where(key),
                f"{ctx.setting(key)} is in run {run}'s folder, not in this run's {own}/ (grpo.runName {name}): {SHARED_OUTPUT[key]}",
                f"set {key}={own}/{RUN_OUTPUTS[key]}",
            )


def _lustre_size(capacity: Any) -> Iterator[Finding]:
    size = parse_quantity(capacity) / 2**30
    if size < LUSTRE_SMALLEST_GIB:
        yield error(
            "storage.lustre.capacity",
            f"{capacity} is below Managed Lustre's minimum of {LUSTRE_SMALLEST_GIB}Gi",
            f"use at least {LUSTRE_SMALLEST_GIB}Gi",
        )
        return
    whole = int(size)
    if size == whole and any(t.allows(whole) for t in ALL_TIERS):
        return
    finest = LUSTRE_TIERS[max(LUSTRE_THROUGHPUTS)]
    sizes = " or ".join(f"{n}Gi" for n in nearest_sizes(whole) if n is not None)
    yield error(
        "storage.lustre.capacity",
        f"{capacity} ({float(size):g} GiB) is no size a Managed Lustre instance can have in any performance tier"
        f" (the finest, {finest.name}, steps by {finest.step_gib} GiB; the others by more)",
        f"give the instance's own capacity as the infra script prints it, e.g. {sizes}",
    )


def _lustre(lustre: dict[str, Any]) -> Iterator[Finding]:
    yield from _lustre_size(lustre["capacity"])
    handle = lustre["volumeHandle"]
    location = handle.split("/")[1]
    if REGION.fullmatch(location):
        yield error(
            "storage.lustre.volumeHandle",
            f"its location {location} is a region; Managed Lustre instances are zonal and the CSI driver reads the"
            " handle as PROJECT/ZONE/INSTANCE, so it names no instance",
            f"write the zone the instance was created in ({location}-a, {location}-b, ...; the infra script prints the whole handle)",
        )
    if "PROJECT_ID" in handle or "ZONE" in handle:
        yield warning(
            "storage.lustre.volumeHandle",
            f"{handle} is the placeholder",
            "set PROJECT/ZONE/INSTANCE of your Lustre instance (the infra script prints it)",
        )
    if lustre["ip"].startswith("192.0.2."):
        yield warning(
            "storage.lustre.ip",
            f"{lustre['ip']} is a documentation address",
            "set the instance's mount point IP (the infra script prints it)",
        )


def check(ctx: Context) -> Iterator[Finding]:
    st = ctx.values["storage"]
    mount = posixpath.normpath(st["mountPath"])
    if not under(st["hfHome"], mount) or posixpath.normpath(st["hfHome"]) == mount:
        yield error(
            "storage.hfHome",
            f"{st['hfHome']} is not under the shared mount {mount}: every pod would download the model itself",
            f"use e.g. {mount}/huggingface",
        )
    yield from _outputs(ctx, mount)
    if ctx.grpo.get("enabled", True):
        yield from _run_folders(ctx, mount)
    jsonl = ctx.values.get("prepare", {}).get("gsm8kJsonlDir") or ""
    if jsonl and not under(jsonl, mount):
        yield error("prepare.gsm8kJsonlDir", f"{jsonl} is not under the shared mount {mount}", f"put it under {mount}/")
    if not st["existingClaim"]:
        yield from _lustre(st["lustre"])
