"""What never schedules: every pod the chart renders (the Ray head and workers, the Jobs, the test
pod) against the node pools the infra script builds for these values on a Standard cluster: the
CPU pool `default-pool` and one GPU pool per worker group, with the labels and taints
generator/gke/provisioning.py gives GKE's nodes and the allocatable generator/gke/sizing.py
computes. When the values carry `gke.nodePools` (the infra script writes the pools it made into
values-infra.yaml, so `validate values.yaml -f values-infra.yaml` has them), those pools are the
model instead: a selector, toleration or request that fits the pools the values imply but not
the ones the cluster has is found. A pod no pool can hold stays Pending; the finding names the values key that excludes the
pool closest to fitting.

The predicates are those of kube-scheduler v1.34.9 (k8s.io/kubernetes pkg/scheduler/framework/
plugins, the version the test bed builds): nodeaffinity (every nodeSelector entry, and one of the
required nodeSelectorTerms, each term's matchExpressions all: In, NotIn, Exists, DoesNotExist, Gt,
Lt; k8s.io/component-helpers scheduling/corev1/nodeaffinity), tainttoleration (every NoSchedule and
NoExecute taint tolerated; k8s.io/api core/v1 toleration.go ToleratesTaint: an empty key with
Exists matches every taint, Exists matches any value, an empty effect every effect) and
noderesources fit (the pod's request, the larger of its containers' sum and each init container,
within the node's allocatable; k8s.io/component-helpers resource/helpers.go PodRequests).

A selector on a label key none of GKE's or Kubernetes' own, or on a node-pool name the script does
not make, is a warning, not an error: pools and labels a user adds themselves are not known here.
Autopilot has no node pools; there every pod's `cloud.google.com/compute-class` (node selector or
required affinity `In`) must name a class that exists: one GKE builds in, or a custom ComputeClass
(generator/gke/compute_classes.py). A name no ComputeClass object can have (upper case, not
built in) is an error; another unknown name a warning (the cluster may hold such a ComputeClass).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from generator.gke import compute_classes
from generator.gke.machines import CPU_POOL
from generator.gke.profiles import PROFILES, profile
from generator.gke.provisioning import (
    ANY_VALUE_LABELS,
    CPU_POOL_NAME,
    NODE_POOL_LABEL,
    RESERVATION_PROJECT_LABEL,
    TYPES,
    Taint,
    gpu_node_taints,
    gpu_pool_labels,
    gpu_pool_name,
    node_labels,
)
from generator.gke.sizing import allocatable_of, ephemeral_allocatable_gib, parse_quantity
from generator.validate.api_rules import Tracer, values_at
from generator.validate.findings import Finding, error, warning
from generator.validate.objects import Pod, pod_templates

GPU = "nvidia.com/gpu"
PODS_PER_NODE = 110  # GKE Standard's default maximum pods per node
KNOWN_PREFIXES = ("kubernetes.io/", "k8s.io/", "cloud.google.com/", "node.kubernetes.io/", "topology.kubernetes.io/", "nvidia.com/")
GIB = 2**30
RESERVATION_NAME = "cloud.google.com/reservation-name"


@dataclass(frozen=True)
class NodePool:
    name: str
    labels: dict[str, str | None]  # None: a value the cluster picks (any value matches)
    taints: tuple[Taint, ...]
    allocatable: dict[str, Fraction] | None  # None: a machine type not known here (requests not checked)
    pool_names: tuple[str, ...] = ()  # every name the infra script may give it
    described: bool = False  # from gke.nodePools: the cluster's own record of its pools
    extra: dict[str, str] = field(default_factory=dict)


def _allocatable(vcpus: int, memory_gib: float, gpus: int = 0) -> dict[str, Fraction]:
    a = allocatable_of(vcpus, memory_gib)
    out = {
        "cpu": Fraction(a.cpu).limit_denominator(1000),
        "memory": Fraction(a.memory_gib).limit_denominator(1 << 20) * GIB,
        "ephemeral-storage": Fraction(ephemeral_allocatable_gib()).limit_denominator(1 << 20) * GIB,
        "pods": Fraction(PODS_PER_NODE),
    }
    return out | ({GPU: Fraction(gpus)} if gpus else {})


def _machine(machine_type: str) -> tuple[dict[str, Fraction] | None, str]:
    """(allocatable, CPU architecture) of a node of this machine type; None: not known here."""
    if machine_type == CPU_POOL.machine_type:
        return _allocatable(CPU_POOL.vcpus, CPU_POOL.memory_gib), "amd64"
    p = next((p for p in PROFILES.values() if p.machine_type == machine_type), None)
    if p is None:
        return None, "amd64"
    return _allocatable(p.host_vcpus, p.host_memory_gib, p.gpus_per_node), p.cpu_arch


def described_pools(described: list[dict[str, Any]]) -> list[NodePool]:
    """The pools `gke.nodePools` describes (what the infra script wrote into values-infra.yaml)."""
    pools = []
    for d in described:
        name, machine_type = str(d["name"]), str(d["machineType"])
        alloc, arch = _machine(machine_type)
        labels: dict[str, str | None] = {**dict.fromkeys(ANY_VALUE_LABELS), **node_labels(machine_type, name, arch)}
        labels |= {str(k): str(v) for k, v in (d.get("labels") or {}).items()}
        taints = tuple(Taint(str(t["key"]), str(t.get("value") or ""), str(t["effect"])) for t in d.get("taints") or [])
        pools.append(NodePool(name, labels, taints, alloc, (name,), described=True))
    return pools


def node_pools(values: dict[str, Any]) -> list[NodePool]:
    """The pools of the cluster: those `gke.nodePools` describes, else the ones the infra script
    builds for `values` (Standard): the CPU pool, then one per group."""
    if described := (values.get("gke") or {}).get("nodePools"):
        return described_pools(described)
    p = profile(values["accelerator"]["type"])
    anywhere: dict[str, str | None] = dict.fromkeys(ANY_VALUE_LABELS)
    cpu_labels: dict[str, str | None] = {**anywhere, **node_labels(CPU_POOL.machine_type, CPU_POOL_NAME)}
    pools = [NodePool(CPU_POOL_NAME, cpu_labels, (), _allocatable(CPU_POOL.vcpus, CPU_POOL.memory_gib), (CPU_POOL_NAME,))]
    groups = values.get("workerGroups") or []
    for g in groups:
        provisioning = str(g.get("provisioning"))
        if provisioning not in TYPES:
            continue
        # One group: `infra` made it without --group (the default pool) or with it.
        named = gpu_pool_name(p.key, str(g.get("name")))
        names = (gpu_pool_name(p.key), named) if len(groups) == 1 else (named,)
        labels: dict[str, str | None] = {**anywhere, **node_labels(p.machine_type, names[0], p.cpu_arch)}
        labels |= gpu_pool_labels(
            p.node_label,
            provisioning,
            str(g.get("reservationName") or ""),
            str(g.get("reservationProject") or ""),
            dranet=(values.get("network") or {}).get("mode") == "dranet",  # pools made with --accelerator-network-profile=auto
        )
        alloc = _allocatable(p.host_vcpus, p.host_memory_gib, p.gpus_per_node)
        taints = gpu_node_taints(provisioning, p.cpu_arch)
        pools.append(NodePool(names[0], labels, tuple(taints), alloc, names))
    return pools


# --- the scheduler's predicates ----------------------------------------------------------------


def _label(pool: NodePool, key: str) -> tuple[bool, str | None]:
    """(the pool's nodes carry `key`, its value; None: any)."""
    return key in pool.labels, pool.labels.get(key)


def _value_matches(pool: NodePool, key: str, wanted: str) -> bool:
    has, value = _label(pool, key)
    if key == NODE_POOL_LABEL:
        return wanted in pool.pool_names
    return has and (value is None or value == wanted)


def _expression(pool: NodePool, expr: dict[str, Any]) -> bool:
    key, op, vals = str(expr.get("key", "")), expr.get("operator"), [str(v) for v in expr.get("values") or []]
    has, value = _label(pool, key)
    if op == "In":
        return any(_value_matches(pool, key, v) for v in vals)
    if op == "NotIn":
        return not has or value is None or not any(_value_matches(pool, key, v) for v in vals)
    if op == "Exists":
        return has
    if op == "DoesNotExist":
        return not has
    if op in ("Gt", "Lt") and has and vals:
        if value is None:
            return True
        try:
            a, b = int(value), int(vals[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def required_terms(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod's required node affinity terms (any one must match); [] when none."""
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    return (affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []


def tolerates(tolerations: list[dict[str, Any]], taint: Taint) -> bool:
    for t in tolerations:
        if not isinstance(t, dict):
            continue
        if t.get("effect") and t["effect"] != taint.effect:
            continue
        op = t.get("operator") or "Equal"
        if not t.get("key"):
            if op == "Exists":
                return True
            continue
        if t["key"] != taint.key:
            continue
        if op == "Exists" or (op == "Equal" and str(t.get("value") or "") == taint.value):
            return True
    return False


def pod_requests(spec: dict[str, Any]) -> dict[str, Fraction]:
    """PodRequests: the containers' sum, or an init container's request where that is larger."""
    total: dict[str, Fraction] = {}
    for c in spec.get("containers") or []:
        for name, q in ((c.get("resources") or {}).get("requests") or {}).items():
            total[name] = total.get(name, Fraction(0)) + Fraction(parse_quantity(q))
        for name, q in ((c.get("resources") or {}).get("limits") or {}).items():
            if name not in ((c.get("resources") or {}).get("requests") or {}):  # a limit alone is the request
                total[name] = total.get(name, Fraction(0)) + Fraction(parse_quantity(q))
    for c in spec.get("initContainers") or []:
        for name, q in ((c.get("resources") or {}).get("requests") or {}).items():
            total[name] = max(total.get(name, Fraction(0)), Fraction(parse_quantity(q)))
    total["pods"] = Fraction(1)
    return total


@dataclass(frozen=True)
class Miss:
    """Why one pool cannot hold the pod: the field, its values key, a reason."""

    field: str  # nodeSelector.<k>, affinity, taint, resources.<name>
    key: str
    reason: str
    custom: bool = False  # a selector on a label key of the user's own


def _misses(pod: Pod, pool: NodePool, t: Tracer) -> list[Miss]:
    spec = pod.spec
    out: list[Miss] = []
    for k, v in (spec.get("nodeSelector") or {}).items():
        if not _value_matches(pool, str(k), str(v)):
            key = (f"{pod.scheduling}.nodeSelector.{k}" if pod.scheduling else "") or t.map_entry(str(k), v) or "(chart)"
            if pod.scheduling and k not in ((_values_at(t.values, pod.scheduling) or {}).get("nodeSelector") or {}):
                key = t.map_entry(str(k), v) or _provisioning_key(pod, str(k), t) or key
            has, value = _label(pool, str(k))
            carried = f"carries {k}={value}" if has and value is not None else f"has no label {k}"
            # A pool of the user's own (another name) or a label they put on nodes is not known here.
            # gke.nodePools lists the cluster's pools: a name it lacks is not one of the user's own.
            custom = (not str(k).startswith(KNOWN_PREFIXES) and not has) or (k == NODE_POOL_LABEL and not pool.described)
            out.append(Miss(f"nodeSelector.{k}", key, f"nodeSelector {k}={v}: pool {pool.name} {carried}", custom))
    terms = required_terms(spec)
    if terms and not any(all(_expression(pool, e) for e in (term.get("matchExpressions") or [])) for term in terms):
        key = t.node(terms) or t.node(terms[0]) or "(chart)"
        out.append(Miss("affinity", key, f"no required node affinity term matches pool {pool.name}"))
    for taint in pool.taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not tolerates(spec.get("tolerations") or [], taint):
            key = f"{pod.scheduling}.tolerations" if pod.scheduling else "(chart)"
            out.append(
                Miss("taint", key, f"pool {pool.name} is tainted {taint.key}={taint.value}:{taint.effect} and the pod does not tolerate it")
            )
    try:
        req = pod_requests(spec)
    except (ValueError, TypeError):
        return out
    for name, q in req.items() if pool.allocatable is not None else ():
        have = pool.allocatable.get(name, Fraction(0))
        if q > have:
            key = _request_key(pod, name, t)
            out.append(
                Miss(f"resources.{name}", key, f"{name} request {float(q):g} exceeds pool {pool.name}'s allocatable {float(have):g}")
            )
    return out


def _provisioning_key(pod: Pod, label: str, t: Tracer) -> str | None:
    """workerGroups[i].provisioning when the chart selects `label` for the group's provisioning type."""
    group = _values_at(t.values, pod.scheduling) if pod.group is not None else None
    kind = TYPES.get(str((group or {}).get("provisioning")))
    if label == RESERVATION_PROJECT_LABEL and (group or {}).get("reservationProject"):
        return f"{pod.scheduling}.reservationProject"
    if kind is not None and any(k == label for k, _ in kind.labels):
        field = "reservationName" if label == RESERVATION_NAME else "provisioning"
        return f"{pod.scheduling}.{field}"
    return None


def _values_at(values: dict[str, Any], dotted: str) -> Any:
    return values_at(values, dotted)


def _request_key(pod: Pod, name: str, t: Tracer) -> str:
    for c in pod.spec.get("containers") or []:
        res = c.get("resources") or {}
        if name in (res.get("requests") or {}) and (owner := t.node(res)):
            return f"{owner}.requests.{name}"
    return f"{pod.resources}.resources.requests.{name}" if pod.resources else "(chart)"


def _unschedulable(pod: Pod, pools: list[NodePool], t: Tracer) -> Finding | None:
    misses = [(_misses(pod, p, t), p) for p in pools]
    if any(not m for m, _ in misses):
        return None
    # The pool closest to fitting names the key; its first reason leads.
    best, pool = min(misses, key=lambda mp: len(mp[0]))
    lead = next((m for m in best if m.field != "taint"), best[0])
    others = "; ".join(f"{p.name}: {m[0].reason}" for m, p in misses if p is not pool)
    described = pool.described
    where = "the pools gke.nodePools lists (values-infra.yaml)" if described else "the pools the infra script builds"
    text = f"{pod.where} never schedules on {where}: {lead.reason}" + (f" (and {others})" if others else "")
    if all(m.custom for m in best):
        return warning(
            lead.key, text + "; no pool carries this label unless you labelled the nodes yourself", "remove it, or label the pool's nodes"
        )
    fix = "select a label the pool's nodes carry, or fit the request to the node's allocatable"
    if described:
        fix += f" (pools: {', '.join(p.name for p in pools)}; a pool you made yourself: add it to gke.nodePools)"
    return error(lead.key, text, fix)


def _compute_class_key(pod: Pod, name: str, t: Tracer) -> str:
    gke = t.values.get("gke") or {}
    if pod.ray == "head" and gke.get("headComputeClass") == name:
        return "gke.headComputeClass"
    if pod.ray == "worker" and gke.get("gpuComputeClass") == name:
        return "gke.gpuComputeClass"
    return t.map_entry(compute_classes.LABEL, name) or t.text(name) or "(chart)"


def _selected_classes(spec: dict[str, Any]) -> list[str]:
    out = []
    if (v := (spec.get("nodeSelector") or {}).get(compute_classes.LABEL)) is not None:
        out.append(str(v))
    for term in required_terms(spec):
        for e in term.get("matchExpressions") or []:
            if e.get("key") == compute_classes.LABEL and e.get("operator") == "In":
                out += [str(x) for x in e.get("values") or []]
    return out


def compute_class_findings(objs: list[dict[str, Any]], values: dict[str, Any]) -> list[Finding]:
    """Autopilot: every compute class a pod selects exists (built in, or could be a custom ComputeClass)."""
    t = Tracer(values)
    out: list[Finding] = []
    seen: set[str] = set()
    source = "GKE docs: About built-in ComputeClasses in GKE; Compute classes in Autopilot"
    for pod in pod_templates(objs):
        for name in _selected_classes(pod.spec):
            key = _compute_class_key(pod, name, t)
            if compute_classes.built_in(name) or key in seen:
                continue
            seen.add(key)
            near = compute_classes.closest(name)
            fix = f"use {near}" if near else f"use a built-in class ({', '.join(compute_classes.BUILT_IN)})"
            if not compute_classes.could_be_custom(name):
                out.append(
                    error(
                        key,
                        f"{pod.where} selects compute class {name!r}: not one GKE builds in, and no custom ComputeClass can have "
                        f"that name (object names are lower case), so Autopilot never finds a node for it ({source})",
                        fix,
                    )
                )
            else:
                out.append(
                    warning(
                        key,
                        f"{pod.where} selects compute class {name!r}, which is not one GKE builds in ({source}): the pod stays "
                        "Pending unless the cluster holds a custom ComputeClass of that name (kubectl get computeclasses)",
                        fix + ", or create that ComputeClass",
                    )
                )
    return out


def check(objs: list[dict[str, Any]], values: dict[str, Any]) -> list[Finding]:
    """One finding per pod that no pool holds (Standard); compute classes that do not exist (Autopilot)."""
    if (values.get("gke") or {}).get("mode") == "autopilot":
        return compute_class_findings(objs, values)
    if "accelerator" not in values:
        return []
    try:
        pools = node_pools(values)
    except (KeyError, ValueError):
        return []
    t = Tracer(values)
    out: list[Finding] = []
    seen: set[str] = set()
    for pod in pod_templates(objs):
        f = _unschedulable(pod, pools, t)
        if f is not None and f.key not in seen:
            seen.add(f.key)
            out.append(f)
    return out
