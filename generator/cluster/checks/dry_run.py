"""The API server's own admission judges the whole release: every rendered object, and the pods the
controllers would make from the RayCluster's and the Jobs' templates, are sent as a server-side dry
run (POST with dryRun=All: every admission step runs, nothing is stored;
https://kubernetes.io/docs/reference/using-api/api-concepts/#dry-run).

So what the API server's configuration adds is judged as it will be at `helm install`: validating
and mutating admission webhooks (GKE Autopilot's, Kueue's, policy engines), Pod Security,
ResourceQuota and LimitRange. Objects go with fieldValidation=Strict, as Helm 4 sends them (helm
v4.1.4 pkg/kube/client.go: "Defaults to `FieldValidationDirectiveStrict`").

`helm install --dry-run=server` is not this: helm v4.1.4 pkg/action/install.go renders with the
cluster's `lookup`, GETs each object for ownership conflicts, and returns "Dry run complete" before
any object reaches the API server, so no admission step sees them (helm/helm issue 12510).

Pods are what Pod Security, LimitRanges and per-pod quotas judge; a RayCluster or Job they would
refuse is itself accepted, and its pods are then refused one by one. Each pod is sent once per
template (a quota's sum over every replica is the `quotas` check's). A pod's ServiceAccount that
the release itself creates does not exist yet: that pod is sent with the namespace's `default`
ServiceAccount, as no admission step of the chart's pods depends on which one it is.

Each refusal is its own line naming the object (and the template a pod comes from) and, where the
API server's message can be traced to one, the values key. A kind the caller may not create is
"not checked" (asked first with a SelfSubjectAccessReview), never a refusal.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

from generator.cluster.checks.access import RESOURCES
from generator.cluster.checks.context import Context
from generator.cluster.checks.pod_security import ENFORCE
from generator.cluster.kube import ApiError, Forbidden
from generator.cluster.report import Result, failed, passed, skipped, warned
from generator.validate.objects import Pod

NAME = "dry-run"
# Values keys of the objects a refusal cannot be traced further into.
KIND_KEYS = {
    "Network": "network",
    "GKENetworkParamSet": "network",
    "PersistentVolume": "storage",
    "PersistentVolumeClaim": "storage",
    "Secret": "secrets",
    "ExternalSecret": "secrets",
    "ServiceAccount": "serviceAccount",
    "NetworkPolicy": "access",
    "ConfigMap": "grpo",
}
# ResourceQuota's refusals: "exceeded quota: Q, requested: requests.memory=..." and, for a quota on
# a resource a container does not set, "failed quota: Q: must specify limits.cpu for: launcher".
QUOTA_REQUESTED = re.compile(r"requested: ([a-z./-]+)=|must specify ([a-z./-]+)")
RESOURCE_NAMES = ("nvidia.com/gpu", "ephemeral-storage", "memory", "cpu")


@dataclass(frozen=True)
class Submission:
    what: str  # how the report names it: "Job/x", "Pod from RayCluster/x workerGroupSpecs[0]"
    group: str
    resource: str
    namespaced: bool
    path: str
    body: dict[str, Any]
    pod: Pod | None = None


def _collection(api_version: str, resource: str, namespace: str) -> str:
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    return f"{base}/namespaces/{namespace}/{resource}" if namespace else f"{base}/{resource}"


def _swap_account(spec: dict[str, Any], missing: set[str]) -> None:
    """The ServiceAccount admission plugin refuses a pod whose ServiceAccount does not exist; the
    release's own is created with it, so the pod is judged with the namespace's default one."""
    if spec.get("serviceAccountName") in missing:
        spec["serviceAccountName"] = "default"


def _object(obj: dict[str, Any], namespace: str, missing: set[str]) -> Submission:
    api_version, kind = str(obj.get("apiVersion", "")), str(obj.get("kind", ""))
    group = api_version.rpartition("/")[0]
    resource, namespaced = RESOURCES.get((group, kind), (kind.lower() + "s", True))
    body = copy.deepcopy(obj)
    if namespaced:
        body.setdefault("metadata", {})["namespace"] = namespace
    if kind == "Pod":
        _swap_account(body.setdefault("spec", {}), missing)
    path = _collection(api_version, resource, namespace if namespaced else "")
    return Submission(f"{kind}/{obj.get('metadata', {}).get('name', '?')}", group, resource, namespaced, path, body)


def _controller_pod(pod: Pod, ctx: Context, missing: set[str]) -> Submission:
    """The pod KubeRay or the Job controller makes from a template: its metadata and spec, in the
    namespace, with a generated name (labels KubeRay and the Job controller add change no admission
    step of the chart's pods)."""
    owner = pod.where.split()[0]  # RayCluster/x or Job/x
    spec = copy.deepcopy(pod.spec)
    _swap_account(spec, missing)
    base = owner.split("/", 1)[1]
    suffix = "head" if pod.ray == "head" else ("worker" if pod.ray == "worker" else "")
    meta = {"generateName": f"{base}-{suffix}-" if suffix else f"{base}-", "namespace": ctx.namespace, "labels": dict(pod.labels)}
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    path = _collection("v1", "pods", ctx.namespace)
    return Submission(f"Pod from {pod.where}", "", "pods", True, path, body, pod)


def submissions(ctx: Context) -> list[Submission]:
    """The release's objects (a Namespace first would not be rendered), then one pod per template of
    a RayCluster or Job. The release's ServiceAccounts that do not exist yet are swapped in pods."""
    made_here = {str(o["metadata"]["name"]) for o in ctx.rendered.of_kind("ServiceAccount")}
    missing = {name for name in made_here if not _exists(ctx, f"/api/v1/namespaces/{ctx.namespace}/serviceaccounts/{name}")}
    out = [_object(o, ctx.namespace, missing) for o in ctx.rendered.objects]
    for pod in ctx.rendered.pods():
        if not pod.where.startswith("Pod/"):  # a rendered Pod is sent as an object above
            out.append(_controller_pod(pod, ctx, missing))
    return out


def _exists(ctx: Context, path: str) -> bool:
    """Whether the object exists; one the caller may not read counts as missing (the namespace's
    `default` ServiceAccount stands in for it)."""
    try:
        return ctx.kube.get(path) is not None
    except Forbidden:
        return False


def values_key(s: Submission, message: str) -> str:
    """The values key a refusal comes from, where the message says which field: a resource of a pod
    (LimitRange, ResourceQuota), a Job's non-root user (Pod Security); else the kind's values map."""
    m = message.lower()
    pod = s.pod
    if "error looking up service account" in m:
        return "serviceAccount.name"
    if pod is not None and pod.resources:
        if "podsecurity" in m:
            if pod.resources in ("launcher", "prepare") and "runasnonroot" in m:
                return f"{pod.resources}.runAsUser"
            return ""
        if (q := QUOTA_REQUESTED.search(message)) is not None:
            which, name = "requests", q.group(1) or q.group(2)
            if name.startswith(("requests.", "limits.")):
                which, name = name.split(".", 1)
            return _resource_key(pod, which, name)
        if "per container" in m or "per pod" in m:
            which = "limits" if "but limit is" in m or "maximum" in m else "requests"
            name = next((r for r in RESOURCE_NAMES if f" {r} " in m), "")
            return _resource_key(pod, which, name) if name else f"{pod.resources}.resources"
    return KIND_KEYS.get(s.what.split("/", 1)[0], "")


def _resource_key(pod: Pod, which: str, name: str) -> str:
    if name == "nvidia.com/gpu":
        return "accelerator.gpusPerNode" if pod.ray == "worker" else f"{pod.resources}.resources"
    if name in ("pods", "count/pods"):
        return f"{pod.scheduling}.replicas" if pod.ray == "worker" else ""
    return f"{pod.resources}.resources.{which}.{name}" if name else f"{pod.resources}.resources"


def _first_line(text: str) -> str:
    return " ".join(text.split())[:400]


def check(ctx: Context) -> list[Result]:
    ns = ctx.kube.get(f"/api/v1/namespaces/{ctx.namespace}")
    if ns is None:
        return [
            failed(
                NAME,
                f"namespace {ctx.namespace} does not exist: no object of the release can be judged",
                f"kubectl create namespace {ctx.namespace}, or helm install --create-namespace",
            )
        ]
    results: list[Result] = []
    allowed: dict[tuple[str, str, bool], bool] = {}
    unchecked: dict[str, list[str]] = {}
    exists: list[str] = []
    accepted = 0
    for s in submissions(ctx):
        key = (s.group, s.resource, s.namespaced)
        if key not in allowed:
            allowed[key] = ctx.kube.may("create", s.group, s.resource, namespace=ctx.namespace if s.namespaced else "")
        if not allowed[key]:
            what = f"{s.resource}.{s.group}" if s.group else s.resource
            permission = f"create {what}" + (f" in namespace {ctx.namespace}" if s.namespaced else " (cluster-scoped)")
            unchecked.setdefault(permission, []).append(s.what)
            continue
        try:
            ctx.kube.dry_run_create(s.path, s.body)
            accepted += 1
        except ApiError as e:
            if e.code == 409:
                exists.append(s.what)
                continue
            results.append(_refusal(s, e, ctx.namespace))
    for permission, whats in unchecked.items():
        results.append(skipped(NAME, f"{', '.join(whats)} not sent", permission))
    if exists:
        results.append(
            warned(
                NAME,
                f"{', '.join(exists)} exist(s) already: not judged as new objects",
                "helm install refuses objects another release or no release owns (see gke-networks); "
                "after an earlier install of this release: helm upgrade",
            )
        )
    if not results:
        judges = "webhooks, Pod Security, quotas, LimitRanges"
        results.append(passed(NAME, f"the API server's admission ({judges}) accepts all {accepted} objects and pods"))
    return results


def _refusal(s: Submission, e: ApiError, namespace: str) -> Result:
    message = _first_line(str(e))
    key = values_key(s, message)
    where = f" (values: {key})" if key else ""
    if isinstance(e, Forbidden) or "is forbidden:" in message or "denied" in message:
        verdict = "refused by admission"  # a ValidatingAdmissionPolicy denies with 422 unless it says otherwise
    elif e.code == 404:
        verdict = "not served by the API server (its CRD missing?)"
    elif e.code in (400, 422):
        verdict = "invalid"
    else:
        verdict = f"refused ({e.code})"
    if key == "serviceAccount.name":
        fix = f"create that ServiceAccount in {namespace} (serviceAccount.create false uses an existing one), or change {key}"
    elif key:
        fix = f"change {key}"
    elif "podsecurity" in message.lower():
        label = f"kubectl label namespace {namespace} {ENFORCE}=privileged --overwrite"
        fix = f"install into a namespace whose Pod Security level admits it ({label})"
    else:
        fix = "change the values the object comes from, or ask the cluster admin about the policy the message names"
    return failed(NAME, f"{s.what} {verdict}{where}: {message}", fix)
