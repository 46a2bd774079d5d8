"""The API server answers, and the caller may do what `helm install` of this release needs.

What Helm does on `helm install` (helm pkg/action/install.go and validate.go,
existingResourceConflict): it GETs every rendered object (an existing one must carry this
release's ownership metadata), creates each, and keeps the release record in a Secret of the
namespace (the default `secret` storage driver: list, get, create, then update when the install
is done). `helm test` deletes the previous test Pod first (hook-delete-policy
before-hook-creation). Creating the launcher's Role needs the permissions it grants, or the
`escalate` verb (Kubernetes RBAC's privilege-escalation prevention:
https://kubernetes.io/docs/reference/access-authn-authz/rbac/#privilege-escalation-prevention-and-bootstrapping).
Each is asked with a SelfSubjectAccessReview.
"""

from __future__ import annotations

from typing import Any

from generator.cluster.checks.context import Context, listed
from generator.cluster.report import Result, failed, passed

# The kinds the chart renders: (apiVersion group, kind) -> (resource, namespaced).
RESOURCES: dict[tuple[str, str], tuple[str, bool]] = {
    ("", "ConfigMap"): ("configmaps", True),
    ("", "PersistentVolume"): ("persistentvolumes", False),
    ("", "PersistentVolumeClaim"): ("persistentvolumeclaims", True),
    ("", "Pod"): ("pods", True),
    ("", "Secret"): ("secrets", True),
    ("", "ServiceAccount"): ("serviceaccounts", True),
    ("batch", "Job"): ("jobs", True),
    ("networking.gke.io", "GKENetworkParamSet"): ("gkenetworkparamsets", False),
    ("networking.gke.io", "Network"): ("networks", False),
    ("networking.k8s.io", "NetworkPolicy"): ("networkpolicies", True),
    ("policy", "PodDisruptionBudget"): ("poddisruptionbudgets", True),
    ("ray.io", "RayCluster"): ("rayclusters", True),
    ("rbac.authorization.k8s.io", "Role"): ("roles", True),
    ("rbac.authorization.k8s.io", "RoleBinding"): ("rolebindings", True),
    ("external-secrets.io", "ExternalSecret"): ("externalsecrets", True),
    ("resource.k8s.io", "ResourceClaimTemplate"): ("resourceclaimtemplates", True),
    ("resource.nvidia.com", "ComputeDomain"): ("computedomains", True),
}
HELM_RECORD = [("get", "", "secrets"), ("list", "", "secrets"), ("create", "", "secrets"), ("update", "", "secrets")]


def api(ctx: Context) -> Result:
    v = ctx.kube.version()
    version = v.get("gitVersion") or f"{v.get('major', '?')}.{v.get('minor', '?')}"
    return passed("api", f"{ctx.kube.server} answers (Kubernetes {version}); context {ctx.kube.context}, namespace {ctx.namespace}")


def needed(ctx: Context) -> list[tuple[str, str, str, str, str]]:
    """(verb, group, resource, namespace, name) for everything `helm install` and `helm test` do."""
    asks: list[tuple[str, str, str, str, str]] = []
    for obj in ctx.rendered.objects:
        group = str(obj.get("apiVersion", "")).rpartition("/")[0]
        resource, namespaced = RESOURCES.get((group, str(obj.get("kind"))), (str(obj.get("kind", "")).lower() + "s", True))
        ns = ctx.namespace if namespaced else ""
        for verb in ("get", "create"):
            asks.append((verb, group, resource, ns, ""))
    asks += [(verb, group, resource, ctx.namespace, "") for verb, group, resource in HELM_RECORD]
    if ctx.rendered.of_kind("Pod"):
        asks.append(("delete", "", "pods", ctx.namespace, ""))  # helm test: before-hook-creation
    for role in ctx.rendered.of_kind("Role"):
        asks += _granted(role, ctx.namespace)
    return list(dict.fromkeys(asks))


def _granted(role: dict[str, Any], namespace: str) -> list[tuple[str, str, str, str, str]]:
    out = []
    for rule in role.get("rules") or []:
        names = rule.get("resourceNames") or [""]
        for group in rule.get("apiGroups") or []:
            for resource in rule.get("resources") or []:
                out += [(verb, group, resource, namespace, name) for verb in rule.get("verbs") or [] for name in names]
    return out


def _phrase(verb: str, group: str, resource: str, namespace: str, name: str) -> str:
    what = f"{resource}.{group}" if group else resource
    what += f" {name}" if name else ""
    return f"{verb} {what}" + ("" if namespace else " (cluster-scoped)")


def permissions(ctx: Context) -> Result:
    asks = needed(ctx)
    missing = [a for a in asks if not ctx.kube.may(a[0], a[1], a[2], namespace=a[3], name=a[4])]
    if not missing:
        return passed("permissions", f"you may do all {len(asks)} things helm install and helm test of this release do in {ctx.namespace}")
    return failed(
        "permissions",
        f"you may not {listed([_phrase(*a) for a in missing], 6)} (namespace {ctx.namespace})",
        "ask a cluster admin for a Role in the namespace (a ClusterRole for cluster-scoped kinds) granting them; "
        "`kubectl auth can-i VERB RESOURCE -n NAMESPACE` shows each",
    )
