"""`validate` against the real judges of the test bed, on generated mutations of the tutorial's values.

Judge A, the real kube-apiserver (v1.34.9 with the CRDs of KubeRay, Kueue and GKE networking): every
object a case renders is created as a server-side dry run. Judge B, the real kube-scheduler: every
pod the case renders is created (volumes and service account aside) on the simulated node pools
`python -m generator infra` builds for the tutorial (testbed/nodes.py), and is either bound or
reported Unschedulable. For each case `validate` must agree with the judge: an error exactly when
the judge refuses. The disagreements that are not bugs are listed in EXPLAINED with their reason;
any other one fails the test with the case.

The cases are drawn from fixed pools of valid and invalid keys, values, tolerations, peers and
quantities with a seeded generator, so a failure reproduces. One release per case is rendered in
process (validate's own rendering), requests are batched, and pods whose scheduling inputs
match an earlier case's are judged once.
"""

from __future__ import annotations

import copy
import json
import os
import random
import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest
from bed_helpers import namespace, unique
from kubernetes import client
from kubernetes.client.rest import ApiException

from generator.core.paths import ROOT
from generator.infra.options import InfraOptions
from generator.nemo_rl.recipe_config import grpo_override_args
from generator.validate.findings import ERROR, Finding
from generator.validate.objects import pod_templates
from generator.validate.rules.context import Context
from generator.validate.values import validate_rendered
from generator.values.layers import configurations
from generator.values.worker_groups import GroupSpec
from testbed import nodes as bed_nodes
from testbed.bed import add_nodes, default_infra
from testbed.kube import Kube, wait_for

BASE = ROOT / "examples" / "tutorial-h200.yaml"  # the test bed's pools are the infra script's for it
RELEASE = "nemo-rl"
# >= 500 judged per judge by default (about 1 in 8 of Judge A's cases stops in the chart's own
# checks and reaches no judge); DIFFERENTIAL_CASES=N for a quicker local run.
CASES_A = int(os.environ.get("DIFFERENTIAL_CASES", "600"))
CASES_B = int(os.environ.get("DIFFERENTIAL_CASES", "520"))
BATCH = 12  # pods judged at once; the extra pools have as many nodes each, so each pod sees an empty node
SEED = 25

# --- the pools the mutations draw from ------------------------------------------------------

LABEL_KEYS = [
    "team",
    "example.com/team",
    "app.kubernetes.io/part-of",
    "Team",
    "a.b-c_d",
    "Example.com/team",
    "example.com/team/x",
    "-team",
    "team-",
    "team name",
    "x" * 63,
    "x" * 64,
    "/team",
    "example.com/",
    "my_corp.com/team",
    "t" * 250 + ".com/team",
    "nvidia.com/gpu=present:NoSchedule",
]
LABEL_VALUES = ["ml", "ML-Team_1.a", "", "a b", "-ml", "ml-", "v" * 63, "v" * 64, "team/ml", "ml:1", "ünï", "1.0", "a..b"]
NAMES = ["rl", "my-run", "run.v1", "My-Run", "run_1", "-run", "run-", "a" * 40, "a" * 60, "run 1", "run.", "x1"]
TOLERATION_KEYS = [
    "nvidia.com/gpu",
    "dedicated",
    "example.com/pool",
    "nvidia.com/gpu=present:NoSchedule",
    "dedicated=ml",
    "Example.com/pool",
    "",
    "node.kubernetes.io/not-ready",
]
OPERATORS = ["Exists", "Equal", None]
EFFECTS = ["NoSchedule", "NoExecute", "PreferNoSchedule", None]
QUANTITIES_CPU = ["100m", "250m", "500m", "1", "2", "4"]
QUANTITIES_MEM = ["64Mi", "128Mi", "256Mi", "512Mi", "1Gi", "2Gi"]
SELECTOR_OPS = ["In", "NotIn", "Exists", "DoesNotExist", "Equals"]

# What the node pools carry (right) and what they do not (wrong), per pod kind.
CPU_SELECTORS = [
    ("cloud.google.com/gke-nodepool", "default-pool"),
    ("cloud.google.com/gke-nodepool", "system"),
    ("cloud.google.com/gke-nodepool", "gpu-h200"),
    ("node.kubernetes.io/instance-type", "e2-standard-16"),
    ("node.kubernetes.io/instance-type", "n2-standard-8"),
    ("kubernetes.io/arch", "amd64"),
    ("kubernetes.io/arch", "arm64"),
    ("kubernetes.io/os", "linux"),
    ("kubernetes.io/os", "windows"),
    ("cloud.google.com/gke-accelerator", "nvidia-h200-141gb"),
    ("cloud.google.com/gke-spot", "true"),
    ("cloud.google.com/machine-family", "e2"),
    ("cloud.google.com/gke-os-distribution", "ubuntu"),
    ("team", "ml"),
    ("topology.kubernetes.io/zone", "us-central1-b"),
]
GPU_SELECTORS = [
    ("cloud.google.com/gke-nodepool", "gpu-h200"),
    ("cloud.google.com/gke-nodepool", "default-pool"),
    ("cloud.google.com/gke-nodepool", "gpu-pool"),
    ("node.kubernetes.io/instance-type", "a3-ultragpu-8g"),
    ("node.kubernetes.io/instance-type", "a3-highgpu-8g"),
    ("cloud.google.com/gke-gpu-driver-version", "latest"),
    ("cloud.google.com/gke-gpu-driver-version", "default"),
    ("cloud.google.com/gke-gpu-driver-version", "535"),
    ("cloud.google.com/machine-family", "a3"),
    ("cloud.google.com/gke-flex-start", "true"),
    ("kubernetes.io/arch", "arm64"),
    ("example.com/rack", "r1"),
    ("topology.kubernetes.io/zone", "us-central1-b"),
]

# --- the explained disagreements ------------------------------------------------------------


@dataclass(frozen=True)
class Explained:
    judge: str
    why: str
    matches: Callable[[Case, bool, list[Finding]], bool]


def _selects(case: Case, key: str, value: str | None = None) -> bool:
    return any(key in str(p) and (value is None or v == value) for p, v in case.flat())


EXPLAINED = [
    Explained(
        "B",
        "room kept for GKE's own DaemonSets on a GPU node (rules/resources.py): the bed's simulated nodes run none, "
        "so the scheduler binds a worker validate keeps below the node's allocatable minus that room",
        lambda c, judged, fs: not judged and all("kept for" in f.message for f in fs if f.level == ERROR),
    ),
    Explained(
        "B",
        "a selector on a label key of the user's own: validate warns (nodes a user labelled are not known to it), "
        "the bed's nodes carry no such label",
        lambda c, judged, fs: judged and any(f.level != ERROR and "labelled the nodes yourself" in f.message for f in fs),
    ),
]


# --- cases ------------------------------------------------------------------------------------


@dataclass
class Case:
    n: int
    judge: str
    changes: dict[str, Any]  # dotted key -> value
    what: str = ""
    values: dict[str, Any] = field(default_factory=dict)

    def flat(self) -> Iterator[tuple[str, Any]]:
        for k, v in self.changes.items():
            if isinstance(v, dict):
                for kk, vv in v.items():
                    yield f"{k}.{kk}", vv
            else:
                yield k, v

    def __str__(self) -> str:
        return f"case {self.judge}{self.n} {self.what}: {json.dumps(self.changes)[:400]}"


def _set(values: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.replace("[0]", ".0").split(".")
    node: Any = values
    for p in parts[:-1]:
        node = node[int(p)] if p.isdigit() else node.setdefault(p, {})
    last = parts[-1]
    if last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value


def _toleration(rng: random.Random) -> dict[str, Any]:
    t: dict[str, Any] = {"key": rng.choice(TOLERATION_KEYS)}
    if op := rng.choice(OPERATORS):
        t["operator"] = op
    if rng.random() < 0.6:
        t["value"] = rng.choice(["present", "true", "ml", "", "a b"])
    if eff := rng.choice(EFFECTS):
        t["effect"] = eff
    if rng.random() < 0.15:
        t["tolerationSeconds"] = 30
    return t


def _selector(rng: random.Random) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if rng.random() < 0.7:
        out["matchLabels"] = {rng.choice(LABEL_KEYS): rng.choice(LABEL_VALUES)}
    if rng.random() < 0.4 or not out:
        op = rng.choice(SELECTOR_OPS)
        expr: dict[str, Any] = {"key": rng.choice(LABEL_KEYS[:6]), "operator": op}
        if rng.random() < 0.7:
            expr["values"] = rng.sample(LABEL_VALUES, rng.randint(0, 2))
        out["matchExpressions"] = [expr]
    return out


def _peer(rng: random.Random) -> dict[str, Any]:
    peer: dict[str, Any] = {}
    for k, p in (("ipBlock", 0.4), ("podSelector", 0.4), ("namespaceSelector", 0.5)):
        if rng.random() < p:
            peer[k] = {"cidr": rng.choice(["10.0.0.0/8", "192.168.1.0/24"])} if k == "ipBlock" else _selector(rng)
    return peer


def _resources(rng: random.Random, cpu: list[str], mem: list[str]) -> dict[str, Any]:
    return {
        "requests": {"cpu": rng.choice(cpu), "memory": rng.choice(mem)},
        "limits": {"cpu": rng.choice(cpu), "memory": rng.choice(mem)},
    }


def api_case(n: int, rng: random.Random) -> Case:
    """A mutation of the keys whose values reach what the API server validates."""
    kind = rng.randrange(9)
    if kind == 0:
        return Case(n, "A", {"commonLabels": {rng.choice(LABEL_KEYS): rng.choice(LABEL_VALUES)}}, "commonLabels")
    if kind == 1:
        return Case(n, "A", {"nameOverride": rng.choice(NAMES + LABEL_VALUES)}, "nameOverride")
    if kind == 2:
        return Case(n, "A", {"fullnameOverride": rng.choice(NAMES)}, "fullnameOverride")
    if kind == 3:
        where = rng.choice(["head.labels", "workerGroups[0].labels"])
        return Case(n, "A", {where: {rng.choice(LABEL_KEYS): rng.choice(LABEL_VALUES)}}, where)
    if kind == 4:
        where = rng.choice(["head.tolerations", "workerGroups[0].tolerations"])
        return Case(n, "A", {where: [_toleration(rng) for _ in range(rng.randint(1, 2))]}, where)
    if kind == 5:
        return Case(n, "A", {"access.networkPolicy.allowFrom": [_peer(rng) for _ in range(rng.randint(1, 2))]}, "allowFrom")
    if kind == 6:
        return Case(
            n,
            "A",
            {"logging.fluentBit.enabled": True, "logging.fluentBit.resources": _resources(rng, QUANTITIES_CPU, QUANTITIES_MEM)},
            "fluentBit",
        )
    if kind == 7:
        return Case(n, "A", {"serviceAccount.create": True, "serviceAccount.name": rng.choice(NAMES)}, "serviceAccount")
    where = rng.choice(["head.nodeSelector", "workerGroups[0].nodeSelector"])
    return Case(n, "A", {where: {rng.choice(LABEL_KEYS): rng.choice(LABEL_VALUES)}}, where)


def sched_case(n: int, rng: random.Random) -> Case:
    """A mutation of what decides where the pods go, the node pools held fixed."""
    kind = rng.randrange(6)
    if kind == 0:
        k, v = rng.choice(CPU_SELECTORS)
        changes: dict[str, Any] = {"head.nodeSelector": {k: v}}
        if rng.random() < 0.3:
            changes["head.tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        return Case(n, "B", changes, "head.nodeSelector")
    if kind == 1:
        k, v = rng.choice(GPU_SELECTORS)
        return Case(n, "B", {"workerGroups[0].nodeSelector": {k: v}}, "workerGroups[0].nodeSelector")
    if kind == 2:
        cpu = rng.choice(["1", "6", "12", "15", "15500m", "15900m", "16", "20"])
        mem = rng.choice([24, 48, 55, 57, 60, 64])
        res = {"requests": {"cpu": cpu, "memory": f"{mem}Gi"}, "limits": {"cpu": cpu, "memory": f"{mem + 1}Gi"}}
        return Case(n, "B", {"head.resources": res, "head.shmSize": "1Gi"}, "head.resources")
    if kind == 3:
        cpu = rng.choice(["200", "215", "220", "222", "224", "230"])
        mem = rng.choice([2500, 2700, 2800, 2900])
        res = {"requests": {"cpu": cpu, "memory": f"{mem}Gi"}, "limits": {"cpu": cpu, "memory": f"{mem + 1}Gi"}}
        return Case(n, "B", {"worker.resources": res, "worker.shmSize": "1Gi"}, "worker.resources")
    if kind == 4:
        part = rng.choice(["launcher", "prepare"])
        cpu = rng.choice(["1", "4", "15", "16", "17"])
        mem = rng.choice(["1Gi", "8Gi", "56Gi", "64Gi"])
        return Case(n, "B", {f"{part}.resources": {"requests": {"cpu": cpu, "memory": mem}, "limits": {"cpu": cpu, "memory": mem}}}, part)
    k, v = rng.choice(CPU_SELECTORS + GPU_SELECTORS)
    tol = rng.choice([[], [{"key": "nvidia.com/gpu", "operator": "Exists"}], [{"operator": "Exists"}]])
    return Case(n, "B", {"head.nodeSelector": {k: v}, "head.tolerations": tol}, "head selector+toleration")


def cases(judge: str, count: int, base: dict[str, Any]) -> list[Case]:
    rng = random.Random(f"{SEED}-{judge}")
    make = api_case if judge == "A" else sched_case
    out = []
    for n in range(count):
        c = make(n, rng)
        c.values = copy.deepcopy(base)
        for k, v in c.changes.items():
            _set(c.values, k, v)
        out.append(c)
    return out


# --- the judges -------------------------------------------------------------------------------

# Not refusals of what the case rendered: a dry run does not create the ServiceAccount a pod
# names (Helm creates it first), and an object judged before may exist already.
NOT_A_REFUSAL = re.compile(r"serviceaccount \S+ not found|already exists", re.IGNORECASE)


def _sent(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """What reaches the API server from one rendered object: the object, and for a RayCluster the
    Pods KubeRay creates from its templates (the API server validates a custom resource only by
    its schema; the pod template's fields are judged when KubeRay creates the pod)."""
    yield obj
    if obj.get("kind") != "RayCluster":
        return
    spec = obj.get("spec") or {}
    templates = [(spec.get("headGroupSpec") or {}).get("template")]
    templates += [(g or {}).get("template") for g in spec.get("workerGroupSpecs") or []]
    for i, t in enumerate(t for t in templates if t):
        meta = copy.deepcopy(t.get("metadata") or {})
        meta["name"] = f"{obj['metadata']['name']}-pod-{i}"
        yield {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": copy.deepcopy(t.get("spec") or {})}


def _admissible(obj: dict[str, Any]) -> dict[str, Any]:
    """A Pod names the namespace's `default` ServiceAccount: a dry run creates no ServiceAccount, and
    the admission plugin that looks the pod's up answers before validation would (the
    ServiceAccount object itself is judged as rendered)."""
    if obj.get("kind") != "Pod":
        return obj
    out = copy.deepcopy(obj)
    out["spec"]["serviceAccountName"] = "default"
    return out


def judge_a(kube: Kube, ns: str, objs: list[dict[str, Any]], seen: dict[str, str]) -> list[str]:
    """The API server's refusals of a server-side dry-run create of every object; an object
    identical to one judged before (`seen`: its JSON to its refusal or "") is not sent again."""
    refused = []
    for obj in (_admissible(o) for rendered in objs for o in _sent(rendered)):
        text = json.dumps(obj, sort_keys=True)
        if text in seen:
            refused += [seen[text]] if seen[text] else []
            continue
        seen[text] = ""
        body = copy.deepcopy(obj)
        res = kube.resource(body["apiVersion"], body["kind"])
        if res.namespaced:
            body.setdefault("metadata", {})["namespace"] = ns
        try:
            res.create(body=body, namespace=ns if res.namespaced else None, dry_run="All")
        except ApiException as e:
            body_text = str(e.body or e.reason)
            if os.environ.get("DIFFERENTIAL_DEBUG"):
                print("DEBUG", obj["kind"], e.status, body_text[:200])
            if not NOT_A_REFUSAL.search(body_text):
                seen[text] = f"{obj['kind']}/{obj.get('metadata', {}).get('name')}: {e.status} {body_text[:300]}"
                refused.append(seen[text])
    return refused


POD_FIELDS = ("nodeSelector", "affinity", "tolerations", "containers", "initContainers")


def judge_pod(spec: dict[str, Any]) -> dict[str, Any]:
    """What decides where the pod goes: its scheduling fields and its containers' resources."""
    keep = {k: copy.deepcopy(spec[k]) for k in POD_FIELDS if k in spec}
    for field_ in ("containers", "initContainers"):
        keep[field_] = [
            {"name": c["name"], "image": "registry.k8s.io/pause:3.10", "resources": _strings(c.get("resources") or {})}
            | ({"restartPolicy": c["restartPolicy"]} if c.get("restartPolicy") else {})
            for c in keep.get(field_) or []
        ]
    if not keep["initContainers"]:
        del keep["initContainers"]
    return keep


def _strings(res: dict[str, Any]) -> dict[str, Any]:
    return {k: {n: str(q) for n, q in (v or {}).items()} for k, v in res.items()}


def _phase(pod: dict[str, Any]) -> str | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c["type"] == "PodScheduled":
            if c["status"] == "True":
                return "bound"
            if c.get("reason") == "Unschedulable":
                return "unschedulable: " + str(c.get("message", ""))[:200]
    return None


def judge_b(kube: Kube, ns: str, specs: list[dict[str, Any]]) -> list[str]:
    """The scheduler's answer for each pod spec, BATCH at a time, every pod removed before the next batch."""
    core = client.CoreV1Api(kube.api)
    answers: list[str] = []
    for start in range(0, len(specs), BATCH):
        batch = specs[start : start + BATCH]
        names = [unique("judge") for _ in batch]
        for name, spec in zip(names, batch, strict=True):
            body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec | {"terminationGracePeriodSeconds": 0}}
            core.create_namespaced_pod(ns, body)

        def decided(names: list[str] = names) -> dict[str, str] | None:
            pods = {p.metadata.name: kube.api.sanitize_for_serialization(p) for p in core.list_namespaced_pod(ns).items}
            got = {n: _phase(pods[n]) for n in names if n in pods}
            return got if len(got) == len(names) and all(got.values()) else None  # type: ignore[return-value]

        got = wait_for("the scheduler's decisions", decided, 120, 0.05)
        answers += [got[n] for n in names]
        core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        wait_for("the judged pods gone", lambda: not core.list_namespaced_pod(ns).items, 120, 0.05)
    return answers


# --- the test bed ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def judges(bed):
    """The newest KubeRay's cluster, a namespace per judge, and BATCH more nodes of each pool."""
    kube = bed.cluster().kube()
    infra = default_infra()
    extra = InfraOptions(gpu=infra.gpu, project=infra.project, region=infra.region, zone=infra.zone, cluster="judge", nodes=BATCH)
    group = GroupSpec("gpu", BATCH, infra.provisioning, "")
    more = bed_nodes.cpu_pool(extra, BATCH) + bed_nodes.gpu_pool(extra, group)
    add_nodes(kube, more)
    a, b = namespace(kube, unique("judge-a")), namespace(kube, unique("judge-b"))
    try:
        yield kube, a, b
    finally:
        for n in (a, b):
            kube.delete("v1", "Namespace", n)
        for node in more:
            kube.delete("v1", "Node", node["metadata"]["name"])


@pytest.fixture(scope="module")
def base() -> dict[str, Any]:
    return configurations([BASE], [], [], True)[0].values


@pytest.fixture(scope="module", autouse=True)
def one_recipe():
    """The NeMo RL recipe with a case's overrides, merged once: no mutation here touches `grpo` or
    `image`, and Context.recipe_check (with run_config, made from it) is a function of those alone.
    Without it each case spends most of its time merging the same recipe."""
    memo: dict[str, Any] = {}
    originals = Context.recipe_check, Context.run_config

    def _key(ctx: Context) -> str:
        return json.dumps([ctx.values["image"]["tag"], ctx.grpo["recipe"], grpo_override_args(ctx.grpo)], default=str)

    def recipe_check(ctx: Context) -> Any:
        k = _key(ctx)
        if k not in memo:
            memo[k] = originals[0].func(ctx)  # type: ignore[attr-defined]
        return memo[k]

    def run_config(ctx: Context) -> Any:
        k = "config " + _key(ctx)
        if k not in memo:
            memo[k] = originals[1].func(ctx)  # type: ignore[attr-defined]
        return memo[k]

    Context.recipe_check = property(recipe_check)  # type: ignore[assignment,method-assign]
    Context.run_config = property(run_config)  # type: ignore[assignment,method-assign]
    try:
        yield
    finally:
        Context.recipe_check, Context.run_config = originals  # type: ignore[method-assign]


def validated(all_cases: list[Case]) -> Iterator[tuple[Case, list[Finding], list[dict[str, Any]]]]:
    """validate (its findings, the objects it rendered) for each case, Helm rendering the next
    cases while Python checks this one."""
    with ThreadPoolExecutor(3) as pool:
        for case, (findings, objs) in zip(all_cases, pool.map(lambda c: validate_rendered(c.values, RELEASE), all_cases), strict=True):
            yield case, findings, objs


def _errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.level == ERROR]


def _report(disagree: list[str], explained: dict[str, int], judged: int, refused: int, took: float) -> str:
    lines = [f"{judged} cases judged ({refused} refused by the judge) in {took:.1f} s"]
    lines += [f"explained ({n}): {why}" for why, n in explained.items()]
    return "\n".join(lines + disagree[:20])


def test_validate_agrees_with_the_api_server(judges, base):
    kube, ns, _ = judges
    start = time.monotonic()
    disagree: list[str] = []
    explained: dict[str, int] = {}
    judged = refused_n = 0
    assert not _errors(validate_rendered(base, RELEASE)[0]), "the base values are valid"
    seen: dict[str, str] = {}
    for case, findings, objs in validated(cases("A", CASES_A, base)):
        if not objs:  # the chart stopped the render: nothing reaches the API server
            assert _errors(findings), f"{case}: Helm rendered nothing but validate is silent"
            continue
        judged += 1
        refused = judge_a(kube, ns, objs, seen)
        refused_n += bool(refused)
        errors = _errors(findings)
        if bool(refused) == bool(errors):
            continue
        why = next((e.why for e in EXPLAINED if e.judge == "A" and e.matches(case, bool(refused), findings)), None)
        if why:
            explained[why] = explained.get(why, 0) + 1
            continue
        disagree.append(f"{case}\n  judge: {refused or 'accepted'}\n  validate: {[f.line('') for f in errors] or 'valid'}")
    report = _report(disagree, explained, judged, refused_n, time.monotonic() - start)
    report += f"\n{len(seen)} distinct objects sent"
    print(report)
    assert judged >= min(500, CASES_A * 0.8), report
    assert refused_n > judged / 5 and judged - refused_n > judged / 5, report  # the cases probe both sides
    assert not disagree, report


def test_validate_agrees_with_the_scheduler(judges, base):
    kube, _, ns = judges
    start = time.monotonic()
    rendered: list[tuple[Case, list[Finding], list[dict[str, Any]]]] = []
    for case, findings, objs in validated(cases("B", CASES_B, base)):
        assert objs, f"{case}: {findings}"
        rendered.append((case, findings, [judge_pod(p.spec) for p in pod_templates(objs)]))
    # Each distinct pod is judged once.
    distinct: dict[str, dict[str, Any]] = {}
    for _, _, pods in rendered:
        for p in pods:
            distinct.setdefault(json.dumps(p, sort_keys=True), p)
    keys = list(distinct)
    answers = dict(zip(keys, judge_b(kube, ns, [distinct[k] for k in keys]), strict=True))
    disagree: list[str] = []
    explained: dict[str, int] = {}
    refused_n = 0
    for case, findings, pods in rendered:
        stuck = [answers[json.dumps(p, sort_keys=True)] for p in pods]
        stuck = [a for a in stuck if a != "bound"]
        refused_n += bool(stuck)
        sched = _errors(findings)
        if bool(stuck) == bool(sched):
            continue
        why = next((e.why for e in EXPLAINED if e.judge == "B" and e.matches(case, bool(stuck), findings)), None)
        if why:
            explained[why] = explained.get(why, 0) + 1
            continue
        disagree.append(f"{case}\n  judge: {stuck or 'every pod bound'}\n  validate: {[f.line('') for f in sched] or 'valid'}")
    report = _report(disagree, explained, len(rendered), refused_n, time.monotonic() - start)
    report += f"\n{len(keys)} distinct pods judged"
    print(report)
    assert len(rendered) >= min(500, CASES_B), report
    assert refused_n > len(rendered) / 5 and len(rendered) - refused_n > len(rendered) / 5, report
    assert not disagree, report
