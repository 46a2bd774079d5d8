"""Release the release's GPU workers when its run has ended, and bring them back for a new run.

The launcher patches its own RayCluster through the Kubernetes API (a Role grants it `get` and
`patch` on that one RayCluster, nothing else). KubeRay deletes the pods, and the cluster
autoscaler removes their nodes once nothing asks for them.

- Without Kueue: `spec.suspend: true`. KubeRay (v1.3.2 and v1.7.0, no feature gate) deletes every
  pod of the cluster, head included, and reports `status.state: suspended`. The chart never
  renders `spec.suspend`, so `helm upgrade` leaves it as the launcher set it: Helm 3 patches a
  custom resource with the difference between its old and new manifests, and Helm 4's
  server-side apply only sends the fields the chart renders.
- With Kueue: Kueue owns `spec.suspend` of an admitted RayCluster (it unsuspends one whose
  Workload is admitted), so the launcher sets every worker group's `replicas` and `minReplicas`
  to 0. KubeRay deletes the worker pods (with in-tree autoscaling off it removes the pods above
  `replicas`, and `minReplicas` raises `replicas` below it); Kueue finds the cluster's pod sets no
  longer match its Workload, deletes that Workload (its GPU quota is released) and admits a new
  one without workers (the CPU head restarts under it).

A new run brings the workers back (`resume`): `spec.suspend: false`, or the groups' replicas
again. Each patch is a JSON patch that first tests what it changes (the group's name at its
index), so it never edits a cluster that differs from the one read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from launcher_kube import JSON_PATCH, MERGE_PATCH, KubeApi, KubeError


@dataclass(frozen=True)
class Workers:
    """The spec's `gpu_release`: which RayCluster, its GPU worker groups, and who owns suspend."""

    raycluster: str
    namespace: str
    groups: dict[str, int]  # worker group -> replicas the values ask for
    kueue: bool
    service_account_dir: str

    @property
    def path(self) -> str:
        return f"/apis/ray.io/v1/namespaces/{self.namespace}/rayclusters/{self.raycluster}"

    def describe(self) -> str:
        return f"RayCluster {self.namespace}/{self.raycluster}"


def _group_ops(cluster: dict[str, Any], target: Callable[[str, int], int]) -> list[dict[str, Any]]:
    """JSON patch operations setting each known group's replicas and minReplicas to target()."""
    ops: list[dict[str, Any]] = []
    for i, group in enumerate(cluster.get("spec", {}).get("workerGroupSpecs") or []):
        name = group.get("groupName")
        if not isinstance(name, str):
            continue
        want = target(name, int(group.get("replicas") or 0))
        if group.get("replicas") == want and group.get("minReplicas") == want:
            continue
        at = f"/spec/workerGroupSpecs/{i}"
        ops += [
            {"op": "test", "path": f"{at}/groupName", "value": name},
            {"op": "add", "path": f"{at}/replicas", "value": want},
            {"op": "add", "path": f"{at}/minReplicas", "value": want},
        ]
    return ops


def release(workers: Workers, api: KubeApi) -> tuple[str, bool]:
    """Patch the RayCluster so that its GPU workers go: what was done, in a line, and whether
    anything was patched (an earlier launcher may have released them already)."""
    cluster = api.get(workers.path)
    if not workers.kueue:
        if cluster.get("spec", {}).get("suspend") is True:
            return f"{workers.describe()} is already suspended", False
        api.patch(workers.path, {"spec": {"suspend": True}}, MERGE_PATCH)
        return f"suspended {workers.describe()} (spec.suspend: true): KubeRay deletes its head and GPU worker pods", True
    ops = _group_ops(cluster, lambda _name, _now: 0)
    if not ops:
        return f"the GPU worker groups of {workers.describe()} are already at 0 replicas", False
    api.patch(workers.path, ops, JSON_PATCH)
    return f"scaled the GPU worker groups of {workers.describe()} to 0 replicas: Kueue releases their quota", True


def resume(workers: Workers, api: KubeApi) -> str:
    """Bring back what `release` removed, for a run that is to be submitted ("" when nothing was)."""
    cluster = api.get(workers.path)
    if cluster.get("spec", {}).get("suspend") is True and not workers.kueue:
        api.patch(workers.path, {"spec": {"suspend": False}}, MERGE_PATCH)
        return f"resumed {workers.describe()} (spec.suspend: false), suspended when an earlier run ended"
    if not workers.kueue:
        return ""
    ops = _group_ops(cluster, lambda name, now: max(now, workers.groups.get(name, now)))
    if not ops:
        return ""
    api.patch(workers.path, ops, JSON_PATCH)
    wanted = ", ".join(f"{g}: {n}" for g, n in sorted(workers.groups.items()))
    return f"restored the GPU worker groups of {workers.describe()} ({wanted}), released when an earlier run ended"


def released(cluster: dict[str, Any]) -> bool:
    """Whether KubeRay reports no GPU worker left: the cluster suspended, or none desired or available."""
    status = cluster.get("status") or {}
    if status.get("state") == "suspended":
        return True
    if any(c.get("type") == "RayClusterSuspended" and c.get("status") == "True" for c in status.get("conditions") or []):
        return True
    desired = cluster.get("spec", {}).get("workerGroupSpecs") or []
    running = status.get("availableWorkerReplicas") or status.get("readyWorkerReplicas")
    return all(g.get("replicas") == 0 for g in desired) and not running


def wait_released(workers: Workers, api: KubeApi, timeout_s: float, poll_s: float) -> float | None:
    """Seconds until KubeRay reported the workers gone (None: not within timeout_s)."""
    start = time.monotonic()
    while True:
        try:
            if released(api.get(workers.path)):
                return time.monotonic() - start
        except KubeError:
            pass  # the next look tells
        if time.monotonic() - start >= timeout_s:
            return None
        time.sleep(poll_s)
