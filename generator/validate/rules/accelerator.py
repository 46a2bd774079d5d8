"""Every accelerator field belongs to the chosen accelerator's profile."""

from __future__ import annotations

from collections.abc import Iterator

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
        "minGkeVersion": p.min_gke_version,
        "gpusPerNode": p.gpus_per_node,
    }
    for key, want in expected.items():
        if acc[key] != want:
            yield error(
                f"accelerator.{key}",
                f"{acc[key]!r} does not belong to accelerator type {p.key} ({p.display_name})",
                FIX.format(gpu=p.key, want=want),
            )
