"""With kueue.enabled: Kueue is installed, the LocalQueue the RayCluster names exists and is active,
its ClusterQueue exists, and the ClusterQueue's nominal nvidia.com/gpu quota covers the release's
GPUs (Kueue admits a workload only within quota; a cohort may lend more).

Kueue's objects: LocalQueue (namespaced, spec.clusterQueue; status condition Active) and
ClusterQueue (cluster-scoped, spec.resourceGroups[].flavors[].resources[].nominalQuota, optional
spec.cohort; status condition Active), kueue.x-k8s.io, as https://kueue.sigs.k8s.io/docs/concepts/
describes them. Kueue marks a LocalQueue inactive whatever is wrong with its ClusterQueue
(ClusterQueueDoesNotExist, ClusterQueueIsInactive: "Can't submit new workloads to clusterQueue"),
so the ClusterQueue is read first and its own state named: it says what to fix.

With DRA claims (generator/gke/kueue_dra.py): a Kueue that counts them (>= 0.18, or a version not
read) admits the workload only within the ClusterQueue's quota of each mapped resource too.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from generator.cluster.checks import kueue_version
from generator.cluster.checks.context import Context
from generator.cluster.kube import Forbidden
from generator.cluster.report import Result, failed, passed, warned
from generator.gke import kueue_dra, kueue_versions
from generator.gke.profiles import profile
from generator.gke.sizing import parse_quantity

NAME = "kueue-queue"
GPU = "nvidia.com/gpu"


def nominal_quota(cq: dict[str, Any], resource: str = GPU) -> Fraction:
    """The ClusterQueue's nominal quota of `resource`, summed over its flavors."""
    total = Fraction(0)
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for r in flavor.get("resources") or []:
                if r.get("name") == resource:
                    total += parse_quantity(r.get("nominalQuota", 0))
    return total


def _dra_short(ctx: Context, cq: dict[str, Any]) -> str:
    """The first mapped DRA resource whose quota is below what the workers claim, as a message ('' if none)."""
    needed = kueue_version.dra_needed(ctx)
    if not needed:
        return ""
    try:
        found, _ = kueue_version.cluster_version(ctx)
    except Forbidden:  # not read: counted as a Kueue that counts claims (kueue-version reports the permission)
        found = ""
    if found and not kueue_dra.counts_claims(kueue_versions.parse(found)):
        return ""
    p = profile(str(ctx.value("accelerator.type")))
    workers = sum(int(g.get("replicas", 0)) for g in ctx.value("workerGroups", []) or [])
    for m in needed:
        have, want = nominal_quota(cq, m.resource), workers * m.per_worker(p)
        if have < want:
            return f"{have} nominal {m.resource} (DeviceClass {m.device_class}), the workers claim {want}"
    return ""


def _inactive(queue: dict[str, Any]) -> str:
    """'reason: message' of a queue whose Active condition is False; '' otherwise."""
    for c in (queue.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Active" and c.get("status") == "False":
            return ": ".join(x for x in (c.get("reason"), c.get("message")) if x) or "inactive"
    return ""


def _cluster_queue(ctx: Context, version: str, lq: dict[str, Any]) -> Result:
    queue = f"{ctx.namespace}/{ctx.value('kueue.queueName')}"
    name = str((lq.get("spec") or {}).get("clusterQueue", ""))
    cq = ctx.kube.get(f"/apis/kueue.x-k8s.io/{version}/clusterqueues/{name}")
    if cq is None:
        return failed(
            NAME,
            f"ClusterQueue {name} (LocalQueue {queue}'s) not found: the RayCluster would wait for admission forever",
            "create it (python -m generator infra --kueue configures one), or point the LocalQueue at one that exists",
        )
    if why := _inactive(cq):
        return failed(NAME, f"ClusterQueue {name} (LocalQueue {queue}'s) is not active: {why}", f"kubectl describe clusterqueue {name}")
    if why := _inactive(lq):
        describe = f"kubectl -n {ctx.namespace} describe localqueue {lq['metadata']['name']}"
        return failed(NAME, f"LocalQueue {queue} is not active: {why}", describe)
    quota, need = nominal_quota(cq), ctx.rendered.gpus
    if quota < need:
        msg = f"ClusterQueue {name} has {quota} nominal {GPU}, the release needs {need}"
        if (cq.get("spec") or {}).get("cohort"):
            return warned(NAME, f"{msg}; it may borrow from cohort {cq['spec']['cohort']}")
        return failed(NAME, f"{msg}: Kueue never admits the RayCluster", f"raise the ClusterQueue's {GPU} nominalQuota or use fewer nodes")
    if short := _dra_short(ctx, cq):
        return failed(
            NAME,
            f"ClusterQueue {name} has {short}: Kueue never admits the RayCluster",
            "give the resource nominalQuota in the GPU flavors (python -m generator infra --kueue configures it)",
        )
    return passed(
        NAME, f"LocalQueue {ctx.namespace}/{ctx.value('kueue.queueName')} feeds ClusterQueue {name} ({quota} {GPU}, {need} needed)"
    )


def check(ctx: Context) -> Result:
    if not ctx.value("kueue.enabled", False):
        return passed(NAME, "not needed: kueue.enabled is false")
    version = ctx.served_version("localqueues.kueue.x-k8s.io")
    if version is None:
        return failed(
            NAME,
            "kueue.enabled is true but Kueue is not installed (no CustomResourceDefinition localqueues.kueue.x-k8s.io)",
            "install Kueue, or set kueue.enabled false",
        )
    queue = ctx.value("kueue.queueName", "")
    lq = ctx.kube.get(f"/apis/kueue.x-k8s.io/{version}/namespaces/{ctx.namespace}/localqueues/{queue}")
    if lq is None:
        return failed(
            NAME,
            f"LocalQueue {ctx.namespace}/{queue} not found: the RayCluster would wait for admission forever",
            f"create a LocalQueue {queue} in {ctx.namespace} pointing at a ClusterQueue, or set kueue.queueName to an existing one",
        )
    return _cluster_queue(ctx, version, lq)
