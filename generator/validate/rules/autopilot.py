"""GKE mode rules: what Autopilot refuses or ignores."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from generator.gke.sizing import parse_quantity
from generator.validate.findings import Finding, error, warning
from generator.validate.rules.context import Context

EPHEMERAL = "ephemeral-storage"
# "Resource requests in Autopilot": a container that requests no ephemeral storage gets 1 GiB.
# https://docs.cloud.google.com/kubernetes-engine/docs/concepts/autopilot-resource-requests
AUTOPILOT_DEFAULT_EPHEMERAL = "1 GiB"

NODE_POOL = "cloud.google.com/gke-nodepool"
# Capabilities a pod may add under the Pod Security Standards' baseline level (kubernetes
# staging/src/k8s.io/pod-security-admission/policy/check_capabilities_baseline.go, the runtime's
# default set); Autopilot refuses privileged pods and NET_RAW ("Run privileged open source workloads
# on GKE Autopilot": "you can't, by default, run a Pod that enables privileged mode or adds the
# NET_RAW Linux capability") and runs every pod without CAP_SYS_ADMIN ("About seccomp in GKE").
BASELINE_CAPABILITIES = frozenset(
    {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP"}
    | {"SETUID", "SYS_CHROOT"}
)
REFUSED_CAPABILITIES = frozenset({"NET_RAW", "SYS_ADMIN", "ALL"})
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
    yield from _head_security(v["head"].get("securityContext") or {})
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
    yield from _ephemeral_storage(ctx)
    if ctx.rdma and v["network"]["gvnic"]["name"] != "gvnic-1":
        yield warning("network.gvnic.name", "Google's Autopilot RDMA setup expects eth1 on the Network gvnic-1", "name it gvnic-1")


def _head_security(security: dict[str, Any]) -> Iterator[Finding]:
    """The head is a pod Autopilot judges too: privileged and capabilities beyond the baseline set."""
    if security.get("privileged"):
        yield error("head.securityContext.privileged", "Autopilot rejects privileged pods, the Ray head's too", "remove it")
    added = [str(c).upper().removeprefix("CAP_") for c in (security.get("capabilities") or {}).get("add") or []]
    refused = [c for c in added if c in REFUSED_CAPABILITIES]
    other = [c for c in added if c not in BASELINE_CAPABILITIES and c not in REFUSED_CAPABILITIES]
    if refused:
        yield error(
            "head.securityContext.capabilities.add",
            f"Autopilot refuses a pod that adds {', '.join(refused)} (GKE docs: privileged workloads need an allowlist; "
            "every pod runs without CAP_SYS_ADMIN), so the Ray head is never created",
            "remove them; the head needs no added capability",
        )
    elif other:
        yield warning(
            "head.securityContext.capabilities.add",
            f"{', '.join(other)} is outside the Pod Security baseline set Autopilot starts from "
            "(pod-security-admission check_capabilities_baseline.go): Autopilot refuses most such capabilities",
            "remove them unless Autopilot's documentation allows them",
        )


def _ephemeral_storage(ctx: Context) -> Iterator[Finding]:
    """Every Ray container asks for its disk (Ray's logs, spilled objects, compile caches); a GPU
    worker's fits the machine's local SSD, which backs the node's ephemeral storage."""
    v = ctx.values
    sizes = {"head": "9Gi", "worker": "1000Gi"}  # Google's Autopilot RayCluster for B200/H200
    for part in ("head", "worker"):
        requested = (v[part]["resources"].get("requests") or {}).get(EPHEMERAL)
        if requested is None:
            yield error(
                f"{part}.resources.requests.{EPHEMERAL}",
                f"not set: Autopilot gives the Ray container {AUTOPILOT_DEFAULT_EPHEMERAL}, "
                "which Ray's logs, spilled objects and caches outgrow",
                f"request one, e.g. {sizes[part]} (python -m generator --mode autopilot writes it)",
            )
    requested = (v["worker"]["resources"].get("requests") or {}).get(EPHEMERAL)
    ssd_bytes = ctx.profile.local_ssd_gb * 10**9
    if requested is not None and float(parse_quantity(requested)) > ssd_bytes:
        yield error(
            f"worker.resources.requests.{EPHEMERAL}",
            f"{requested} is more than the {ctx.profile.local_ssd_gb} GB of local SSD of an {ctx.profile.machine_type} node",
            f"request at most {ssd_bytes // 2**30}Gi; the generator writes {sizes['worker']}",
        )
