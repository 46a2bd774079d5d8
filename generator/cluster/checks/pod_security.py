"""The namespace's Pod Security level admits the pods the chart renders.

Pod Security admission enforces the level in the namespace label
pod-security.kubernetes.io/enforce (privileged, baseline or restricted; no label: privileged, unless
the cluster's admission configuration sets another default, which the API does not show). It
checks Pods when they are created: a RayCluster or Job the namespace's level refuses is accepted,
and its pods are then refused one by one (KubeRay and the Job controller keep trying), so the
install hangs with no pod. The controls below are those of the Pod Security Standards
(https://kubernetes.io/docs/concepts/security/pod-security-standards/) that a pod of this chart can
touch.

Why the GPU workers need `privileged`: they mount two hostPath volumes, /home/kubernetes/bin/nvidia
(the NVIDIA driver GKE installs on the node) and, in RDMA mode, /home/kubernetes/bin/gib (the gIB
NCCL plugin the RDMA installer writes), read-only, as Google's GPU and RDMA pod examples do; the
baseline level forbids every hostPath volume ("HostPath Volumes: must be forbidden"), so only
privileged admits them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from generator.cluster.checks.context import Context, labels, listed
from generator.cluster.report import Result, failed, passed
from generator.validate.objects import Pod

NAME = "pod-security"
ENFORCE = "pod-security.kubernetes.io/enforce"
LEVELS = ("privileged", "baseline", "restricted")
# Baseline: capabilities that may be added (Pod Security Standards, "Capabilities").
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
    "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
# Restricted: the only volume types allowed ("Volume Types").
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or []), *(spec.get("ephemeralContainers") or [])]


def baseline(spec: dict[str, Any]) -> Iterator[str]:
    """What the baseline level refuses in a pod spec."""
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(flag):
            yield f"{flag}"
    host_paths = [v["name"] for v in spec.get("volumes") or [] if "hostPath" in v]
    if host_paths:
        yield f"hostPath volumes {', '.join(host_paths)}"
    if ((spec.get("securityContext") or {}).get("seccompProfile") or {}).get("type") == "Unconfined":
        yield "seccompProfile Unconfined"
    for c in _containers(spec):
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            yield f"privileged container {c.get('name')}"
        added = set((sc.get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES
        if added:
            yield f"container {c.get('name')} adds capabilities {', '.join(sorted(added))}"
        if any(p.get("hostPort") for p in c.get("ports") or []):
            yield f"container {c.get('name')} uses a hostPort"


def restricted(spec: dict[str, Any]) -> Iterator[str]:
    """What the restricted level refuses beyond baseline."""
    other = sorted({k for v in spec.get("volumes") or [] for k in v if k != "name" and k not in RESTRICTED_VOLUMES} - {"hostPath"})
    if other:
        yield f"volume types {', '.join(other)}"
    pod_sc = spec.get("securityContext") or {}
    for c in _containers(spec):
        yield from _restricted_container(c, pod_sc)


def _restricted_container(c: dict[str, Any], pod_sc: dict[str, Any]) -> Iterator[str]:
    sc = c.get("securityContext") or {}
    name = c.get("name")
    if sc.get("allowPrivilegeEscalation") is not False:
        yield f"container {name} without allowPrivilegeEscalation: false"
    if not sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")):
        yield f"container {name} without runAsNonRoot: true"
    if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
        yield f"container {name} runs as user 0"
    seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
    if seccomp not in ("RuntimeDefault", "Localhost"):
        yield f"container {name} without seccompProfile RuntimeDefault"
    caps = sc.get("capabilities") or {}
    if "ALL" not in (caps.get("drop") or []):
        yield f"container {name} does not drop ALL capabilities"
    if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
        yield f"container {name} adds capabilities"


def refused(level: str, spec: dict[str, Any]) -> list[str]:
    if level == "privileged":
        return []
    found = list(baseline(spec))
    if level == "restricted":
        found += list(restricted(spec))
    return found


def _who(pod: Pod) -> str:
    if pod.ray == "worker":
        return f"GPU workers ({pod.where})"
    return "Ray head" if pod.ray == "head" else pod.where


def check(ctx: Context) -> Result:
    ns = ctx.kube.get(f"/api/v1/namespaces/{ctx.namespace}")
    if ns is None:
        return failed(
            NAME,
            f"namespace {ctx.namespace} does not exist",
            f"kubectl create namespace {ctx.namespace}, or helm install --create-namespace",
        )
    level = labels(ns).get(ENFORCE, "privileged")
    if level not in LEVELS:
        return failed(
            NAME, f"namespace {ctx.namespace} has {ENFORCE}={level}, not a Pod Security level", f"set it to one of {', '.join(LEVELS)}"
        )
    refusals = [f"{_who(pod)}: {', '.join(why)}" for pod in ctx.rendered.pods() if (why := refused(level, pod.spec))]
    label = "no label: privileged" if ENFORCE not in labels(ns) else f"{ENFORCE}={level}"
    if refusals:
        return failed(
            NAME,
            f"namespace {ctx.namespace} ({label}) refuses {listed(refusals, 3)}; "
            "the RayCluster and Jobs are accepted but never get those pods",
            f"kubectl label namespace {ctx.namespace} {ENFORCE}=privileged --overwrite (the GPU workers mount the node's NVIDIA driver and "
            "gIB plugin as hostPath volumes, which only privileged admits), or install into a namespace that allows it",
        )
    return passed(NAME, f"namespace {ctx.namespace} ({label}) admits every pod the chart renders")
