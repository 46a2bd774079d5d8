"""What the rendered chart asks KubeRay for: one Ray node per head and worker replica, with the
Ray resources KubeRay derives from each pod, and the launcher's spec (ConfigMap key launch.json).

KubeRay's rule (generateRayStartCommand): `num-cpus` as kuberay.py derives it; `num-gpus` from
rayStartParams, else the first limit whose name ends in "gpu"; `memory` from rayStartParams, else
the memory limit (both rounded up, as KubeRay's Quantity.Value()).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from generator.core.errors import InputError
from generator.gke.kuberay import RayResourceError, is_zero, param_value, quantity_value, ray_cpus


@dataclass(frozen=True)
class NodeSpec:
    """One Ray node of the rendered RayCluster (one pod)."""

    name: str  # "head" or "<group>-<replica>"
    group: str  # "head" or the worker group name
    cpus: int | None  # None: KubeRay passes no num-cpus and Ray counts the machine's CPUs
    gpus: int
    memory_bytes: int | None
    resources: dict[str, float] = field(default_factory=dict)  # rayStartParams `resources`
    cpu_key: str = ""  # the values key that sets this node's Ray CPUs

    @property
    def is_head(self) -> bool:
        return self.group == "head"

    def shape(self) -> tuple[Any, ...]:
        return (self.group, self.cpus, self.gpus, self.memory_bytes, tuple(sorted(self.resources.items())))


@dataclass(frozen=True)
class Rendered:
    cluster_name: str
    ray_version: str
    image_tag: str  # the NeMo RL release in the head's image, e.g. v0.7.0
    nodes: list[NodeSpec]
    launch_spec: dict[str, Any]

    @property
    def workers(self) -> list[NodeSpec]:
        return [n for n in self.nodes if not n.is_head]


def _ceil_quantity(value: object, what: str) -> int:
    try:
        return quantity_value(value)
    except ValueError as e:
        raise InputError(f"{what}: {e}") from None


def _param(params: dict[str, Any], key: str, what: str) -> int | None:
    try:
        return param_value(params, key)
    except RayResourceError as e:
        raise InputError(f"{what} {e.field}: {e}") from None


def _cpus(res: dict[str, Any], params: dict[str, Any], what: str, values_prefix: str) -> tuple[int | None, str]:
    """The Ray CPUs (kuberay.py) and the values key that sets them."""
    try:
        got = ray_cpus(res, params)
    except RayResourceError as e:
        raise InputError(f"{what} {e.field}: {e}") from None
    if got.source == "rayStartParams":
        return got.cpus, f"{values_prefix}.rayStartParams.num-cpus"
    return got.cpus, f"{values_prefix}.resources.{got.source or 'limits'}.cpu"


def _custom(params: dict[str, Any], what: str) -> dict[str, float]:
    if "resources" not in params:
        return {}
    try:
        return {str(k): float(v) for k, v in json.loads(str(params["resources"])).items()}
    except (ValueError, AttributeError):
        raise InputError(f"{what} rayStartParams.resources: not a JSON object of numbers") from None


def node_resources(
    container: dict[str, Any], params: dict[str, Any], *, what: str, values_prefix: str
) -> tuple[int | None, int, int | None, dict[str, float], str]:
    """(cpus, gpus, memory bytes, custom resources, values key of the CPUs) as KubeRay derives them."""
    res = container.get("resources") or {}
    limits = res.get("limits") or {}
    cpus, cpu_key = _cpus(res, params, what, values_prefix)
    gpus = _param(params, "num-gpus", what)
    if gpus is None:
        gpus = next((_ceil_quantity(v, f"{what} {k} limit") for k, v in limits.items() if str(k).endswith("gpu")), 0)
    memory = _param(params, "memory", what)
    if memory is None and not is_zero(limits.get("memory")):
        memory = _ceil_quantity(limits["memory"], f"{what} memory limit")
    return cpus, gpus, memory, _custom(params, what), cpu_key


def nodes_of(raycluster: dict[str, Any]) -> list[NodeSpec]:
    spec = raycluster["spec"]
    head = spec["headGroupSpec"]
    cpus, gpus, mem, custom, key = node_resources(
        head["template"]["spec"]["containers"][0], head.get("rayStartParams") or {}, what="head", values_prefix="head"
    )
    nodes = [NodeSpec("head", "head", cpus, gpus, mem, custom, key)]
    for group in spec.get("workerGroupSpecs") or []:
        name = group["groupName"]
        cpus, gpus, mem, custom, key = node_resources(
            group["template"]["spec"]["containers"][0],
            group.get("rayStartParams") or {},
            what=f"worker group {name}",
            values_prefix="worker",
        )
        nodes += [NodeSpec(f"{name}-{i}", name, cpus, gpus, mem, custom, key) for i in range(int(group.get("replicas") or 0))]
    return nodes


def parse_rendered(docs: list[dict[str, Any]]) -> Rendered:
    clusters = [d for d in docs if d.get("kind") == "RayCluster"]
    if len(clusters) != 1:
        raise InputError(f"the chart rendered {len(clusters)} RayCluster objects; rehearse needs exactly one")
    specs = [d for d in docs if d.get("kind") == "ConfigMap" and "launch.json" in (d.get("data") or {})]
    if not specs:
        raise InputError("the chart rendered no launcher spec (grpo.enabled is false?): there is no run to rehearse")
    rc = clusters[0]
    image = str(rc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0].get("image", ""))
    name = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return Rendered(
        cluster_name=rc["metadata"]["name"],
        ray_version=str(rc["spec"].get("rayVersion", "")),
        image_tag=name.split(":", 1)[1] if ":" in name else "",
        nodes=nodes_of(rc),
        launch_spec=json.loads(specs[0]["data"]["launch.json"]),
    )
