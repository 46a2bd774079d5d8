"""Release the release's GPU workers when its run has ended, and bring them back for a new run.

The launcher patches its own RayCluster through the Kubernetes API (a Role grants it `get` and
`patch` on that one RayCluster, nothing else). KubeRay deletes the pods, and the cluster
autoscaler removes their nodes once nothing asks for them. What follows was observed on the
real API server with KubeRay v1.3.2 and v1.6.2 and Kueue v0.19.2 (tests/cluster/).

- Without Kueue: `spec.suspend: true`. KubeRay (no feature gate) deletes every pod of the
  cluster, head included, and reports `status.state: suspended`. The chart never renders
  `spec.suspend`, so `helm upgrade` leaves it as the launcher set it: Helm 3 patches a custom
  resource with the difference between its old and new manifests, and Helm 4's server-side
  apply only sends the fields the chart renders (also with `--force-conflicts`).
- With Kueue: Kueue unsuspends an admitted RayCluster (the same Workload keeps its quota and
  KubeRay recreates the pods), so the launcher sets every worker group's `replicas` and
  `minReplicas` to 0. KubeRay deletes the worker pods (with in-tree autoscaling off it removes
  the pods above `replicas`, and `minReplicas` raises `replicas` below it); Kueue finds the pod
  sets no longer match its Workload, suspends the cluster (KubeRay deletes the head pod too) and
  deletes that Workload (its GPU quota is released); once KubeRay no longer reports the cluster
  ready, Kueue creates a Workload without GPU workers, admits it and unsuspends the cluster: the
  CPU head starts again.

A new run brings the workers back (`resume`): `spec.suspend: false`; under Kueue the groups'
replicas again together with `spec.suspend: true`, so the cluster waits suspended in its queue
until Kueue admits a Workload with the workers and unsuspends it. (The replicas alone: KubeRay
creates the worker pods at once, Kueue then suspends the cluster for its new Workload and they
are deleted before KubeRay has seen them; KubeRay's scale expectations then hold the group, and
on re-admission only the head comes back, the workers about 5 minutes later, at KubeRay's next
periodic reconcile. Seen with KubeRay v1.6.2.)

Under Kueue, Helm 4's server-side apply conflicts with Kueue on `.spec.workerGroupSpecs`: that
list is atomic in KubeRay's CRD and Kueue's admission rewrites it (its pod-set label in each
template), so Kueue owns all of it from the first admission. `helm upgrade --server-side=false`
patches only what changed between the manifests, as Helm 3 does, and leaves the release as it is;
`--force-conflicts` applies the chart's replicas, and Kueue queues the GPU workers again.

`spec.suspend` alone is a merge patch; a patch of the worker groups is a JSON patch that first
tests what it changes (the group's name at its index), so it never edits a group that differs
from the one read.
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
    # Suspended in the same patch: KubeRay creates no worker before Kueue has admitted them.
    api.patch(workers.path, [*ops, {"op": "add", "path": "/spec/suspend", "value": True}], JSON_PATCH)
    wanted = ", ".join(f"{g}: {n}" for g, n in sorted(workers.groups.items()))
    return (
        f"restored the GPU worker groups of {workers.describe()} ({wanted}), released when an earlier run ended; "
        "it waits suspended until Kueue admits them"
    )


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
