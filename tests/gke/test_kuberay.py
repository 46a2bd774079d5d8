"""The Ray CPUs KubeRay gives a pod: one rule for validate and rehearse (generator/kuberay.py)."""

from __future__ import annotations

from typing import Any

import pytest

from generator.gke.kuberay import RayCpus, RayResourceError, ray_cpus
from generator.rehearse.topology import node_resources
from generator.validate.rules.resources import ray_cpus as validate_ray_cpus


@pytest.mark.parametrize(
    ("resources", "params", "expected"),
    [
        ({"limits": {"cpu": "500m"}}, {}, RayCpus(1, "limits")),  # Quantity.Value() rounds up
        ({"limits": {"cpu": "15500m"}, "requests": {"cpu": "2"}}, {}, RayCpus(16, "limits")),
        ({"limits": {"cpu": "0"}, "requests": {"cpu": "2500m"}}, {}, RayCpus(3, "requests")),  # a zero limit falls back
        ({"requests": {"cpu": 4}}, {}, RayCpus(4, "requests")),
        ({}, {}, RayCpus(None, "")),  # no --num-cpus: Ray counts the machine
        ({"limits": {"cpu": "8"}}, {"num-cpus": "0"}, RayCpus(0, "rayStartParams")),
    ],
)
def test_kuberay_num_cpus(resources: dict[str, Any], params: dict[str, Any], expected: RayCpus) -> None:
    assert ray_cpus(resources, params) == expected
    # validate and rehearse read the same number
    assert validate_ray_cpus(resources, params) == expected.cpus
    assert node_resources({"resources": resources}, params, what="w", values_prefix="worker")[0] == expected.cpus


def test_unreadable_entries_name_their_field() -> None:
    with pytest.raises(RayResourceError) as e:
        ray_cpus({}, {"num-cpus": "many"})
    assert e.value.field == "rayStartParams.num-cpus"
    with pytest.raises(RayResourceError) as e:
        ray_cpus({"limits": {"cpu": "lots"}}, {})
    assert e.value.field == "CPU limit"
    assert validate_ray_cpus({"limits": {"cpu": "lots"}}, {}) is None
