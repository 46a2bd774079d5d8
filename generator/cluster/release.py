"""What doctor checks the cluster against: the chart rendered for the values, the release name
and the namespace, by the pinned Helm 4 (as `validate` and `render` render it)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from generator.core.errors import InputError
from generator.gke.sizing import parse_quantity
from generator.validate.objects import Pod, pod_templates
from generator.values.layers import Configuration


@dataclass(frozen=True)
class Rendered:
    release: str
    namespace: str
    source: str  # how reports name the values (never a --set value)
    values: dict[str, Any]
    objects: list[dict[str, Any]]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o.get("kind") == kind]

    @property
    def raycluster(self) -> dict[str, Any] | None:
        return next(iter(self.of_kind("RayCluster")), None)

    @property
    def fullname(self) -> str:
        rc = self.raycluster
        return rc["metadata"]["name"] if rc else self.release

    def pods(self) -> Iterator[Pod]:
        """Every pod template the chart renders (head, worker groups, Jobs, the test Pod)."""
        return pod_templates(self.objects)

    def workers(self) -> list[tuple[str, int, Pod]]:
        """(group name, replicas, pod template) of each GPU worker group."""
        groups = ((self.raycluster or {}).get("spec") or {}).get("workerGroupSpecs") or []
        out = []
        for pod in self.pods():
            if pod.ray == "worker" and pod.group is not None and pod.group < len(groups):
                g = groups[pod.group]
                out.append((str(g.get("groupName", pod.group)), int(g.get("replicas", 0)), pod))
        return out

    @property
    def gpus(self) -> int:
        return sum(replicas * int(requests(pod.spec).get("nvidia.com/gpu", 0)) for _, replicas, pod in self.workers())


def requests(spec: dict[str, Any], key: str = "requests") -> dict[str, Fraction]:
    """A pod's requests (or limits) as the scheduler adds them: the sum over its containers (init
    containers run before them and are not counted here)."""
    total: dict[str, Fraction] = {}
    for c in spec.get("containers") or []:
        for name, value in ((c.get("resources") or {}).get(key) or {}).items():
            total[name] = total.get(name, Fraction(0)) + parse_quantity(value)
    return total


def render(config: Configuration, release: str, namespace: str) -> Rendered:
    """The chart's objects for these values, release and namespace; an InputError (one line) when
    Helm cannot render them."""
    from generator.helm.runner import HelmError, pinned_or_input_error
    from generator.render.manifests import parse_documents

    if not isinstance(config.values, dict):
        raise InputError(f"{config.name}: not a values mapping")
    helm = pinned_or_input_error()
    with tempfile.TemporaryDirectory(prefix="nemo-rl-gke-doctor-") as tmp:
        path = Path(tmp) / "values.json"
        path.write_text(json.dumps(config.values), encoding="utf-8")
        try:
            text = helm.template([path], release=release, namespace=namespace)
        except HelmError as e:
            first = next((line for line in str(e).splitlines() if line.strip()), "failed")
            raise InputError(
                f"{config.name}: helm {helm.version} could not render the chart: {first}; `python -m generator validate` says why"
            ) from None
    return Rendered(release, namespace, config.name, config.values, parse_documents(text))
