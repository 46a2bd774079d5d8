"""The Ray CPUs KubeRay gives a Ray pod: the one rule, used by `validate` (validate/rules/resources.py)
and `rehearse` (rehearse/topology.py).

KubeRay's operator writes the pod's `ray start` command in generateRayStartCommand
(ray-operator/controllers/ray/common/pod.go, the same at v1.3.2 and v1.7.0):

    if _, ok := rayStartParams["num-cpus"]; !ok {
        cpu := resource.Limits[corev1.ResourceCPU]
        if !cpu.IsZero() {
            rayStartParams["num-cpus"] = strconv.FormatInt(cpu.Value(), 10)
        } else { // Fall back to CPU request if limit is not specified
            cpu := resource.Requests[corev1.ResourceCPU]
            if !cpu.IsZero() { rayStartParams["num-cpus"] = strconv.FormatInt(cpu.Value(), 10) }
        }
    }

`Quantity.Value()` (k8s.io/apimachinery) rounds up to a whole number, so a 500m limit gives
`--num-cpus=1`; a zero or missing limit falls back to the request; with neither, no
`--num-cpus` is passed and Ray counts the machine's CPUs. A `num-cpus` in rayStartParams is
passed as written (Ray reads it as a whole number).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from generator.gke.sizing import parse_quantity


class RayResourceError(ValueError):
    """A quantity or rayStartParams entry KubeRay (or Ray) cannot read; `field` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def quantity_value(value: object) -> int:
    """KubeRay's `Quantity.Value()`: the quantity rounded up to a whole number."""
    return math.ceil(parse_quantity(value))


def is_zero(value: object) -> bool:
    """KubeRay's `Quantity.IsZero()` of an entry that may be missing (an unreadable one is not zero)."""
    try:
        return value is None or parse_quantity(value) == 0
    except ValueError:
        return False


@dataclass(frozen=True)
class RayCpus:
    cpus: int | None  # None: no --num-cpus, Ray counts the machine's CPUs
    source: str  # "rayStartParams", "limits", "requests" or "" (none)


def param_value(params: dict[str, Any], key: str) -> int | None:
    """A whole-number rayStartParams entry (`num-cpus`, `num-gpus`, `memory`), or None if absent."""
    if key not in params:
        return None
    try:
        return int(float(str(params[key])))
    except ValueError:
        raise RayResourceError(f"rayStartParams.{key}", f"not a number: {params[key]!r}") from None


def ray_cpus(resources: dict[str, Any], params: dict[str, Any]) -> RayCpus:
    """The Ray CPUs of a pod whose Ray container has `resources` and whose group has `params`."""
    cpus = param_value(params, "num-cpus")
    if cpus is not None:
        return RayCpus(cpus, "rayStartParams")
    for kind, label in (("limits", "CPU limit"), ("requests", "CPU request")):
        value = (resources.get(kind) or {}).get("cpu")
        if not is_zero(value):
            try:
                return RayCpus(quantity_value(value), kind)
            except ValueError as e:
                raise RayResourceError(label, str(e)) from None
    return RayCpus(None, "")
