"""The stand-in's authorization: RBAC PolicyRules as the API server's RBAC authorizer reads them, the
Forbidden answers it gives, and SelfSubjectAccessReview decided by the same rules.

A Role's rules hold in its namespace only; a ClusterRole's (bound by a ClusterRoleBinding) hold in
every namespace and for cluster-scoped resources
(https://kubernetes.io/docs/reference/access-authn-authz/rbac/#role-and-clusterrole).
Subresources are named "resource/subresource" in rules (e.g. services/proxy, pods/log).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# GET of a name reads it (get), GET of a collection lists it (list).
VERBS = {"PATCH": "patch", "PUT": "update", "DELETE": "delete", "POST": "create"}


@dataclass(frozen=True)
class Attributes:
    """What a request (or an access review) asks: verb, group, resource[/subresource], namespace, name."""

    verb: str
    group: str
    resource: str  # with "/subresource" when one is asked
    namespace: str  # "" at the cluster scope (or all namespaces)
    name: str = ""


def rule_allows(rule: dict[str, Any], attrs: Attributes) -> bool:
    """One RBAC PolicyRule: apiGroups, resources, verbs, resourceNames ('*' matches any)."""

    def has(key: str, value: str) -> bool:
        values = rule.get(key) or []
        return "*" in values or value in values

    names = rule.get("resourceNames") or []
    named = not names or attrs.name in names
    return has("apiGroups", attrs.group) and has("resources", attrs.resource) and has("verbs", attrs.verb) and named


def allowed(attrs: Attributes, rules: list[dict[str, Any]], namespace: str, cluster_rules: list[dict[str, Any]]) -> bool:
    if any(rule_allows(r, attrs) for r in cluster_rules):
        return True
    return attrs.namespace == namespace and any(rule_allows(r, attrs) for r in rules)


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code}


def qualified(group: str, resource: str) -> str:
    base = resource.split("/", maxsplit=1)[0]
    return f"{base}.{group}" if group else base


def forbidden(attrs: Attributes, user: str) -> dict[str, Any]:
    """The API server's 403, e.g. 'nodes is forbidden: User "u" cannot list resource "nodes" in API
    group "" at the cluster scope'."""
    what = qualified(attrs.group, attrs.resource) + (f' "{attrs.name}"' if attrs.name else "")
    where = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
    message = f'{what} is forbidden: User "{user}" cannot {attrs.verb} resource "{attrs.resource}" in API group "{attrs.group}" {where}'
    out = status(403, "Forbidden", message)
    out["details"] = {"name": attrs.name, "group": attrs.group, "kind": attrs.resource.split("/", maxsplit=1)[0]}
    return out


def access_review(body: Any, decide: Any) -> tuple[int, dict[str, Any]]:
    """POST selfsubjectaccessreviews: the review with its status (nothing is stored)."""
    spec = (body or {}).get("spec") or {}
    ra = spec.get("resourceAttributes")
    if not isinstance(ra, dict):
        message = (
            "SelfSubjectAccessReview.authorization.k8s.io is invalid: spec: Invalid value: "
            "exactly one of nonResourceAttributes or resourceAttributes must be specified"
        )
        return 422, status(422, "Invalid", message)
    resource = ra.get("resource", "") + (f"/{ra['subresource']}" if ra.get("subresource") else "")
    attrs = Attributes(ra.get("verb", ""), ra.get("group", ""), resource, ra.get("namespace", ""), ra.get("name", ""))
    ok = decide(attrs)
    review = {
        "kind": "SelfSubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "spec": spec,
        "status": {"allowed": ok, **({"reason": "RBAC: allowed by the stand-in's rules"} if ok else {})},
    }
    return 201, review
