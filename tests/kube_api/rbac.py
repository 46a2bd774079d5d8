"""The stand-in's authorization: a Role's PolicyRules as the API server's RBAC authorizer reads
them in the Role's namespace, and the Forbidden answer it gives
(https://kubernetes.io/docs/reference/access-authn-authz/rbac/#role-and-clusterrole).
Subresources are named "resource/subresource" in rules (e.g. services/proxy)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# GET of a name reads it (get), GET of a collection lists it (list).
VERBS = {"PATCH": "patch", "PUT": "update", "DELETE": "delete", "POST": "create"}


@dataclass(frozen=True)
class Attributes:
    """What a request asks: verb, group, resource[/subresource], namespace, name."""

    verb: str
    group: str
    resource: str  # with "/subresource" when one is asked
    namespace: str
    name: str = ""


def rule_allows(rule: dict[str, Any], attrs: Attributes) -> bool:
    """One RBAC PolicyRule: apiGroups, resources, verbs, resourceNames ('*' matches any)."""

    def has(key: str, value: str) -> bool:
        values = rule.get(key) or []
        return "*" in values or value in values

    names = rule.get("resourceNames") or []
    named = not names or attrs.name in names
    return has("apiGroups", attrs.group) and has("resources", attrs.resource) and has("verbs", attrs.verb) and named


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code}


def qualified(group: str, resource: str) -> str:
    base = resource.split("/", maxsplit=1)[0]
    return f"{base}.{group}" if group else base


def forbidden(attrs: Attributes, user: str) -> dict[str, Any]:
    """The API server's 403, e.g. 'rayclusters.ray.io "rl" is forbidden: User "u" cannot get
    resource "rayclusters" in API group "ray.io" in the namespace "team"'."""
    what = qualified(attrs.group, attrs.resource) + (f' "{attrs.name}"' if attrs.name else "")
    where = f'in the namespace "{attrs.namespace}"'
    message = f'{what} is forbidden: User "{user}" cannot {attrs.verb} resource "{attrs.resource}" in API group "{attrs.group}" {where}'
    out = status(403, "Forbidden", message)
    out["details"] = {"name": attrs.name, "group": attrs.group, "kind": attrs.resource.split("/", maxsplit=1)[0]}
    return out
