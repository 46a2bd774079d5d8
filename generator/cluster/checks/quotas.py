"""The namespace's ResourceQuotas leave room for the release: the Ray head, every worker pod and the
two Jobs' pods, summed (requests.* and limits.* of CPU, memory and nvidia.com/gpu, and the pod
count). The quota admission plugin refuses a pod that would exceed a quota's `hard` given its
`used` (https://kubernetes.io/docs/concepts/policy/resource-quotas/). The project's Compute Engine
quotas (GPUs per region) are not visible through the Kubernetes API."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from generator.cluster.checks.context import Context, listed
from generator.cluster.release import requests
from generator.cluster.report import Result, failed, passed
from generator.gke.sizing import parse_quantity

NAME = "quotas"
# Quota key -> (requests or limits, resource); cpu and memory without a prefix are requests.
KEYS = {
    "cpu": ("requests", "cpu"),
    "memory": ("requests", "memory"),
    "requests.cpu": ("requests", "cpu"),
    "requests.memory": ("requests", "memory"),
    "requests.nvidia.com/gpu": ("requests", "nvidia.com/gpu"),
    "limits.cpu": ("limits", "cpu"),
    "limits.memory": ("limits", "memory"),
    "limits.nvidia.com/gpu": ("limits", "nvidia.com/gpu"),
}


def release_needs(ctx: Context) -> dict[str, Fraction]:
    """Quota key -> what the release's pods ask for, summed (workers times their replicas)."""
    replicas = {pod.where: n for _, n, pod in ctx.rendered.workers()}
    need: dict[str, Fraction] = {"pods": Fraction(0)}
    for pod in ctx.rendered.pods():
        if pod.where.startswith("Pod/"):
            continue  # helm test's pod comes later, when the Jobs are done
        n = replicas.get(pod.where, 1)
        need["pods"] += n
        for key, (which, resource) in KEYS.items():
            amount = requests(pod.spec, which).get(resource)
            if amount is not None:
                need[key] = need.get(key, Fraction(0)) + n * amount
    return need


def _short(quota: dict[str, Any], need: dict[str, Fraction]) -> list[str]:
    hard = (quota.get("status") or {}).get("hard") or (quota.get("spec") or {}).get("hard") or {}
    used = (quota.get("status") or {}).get("used") or {}
    out = []
    for key, limit in hard.items():
        if key not in need:
            continue
        left = parse_quantity(limit) - parse_quantity(used.get(key, 0))
        if need[key] > left:
            out.append(f"{quota['metadata']['name']}: {key} {_show(left, key)} left of {limit}, the release needs {_show(need[key], key)}")
    return out


def _show(q: Fraction, key: str) -> str:
    return f"{float(q / 2**30):g}Gi" if key.endswith("memory") else f"{float(q):g}"


def check(ctx: Context) -> Result:
    quotas = ctx.kube.items(f"/api/v1/namespaces/{ctx.namespace}/resourcequotas")
    gcp = "the project's Compute Engine GPU quota is not visible here (gcloud compute regions describe REGION)"
    if not quotas:
        return passed(NAME, f"no ResourceQuota in namespace {ctx.namespace}; {gcp}")
    need = release_needs(ctx)
    short = [s for q in quotas for s in _short(q, need)]
    if short:
        return failed(NAME, f"{listed(short, 3)}", "raise the quota (kubectl -n NAMESPACE edit resourcequota NAME) or use fewer GPU nodes")
    return passed(NAME, f"{len(quotas)} ResourceQuota(s) in {ctx.namespace} leave room for the release; {gcp}")
