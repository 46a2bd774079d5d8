"""GKE mode rules: what Autopilot refuses or ignores."""

from __future__ import annotations

from collections.abc import Iterator

from generator.validate.findings import Finding, error, warning
from generator.validate.rules.context import Context

NODE_POOL = "cloud.google.com/gke-nodepool"
ACCEL_COUNT = "cloud.google.com/gke-accelerator-count"


def check(ctx: Context) -> Iterator[Finding]:
    v = ctx.values
    gke = v["gke"]
    if gke["mode"] != "autopilot":
        for key in ("headComputeClass", "gpuComputeClass"):
            if gke.get(key):
                yield warning(f"gke.{key}", "only used in Autopilot mode; ignored on Standard", "clear it or set gke.mode: autopilot")
        return
    if (v["worker"].get("securityContext") or {}).get("privileged"):
        yield error("worker.securityContext.privileged", "Autopilot rejects privileged pods", "remove it; RDMA works unprivileged")
    if (v["worker"].get("securityContext") or {}).get("capabilities", {}).get("add"):
        yield error("worker.securityContext.capabilities.add", "Autopilot allows only a few added capabilities", "remove them")
    if NODE_POOL in (v["head"].get("nodeSelector") or {}):
        yield error(f"head.nodeSelector.{NODE_POOL}", "Autopilot has no node pools to select", "use gke.headComputeClass instead")
    for i, g in enumerate(v["workerGroups"]):
        sel = g.get("nodeSelector") or {}
        if NODE_POOL in sel:
            yield error(
                f"workerGroups[{i}].nodeSelector.{NODE_POOL}",
                "Autopilot has no node pools to select",
                "remove it; the accelerator labels pick the nodes",
            )
        if ACCEL_COUNT in sel:
            yield error(
                f"workerGroups[{i}].nodeSelector.{ACCEL_COUNT}",
                f'set by the chart from accelerator.gpusPerNode ("{ctx.gpus_per_node}"); a second value conflicts',
                "remove it",
            )
    if ctx.rdma and v["network"]["gvnic"]["name"] != "gvnic-1":
        yield warning("network.gvnic.name", "Google's Autopilot RDMA setup expects eth1 on the Network gvnic-1", "name it gvnic-1")
