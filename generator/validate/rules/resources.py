"""Pod sizes: requests fit the node's allocatable, limits cover requests and /dev/shm, Ray CPUs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from generator.gke import kuberay
from generator.gke.sizing import DAEMONSET_MARGIN_CPU, DAEMONSET_MARGIN_MEMORY_GIB, gib, parse_quantity, usable
from generator.nemo_rl.placement import VENV_RESERVATION_CPUS
from generator.validate.findings import Finding, error, warning
from generator.validate.rules.context import Context

# A head bigger than this will not fit the ordinary CPU pools (n2/e2 up to 32 vCPUs) most users have.
HEAD_CPU_WARN = 30


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


def ray_cpus(res: dict[str, Any], params: dict[str, str]) -> int | None:
    """What KubeRay gives Ray (kuberay.py); None when Ray counts the machine or a number is unreadable
    (the schema and the other rules report those)."""
    try:
        return kuberay.ray_cpus(res, params).cpus
    except kuberay.RayResourceError:
        return None


def _ray_cpu_key(prefix: str, part: dict[str, Any]) -> str:
    return f"{prefix}.rayStartParams.num-cpus" if "num-cpus" in part.get("rayStartParams", {}) else f"{prefix}.resources.limits.cpu"


def _head_ray_cpus(ctx: Context) -> Iterator[Finding]:
    rel, head = ctx.release, ctx.values["head"]
    if rel is None or not rel.head_needs_cpu:
        return
    head_ray = ray_cpus(head["resources"], head.get("rayStartParams", {}))
    if head_ray is not None and head_ray < 1:
        yield error(
            _ray_cpu_key("head", head),
            f"the head has {head_ray:g} Ray CPUs; NeMo RL {rel.tag} reserves 1 CPU on every node and hangs forever without it",
            "give the head at least 1 Ray CPU",
        )
        return
    lim = _q(head["resources"], "limits", "cpu")
    if head_ray is not None and "num-cpus" not in head.get("rayStartParams", {}) and lim is not None and 0 < lim < 1:
        yield error(
            "head.resources.limits.cpu",
            f"the head's container gets {head['resources']['limits']['cpu']} of a CPU: KubeRay rounds it up to "
            f"{head_ray} Ray CPU, and NeMo RL {rel.tag} reserves that CPU on every node, so its work runs throttled",
            "give the head at least 1 CPU",
        )


def _worker_ray_cpus(ctx: Context) -> Iterator[Finding]:
    """Every GPU node needs its placement groups' CPUs and one more for NeMo RL's per-node
    virtualenv reservation (placement.VENV_RESERVATION_CPUS), with colocated and dedicated
    generation alike. Fewer, and nemo_rl/distributed/virtual_cluster.py
    RayVirtualCluster._create_placement_groups_internal raises 'Not enough CPUs available'
    (v0.5.0 to v0.7.0), or the reservation waits forever."""
    worker = ctx.values["worker"]
    worker_ray = ray_cpus(worker["resources"], worker.get("rayStartParams", {}))
    placed = ctx.placement
    if worker_ray is None or placed is None or placed.issues:
        return
    need = placed.worker_ray_cpus()
    if worker_ray < need:
        held = max(placed.node_cpus())
        yield error(
            _ray_cpu_key("worker", worker),
            f"each worker has {worker_ray:g} Ray CPUs; NeMo RL's placement groups hold {held} on a node "
            f"({'colocated' if placed.colocated else 'dedicated'} generation) and it then reserves {VENV_RESERVATION_CPUS} more "
            "on every node for its virtualenvs (STRICT_SPREAD {CPU: 1}), which waits forever without it",
            f"give workers at least {need} Ray CPUs",
        )


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

    yield from _head_ray_cpus(ctx)
    yield from _worker_ray_cpus(ctx)
