"""What Kueue's topology-aware scheduling (TAS) never admits, on the RayCluster the chart renders.

With `kueue.enabled`, Kueue makes one pod set of the head and one of each worker group, of
`replicas` x `numOfHosts` pods (kueue v0.19.2 pkg/controller/jobs/raycluster/common.go
BuildPodSets, effectiveWorkerCount), and reads each pod template's topology annotations
(apis/kueue/v1beta2/topology_types.go): `kueue.x-k8s.io/podset-required-topology` puts every pod
of the set within one domain of that node label, or admits none; `-preferred-` tries the level,
then wider ones. The chart sets one from `kueue.topology.mode`/`level`; a user can set any through
`workerGroups[i].annotations` or `head.annotations`.

Rules, each from Kueue's source at v0.19.2:
- pkg/cache/scheduler/tas_flavor_snapshot.go findLevelWithFitDomains: with `required`, when no
  domain of the level holds the pod set's pods, the reason is "not fit" and no wider level is
  tried: the workload is never admitted and the RayCluster waits in the queue forever. A domain of
  the host level holds one node (generator/gke/topology.py); a node holds as many worker pods as
  its GPUs hold their GPU requests.
- The same for `podset-slice-required-topology`: one slice (`podset-slice-size` pods) must fit
  one domain.
- pkg/controller/jobframework/tas_validation.go ValidateTASPodSetRequest (called by the
  RayCluster webhook): a pod template with more than one of the required, preferred, unconstrained
  and slice-required annotations is refused ("must not contain more than one topology annotation").
- pkg/scheduler/flavorassigner/tas_flavorassigner.go: a flavor whose Topology lacks the requested
  level is skipped ("does not contain the requested level"); the infra script's Topology has the
  levels of generator/gke/topology.LEVELS, so another level never admits there (a warning: the
  cluster's own Topology may differ).
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import Any

from generator.gke.profiles import profile
from generator.gke.topology import LEVELS, nodes_per_domain
from generator.validate.api_rules import mapping
from generator.validate.findings import Finding, error, warning
from generator.validate.scheduling import GPU, pod_requests

PREFIX = "kueue.x-k8s.io/podset-"
REQUIRED = f"{PREFIX}required-topology"
PREFERRED = f"{PREFIX}preferred-topology"
UNCONSTRAINED = f"{PREFIX}unconstrained-topology"
SLICE_REQUIRED = f"{PREFIX}slice-required-topology"
SLICE_SIZE = f"{PREFIX}slice-size"
EXCLUSIVE = (REQUIRED, PREFERRED, UNCONSTRAINED, SLICE_REQUIRED)
SOURCE = "kueue v0.19.2"


def _gpus(spec: dict[str, Any]) -> Fraction:
    """The GPUs one pod of the set requests (kube-scheduler's PodRequests); 0 when a quantity does not parse."""
    try:
        return pod_requests(spec).get(GPU, Fraction(0))
    except (ValueError, TypeError):
        return Fraction(0)


def _key(values: dict[str, Any], own: str, annotation: str) -> str:
    """The values key an annotation of the pod set comes from: the chart's kueue.topology, or the
    group's (head's) own annotations."""
    topo = mapping(values, "kueue", "topology")
    mode = str(topo.get("mode") or "none")
    if mode != "none" and annotation == f"{PREFIX}{mode}-topology":
        return "kueue.topology.level"
    return f"{own}.annotations.{annotation}"


def _pod_sets(rc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any], int]]:
    """(where, values prefix, pod template, pod count) of the head and each worker group."""
    spec = mapping(rc, "spec")
    yield "the head", "head", mapping(spec, "headGroupSpec", "template"), 1
    for i, g in enumerate(spec.get("workerGroupSpecs") or []):
        count = int(g.get("replicas", 1) or 0) * max(int(g.get("numOfHosts", 1) or 1), 1)
        yield f"worker group {g.get('groupName', i)}", f"workerGroups[{i}]", mapping(g, "template"), count


def _capacity(level: str, machine_type: str, gpus_per_node: int, template: dict[str, Any]) -> tuple[int, int] | None:
    """(nodes, pods) one domain of `level` holds; None when not known."""
    nodes = nodes_per_domain(level, machine_type)
    wanted = _gpus(mapping(template, "spec"))
    if nodes is None or wanted <= 0:
        return None
    per_node = int(Fraction(gpus_per_node) / wanted)
    return nodes, nodes * per_node


def _check_set(values: dict[str, Any], where: str, own: str, template: dict[str, Any], count: int) -> Iterator[Finding]:
    ann = {str(k): str(v) for k, v in mapping(template, "metadata", "annotations").items()}
    given = [a for a in EXCLUSIVE if a in ann]
    if len(given) > 1:
        yield error(
            _key(values, own, given[-1]),
            f"{where}'s pods carry {' and '.join(given)}: Kueue's RayCluster webhook refuses a pod set with more than one "
            f"topology annotation ({SOURCE} pkg/controller/jobframework/tas_validation.go ValidateTASPodSetRequest)",
            f"keep one: remove {own}.annotations.{given[-1]} or set kueue.topology.mode: none",
        )
        return
    p = profile(str(values["accelerator"]["type"]))
    for annotation in (REQUIRED, PREFERRED, SLICE_REQUIRED):
        level = ann.get(annotation)
        if level is None:
            continue
        key = _key(values, own, annotation)
        if level not in LEVELS:
            yield warning(
                key,
                f"{annotation}: {level} is not a level of the Topology the infra script makes ({', '.join(LEVELS)}): Kueue skips "
                f'every flavor whose Topology lacks it ("does not contain the requested level", {SOURCE} '
                "pkg/scheduler/flavorassigner/tas_flavorassigner.go), so the pods are never admitted there",
                "use one of those levels, or make sure your cluster's Topology has this one",
            )
            continue
        if annotation == PREFERRED:
            continue
        size, what = count, f"{count} pod(s)"
        if annotation == SLICE_REQUIRED:
            try:
                size = int(ann.get(SLICE_SIZE, ""))
            except ValueError:
                continue
            what = f"slices of {size} pod(s) ({SLICE_SIZE})"
        cap = _capacity(level, p.machine_type, p.gpus_per_node, template)
        if cap is None or size <= cap[1]:
            continue
        nodes, pods = cap
        yield error(
            key,
            f"{where} has {what} and {annotation}: {level}, but one domain of that level holds {nodes} {p.machine_type} "
            f"node(s), {pods} such pod(s): Kueue admits a required pod set only inside one domain and tries no wider level "
            f"({SOURCE} pkg/cache/scheduler/tas_flavor_snapshot.go findLevelWithFitDomains), so the RayCluster waits in the "
            "queue forever",
            f"use a wider level ({LEVELS[0]}), kueue.topology.mode: preferred, or at most {pods} pod(s) per group",
        )


def check(objs: list[dict[str, Any]], values: dict[str, Any]) -> list[Finding]:
    """Kueue TAS findings on every pod set of the rendered RayCluster (with kueue.enabled only:
    without the queue label Kueue does not manage it and ignores the annotations)."""
    if not mapping(values, "kueue").get("enabled") or "accelerator" not in values:
        return []
    try:
        profile(str(values["accelerator"]["type"]))
    except (KeyError, ValueError):
        return []
    out: list[Finding] = []
    for rc in objs:
        if rc.get("kind") != "RayCluster":
            continue
        for where, own, template, count in _pod_sets(rc):
            out.extend(_check_set(values, where, own, template, count))
    return out
