"""GPU nodes offer the accelerator label the workers select, and their allocatable covers each
worker pod's requests (CPU, memory, nvidia.com/gpu: what the scheduler compares).

On Standard, infra.sh's Spot, on-demand and flex-start pools start at 0 nodes: no node is not
an error, but the Kubernetes API does not show a node pool's accelerator or size (gcloud does), so
doctor says it could not see one. On Autopilot, GKE provisions nodes for the pods' selectors.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from generator.cluster.checks.context import ACCELERATOR_LABEL, Context, labels, listed
from generator.cluster.release import requests
from generator.cluster.report import Result, failed, passed, warned
from generator.gke.sizing import parse_quantity

NAME = "gpu-nodes"
SCHEDULED = ("cpu", "memory", "nvidia.com/gpu")


def _matches(node: dict[str, Any], selector: dict[str, Any]) -> bool:
    have = labels(node)
    return all(have.get(k) == str(v) for k, v in selector.items())


def _shortfalls(node: dict[str, Any], need: dict[str, Fraction]) -> list[str]:
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    out = []
    for resource in SCHEDULED:
        want = need.get(resource, Fraction(0))
        have = parse_quantity(allocatable.get(resource, 0))
        if want > have:
            out.append(f"{resource} {allocatable.get(resource, 0)} < {_show(want, resource)}")
    return out


def _show(q: Fraction, resource: str) -> str:
    if resource == "memory":
        return f"{float(q / 2**30):g}Gi"
    return f"{float(q):g}"


def _group(ctx: Context, group: str, pod: Any, nodes: list[dict[str, Any]]) -> tuple[int, list[str]]:
    """(matching nodes, shortfalls) of one worker group."""
    selector = pod.spec.get("nodeSelector") or {}
    need = requests(pod.spec)
    matching = [n for n in nodes if _matches(n, selector)]
    short = [f"{n['metadata']['name']} ({', '.join(s)})" for n in matching if (s := _shortfalls(n, need))]
    return len(matching), [f"group {group}: {x}" for x in short]


def check(ctx: Context) -> Result:
    label = f"{ACCELERATOR_LABEL}={ctx.value('accelerator.nodeLabel')}"
    nodes = ctx.gpu_nodes()
    workers = ctx.rendered.workers()
    if not nodes:
        if ctx.value("gke.mode") == "autopilot":
            return passed(NAME, f"no node has {label} yet: Autopilot provisions them for the worker pods")
        return warned(
            NAME,
            f"no node has {label} now: fine if its node pool autoscales from 0 (infra.sh makes Spot, on-demand and flex-start pools so), "
            "else the workers stay Pending; the Kubernetes API does not show node pools",
            "gcloud container node-pools list --cluster CLUSTER --location LOCATION shows each pool's machine type and autoscaling",
        )
    counted, short = 0, []
    for group, _replicas, pod in workers:
        n, s = _group(ctx, group, pod, nodes)
        counted += n
        short += s
    if short:
        return failed(
            NAME,
            f"allocatable below a worker pod's requests on {listed(short, 3)}",
            "regenerate the values for this machine (python -m generator --gpu ...) or lower worker.resources.requests and worker.shmSize",
        )
    wanted = sum(r for _, r, _ in workers)
    if counted == 0 and ctx.value("gke.mode") == "autopilot":
        return passed(
            NAME,
            f"{len(nodes)} node(s) have {label} but none matches a worker group's whole node selector: "
            "Autopilot provisions nodes for the worker pods",
        )
    if counted == 0:
        return warned(
            NAME,
            f"{len(nodes)} node(s) have {label} but none matches a worker group's whole node selector (provisioning, reservation, pool)",
            "compare `kubectl get nodes -l " + label + " --show-labels` with the worker groups' nodeSelector",
        )
    return passed(NAME, f"{len(nodes)} node(s) have {label}; each fits a worker pod ({wanted} wanted; pools may scale up to the rest)")
