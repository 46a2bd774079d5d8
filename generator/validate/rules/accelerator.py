"""Every accelerator field belongs to the chosen accelerator's profile; what the machine needs
(DRA, a GKE mode, a network mode) is there."""

from __future__ import annotations

from collections.abc import Iterator

from generator.gke import versions
from generator.gke.provisioning import not_offered
from generator.validate.findings import Finding, error
from generator.validate.rules.context import Context

FIX = "regenerate with python -m generator --gpu {gpu}, or set it to {want!r}"


def check(ctx: Context) -> Iterator[Finding]:
    acc = ctx.values["accelerator"]
    p = ctx.profile
    expected = {
        "machineType": p.machine_type,
        "nodeLabel": p.node_label,
        "ncclTunerConfigPath": p.nccl_tuner_config_path,
        "minGkeVersion": versions.machine_floor(p, ctx.values["network"]["mode"]),
        "gpusPerNode": p.gpus_per_node,
        "cpuArch": p.cpu_arch,
        "computeDomain": p.compute_domain,
    }
    defaults = {"cpuArch": "amd64", "computeDomain": False}  # absent: the schema's defaults
    for key, want in expected.items():
        if acc.get(key, defaults.get(key)) != want:
            yield error(
                f"accelerator.{key}",
                f"{acc.get(key, defaults.get(key))!r} does not belong to accelerator type {p.key} ({p.display_name})",
                FIX.format(gpu=p.key, want=want),
            )

    for i, g in enumerate(ctx.values["workerGroups"]):
        if why := not_offered(p, g["provisioning"]):
            yield error(
                f"workerGroups[{i}].provisioning",
                why,
                f"use {' or '.join(p.provisioning)} (with reservationName for a reservation)",
            )

    yield from _dra(ctx)


# "About dynamic resource allocation in GKE": DRA is not supported on Autopilot clusters; managed
# DRANET: Standard clusters only ("Set up GKE managed DRANET", requirements).
DRA_DOCS = "https://docs.cloud.google.com/kubernetes-engine/docs/concepts/about-dynamic-resource-allocation"


def _dra(ctx: Context) -> Iterator[Finding]:
    v = ctx.values
    p = ctx.profile
    autopilot = v["gke"]["mode"] == "autopilot"
    if autopilot and v["accelerator"].get("computeDomain"):
        yield error(
            "gke.mode",
            f"{p.display_name} ({p.machine_type}) needs a ComputeDomain of NVIDIA's DRA driver for cross-node NVLink, "
            f"and GKE's DRA does not run on Autopilot ({DRA_DOCS})",
            "use gke.mode: standard (python -m generator infra --mode standard makes the cluster)",
        )
    if v["network"]["mode"] == "dranet":
        if autopilot:
            yield error(
                "network.mode",
                "managed DRANET runs on GKE Standard only (its node pools need --accelerator-network-profile=auto)",
                "use network.mode: rdma on Autopilot, or gke.mode: standard",
            )
        if not p.dranet:
            yield error("network.mode", f"GKE managed DRANET does not serve {p.machine_type}", "use network.mode: rdma")
        floor = versions.DRANET.version
        have = v["accelerator"]["minGkeVersion"]
        if versions.key(have) < versions.key(floor):
            yield error(
                "accelerator.minGkeVersion",
                f"{have} is below managed DRANET's floor {floor} ({versions.DRANET.source})",
                f"set it to {floor} or later (python -m generator --network dranet writes it)",
            )
