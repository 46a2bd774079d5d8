"""Pod sizes: requests fit the node's allocatable, limits cover requests and /dev/shm, Ray CPUs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..findings import Finding, error, warning
from ..resources import DAEMONSET_MARGIN_CPU, DAEMONSET_MARGIN_MEMORY_GIB, gib, parse_quantity, usable
from .context import Context

# A head bigger than this will not fit the ordinary CPU pools (n2/e2 up to 32 vCPUs) most users have.
HEAD_CPU_WARN = 30
# NeMo RL's colocated vLLM placement asks each GPU bundle for 2 CPUs.
CPUS_PER_GPU_COLOCATED = 2


def _q(resources: dict[str, Any], kind: str, name: str) -> float | None:
    value = (resources.get(kind) or {}).get(name)
    return None if value is None else float(parse_quantity(value))


def _limits_cover_requests(prefix: str, res: dict[str, Any], shm: str) -> Iterator[Finding]:
    for name in ("cpu", "memory"):
        req, lim = _q(res, "requests", name), _q(res, "limits", name)
        if req is not None and lim is not None and lim < req:
            yield error(
                f"{prefix}.resources.limits.{name}",
                f"limit {res['limits'][name]} is below the request {res['requests'][name]}",
                "raise the limit to at least the request",
            )
    req_mem = _q(res, "requests", "memory")
    lim_mem = _q(res, "limits", "memory")
    if req_mem is not None and lim_mem is not None and lim_mem < req_mem + float(parse_quantity(shm)):
        need = gib(res["requests"]["memory"]) + gib(shm)
        yield error(
            f"{prefix}.resources.limits.memory",
            f"limit {res['limits']['memory']} does not cover the request {res['requests']['memory']} "
            f"plus /dev/shm {shm} (memory-backed, counted in the pod)",
            f"set it to at least {need:g}Gi",
        )
    if req_mem is None:
        yield error(f"{prefix}.resources.requests.memory", "no memory request", "set one so the scheduler reserves memory")


def ray_cpus(res: dict[str, Any], params: dict[str, str]) -> float | None:
    """What KubeRay gives Ray: rayStartParams num-cpus, else the CPU limit, else the request."""
    if "num-cpus" in params:
        try:
            return float(params["num-cpus"])
        except ValueError:
            return None
    lim = _q(res, "limits", "cpu")
    return lim if lim is not None else _q(res, "requests", "cpu")


def check(ctx: Context) -> Iterator[Finding]:
    v = ctx.values
    worker, head = v["worker"], v["head"]
    room = usable(ctx.profile)
    yield from _limits_cover_requests("worker", worker["resources"], worker["shmSize"])
    yield from _limits_cover_requests("head", head["resources"], head["shmSize"])

    cpu = _q(worker["resources"], "requests", "cpu")
    if cpu is not None and cpu > room.cpu:
        yield error(
            "worker.resources.requests.cpu",
            f"{worker['resources']['requests']['cpu']} CPUs do not fit a {ctx.profile.machine_type} node "
            f"({room.cpu + DAEMONSET_MARGIN_CPU:.1f} allocatable, {DAEMONSET_MARGIN_CPU} kept for GKE's DaemonSets)",
            f"request at most {int(room.cpu)}",
        )
    mem = _q(worker["resources"], "requests", "memory")
    if mem is not None:
        total = mem / 2**30 + gib(worker["shmSize"])
        if total > room.memory_gib:
            yield error(
                "worker.resources.requests.memory",
                f"{worker['resources']['requests']['memory']} + /dev/shm {worker['shmSize']} = {total:.0f}Gi does not fit a "
                f"{ctx.profile.machine_type} node ({room.memory_gib + DAEMONSET_MARGIN_MEMORY_GIB:.0f}Gi allocatable, "
                f"{DAEMONSET_MARGIN_MEMORY_GIB}Gi kept for DaemonSets)",
                f"keep request + shmSize at or below {int(room.memory_gib)}Gi",
            )

    head_cpu = _q(head["resources"], "requests", "cpu")
    if head_cpu is not None and head_cpu > HEAD_CPU_WARN:
        yield warning(
            "head.resources.requests.cpu",
            f"{head['resources']['requests']['cpu']} CPUs will not fit most CPU node pools",
            "the head needs a few CPUs; 4-8 is plenty",
        )

    rel = ctx.release
    head_ray = ray_cpus(head["resources"], head.get("rayStartParams", {}))
    if rel is not None and rel.head_needs_cpu and head_ray is not None and head_ray < 1:
        key = "head.rayStartParams.num-cpus" if "num-cpus" in head.get("rayStartParams", {}) else "head.resources.limits.cpu"
        yield error(
            key,
            f"the head has {head_ray:g} Ray CPUs; NeMo RL {rel.tag} reserves 1 CPU on every node and hangs forever without it",
            "give the head at least 1 Ray CPU",
        )

    worker_ray = ray_cpus(worker["resources"], worker.get("rayStartParams", {}))
    if worker_ray is not None and ctx.get("policy.generation.colocated.enabled") is True:
        need = CPUS_PER_GPU_COLOCATED * ctx.gpus_per_node
        if worker_ray < need:
            key = "worker.rayStartParams.num-cpus" if "num-cpus" in worker.get("rayStartParams", {}) else "worker.resources.limits.cpu"
            yield error(
                key,
                f"each worker has {worker_ray:g} Ray CPUs; colocated generation places {ctx.gpus_per_node} "
                f"bundles of {{CPU: {CPUS_PER_GPU_COLOCATED}, GPU: 1}} per node",
                f"give workers at least {need} Ray CPUs",
            )
