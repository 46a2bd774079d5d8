"""Shared storage: run folders and HF_HOME on the RWX mount; Lustre size; placeholders."""

from __future__ import annotations

import posixpath
from collections.abc import Iterator

from generator.gke.lustre import LUSTRE_SMALLEST_GIB
from generator.gke.sizing import gib
from generator.validate.findings import Finding, error, warning
from generator.validate.rules.context import Context, override_key


def under(path: str, mount: str) -> bool:
    norm = posixpath.normpath(path)
    return norm == mount or norm.startswith(mount.rstrip("/") + "/")


def check(ctx: Context) -> Iterator[Finding]:
    st = ctx.values["storage"]
    mount = posixpath.normpath(st["mountPath"])
    if not under(st["hfHome"], mount) or posixpath.normpath(st["hfHome"]) == mount:
        yield error(
            "storage.hfHome",
            f"{st['hfHome']} is not under the shared mount {mount}: every pod would download the model itself",
            f"use e.g. {mount}/huggingface",
        )
    for key in ("checkpointing.checkpoint_dir", "logger.log_dir"):
        value = ctx.get(key)
        if value is None:
            yield error(
                override_key(key),
                "not set: NeMo RL would write it relative to its working directory, inside the pod",
                f"set {key}={mount}/nemo-rl/<run>/...",
            )
        elif not str(value).startswith("/") or not under(str(value), mount):
            yield error(
                override_key(key),
                f"{value} is not under the shared mount {mount}; head and workers would not see the same files",
                f"put it under {mount}/",
            )
    jsonl = ctx.values.get("prepare", {}).get("gsm8kJsonlDir") or ""
    if jsonl and not under(jsonl, mount):
        yield error("prepare.gsm8kJsonlDir", f"{jsonl} is not under the shared mount {mount}", f"put it under {mount}/")
    if not st["existingClaim"]:
        lustre = st["lustre"]
        if gib(lustre["capacity"]) < LUSTRE_SMALLEST_GIB:
            yield error(
                "storage.lustre.capacity",
                f"{lustre['capacity']} is below Managed Lustre's minimum of {LUSTRE_SMALLEST_GIB}Gi",
                f"use at least {LUSTRE_SMALLEST_GIB}Gi",
            )
        if "PROJECT_ID" in lustre["volumeHandle"] or "ZONE" in lustre["volumeHandle"]:
            yield warning(
                "storage.lustre.volumeHandle",
                f"{lustre['volumeHandle']} is the placeholder",
                "set PROJECT/ZONE/INSTANCE of your Lustre instance (the infra script prints it)",
            )
        if lustre["ip"].startswith("192.0.2."):
            yield warning(
                "storage.lustre.ip",
                f"{lustre['ip']} is a documentation address",
                "set the instance's mount point IP (the infra script prints it)",
            )
