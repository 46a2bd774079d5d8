"""What the API server refuses in the objects the chart renders, for every object and every field
that values reach: names, labels, selectors, tolerations, NetworkPolicy peers and the resources of
every container (sidecars and init containers too). Each finding names the values key the field
comes from (found by value in the values document), else the release name.

The rules follow the validation the test bed's API server runs (Kubernetes v1.34.9, the version
testbed/components.py builds; the Go module cache holds the same source):
- k8s.io/apimachinery v0.34.9 pkg/util/validation/validation.go: IsQualifiedName (a label key's
  name part: 63 characters of [A-Za-z0-9_.-], alphanumeric at both ends; an optional prefix that
  is a DNS-1123 subdomain of at most 253), IsValidLabelValue (empty, or a qualified name of 63),
  IsDNS1123Subdomain, IsDNS1123Label, IsDNS1035Label.
- k8s.io/apimachinery v0.34.9 pkg/apis/meta/v1/validation/validation.go: ValidateLabels,
  ValidateLabelSelector / ValidateLabelSelectorRequirement (In/NotIn need values, Exists and
  DoesNotExist take none, any other operator is invalid; every value a label value).
- k8s.io/kubernetes v1.34.9 pkg/apis/core/validation/validation.go: ValidateObjectMeta with each
  kind's name function (Service: NameIsDNS1035Label; Namespace: a DNS-1123 label; the others:
  NameIsDNSSubdomain), ValidateTolerations (a toleration key is a label key; with Equal the value
  is a label value), validateResourceRequirements (a request above its limit is refused; a
  resource whose name has a '/' outside kubernetes.io, or hugepages-*, cannot be overcommitted:
  its request must equal its limit, and a request needs a limit), ValidatePodSpec's nodeSelector
  (ValidateLabels) and serviceAccountName (ValidateServiceAccountName: a DNS subdomain).
- k8s.io/kubernetes v1.34.9 pkg/apis/networking/validation/validation.go: ValidateNetworkPolicyPeer
  (a peer names at least one of podSelector,
  namespaceSelector, ipBlock; ipBlock with another is forbidden) and the selectors of the policy and its peers.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from generator.core.names import DNS_1035_LABEL, DNS_1123_LABEL, DNS_1123_SUBDOMAIN, LABEL_MAX, QUALIFIED_NAME, SUBDOMAIN_MAX
from generator.gke.sizing import parse_quantity
from generator.validate.findings import Finding, error

RELEASE_KEY = "(release name)"
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
POD_KINDS = ("Pod",)
# Kinds whose name ValidateObjectMeta checks with something other than NameIsDNSSubdomain.
DNS_1035_KINDS = ("Service",)
DNS_LABEL_KINDS = ("Namespace",)


# --- the apimachinery checks ---------------------------------------------------------------


def label_key_problem(key: str) -> str:
    """IsQualifiedName: why the API server refuses `key` as a label key (or a toleration key), or ""."""
    prefix, slash, name = key.rpartition("/")
    if key.count("/") > 1:
        return "a key has at most one '/' (prefix/name)"
    if not name or len(name) > LABEL_MAX or not QUALIFIED_NAME.fullmatch(name):
        return "its name part must be 1-63 characters of letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
    if slash and (not prefix or len(prefix) > SUBDOMAIN_MAX or not DNS_1123_SUBDOMAIN.fullmatch(prefix)):
        return "its prefix must be a lowercase DNS subdomain (at most 253 characters)"
    return ""


def label_value_problem(value: Any) -> str:
    """IsValidLabelValue: why the API server refuses `value` as a label value, or ""."""
    text = "" if value is None else str(value)
    if text and (len(text) > LABEL_MAX or not QUALIFIED_NAME.fullmatch(text)):
        return "a label value is at most 63 characters of letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
    return ""


def name_problem(kind: str, name: str) -> str:
    """The name function ValidateObjectMeta applies to a `kind`'s metadata.name, as a reason, or ""."""
    if kind in DNS_1035_KINDS:
        ok, what = len(name) <= LABEL_MAX and DNS_1035_LABEL.fullmatch(name), "a DNS-1035 label (lowercase, a letter first, 63 at most)"
    elif kind in DNS_LABEL_KINDS:
        ok, what = len(name) <= LABEL_MAX and DNS_1123_LABEL.fullmatch(name), "a DNS-1123 label (lowercase, 63 at most)"
    else:
        ok, what = len(name) <= SUBDOMAIN_MAX and DNS_1123_SUBDOMAIN.fullmatch(name), "a lowercase DNS subdomain (253 at most)"
    return "" if ok else f"a {kind} name must be {what}"


def overcommit_allowed(resource: str) -> bool:
    """helper.IsOvercommitAllowed: a native resource (no '/', or in kubernetes.io) that is not hugepages."""
    native = "/" not in resource or "kubernetes.io/" in resource
    return native and not resource.startswith("hugepages-")


# --- tracing a rendered field back to the values --------------------------------------------

_PART = re.compile(r"[^.\[\]]+|\[\d+\]")


def _walk(node: Any, path: str) -> Iterator[tuple[str, Any]]:
    yield path, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk(v, f"{path}.{k}" if path else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{path}[{i}]")


class Tracer:
    """Finds the values key a rendered field comes from, by its value."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values
        self._nodes = [(p, n) for p, n in _walk(values, "") if p]

    def node(self, wanted: Any) -> str | None:
        """The first values key whose subtree equals `wanted`."""
        if wanted in (None, {}, [], ""):
            return None
        return next((p for p, n in self._nodes if n == wanted and not isinstance(n, bool)), None)

    def map_entry(self, key: str, value: Any) -> str | None:
        """The values key `M.key` of the first map M holding key: value."""
        for p, n in self._nodes:
            if isinstance(n, dict) and key in n and str(n[key]) == str(value):
                return f"{p}.{key}"
        return None

    def text(self, text: str) -> str | None:
        """The first values key whose string value is `text` or a part of it (a name built from it)."""
        exact = next((p for p, n in self._nodes if isinstance(n, str) and n == text), None)
        if exact:
            return exact
        for key in ("fullnameOverride", "nameOverride", "serviceAccount.name"):
            v = values_at(self.values, key)
            if isinstance(v, str) and v and v in text:
                return key
        return None


def values_at(values: dict[str, Any], dotted: str) -> Any:
    node: Any = values
    for part in _PART.findall(dotted):
        if part.startswith("["):
            i = int(part[1:-1])
            node = node[i] if isinstance(node, list) and i < len(node) else None
        else:
            node = node.get(part) if isinstance(node, dict) else None
    return node


# --- the rules ------------------------------------------------------------------------------


def mapping(node: Any, *keys: str) -> dict[str, Any]:
    """node[k1][k2]... as a map; {} where a level is missing or not a map."""
    for k in keys:
        node = node.get(k) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def _where(obj: dict[str, Any]) -> str:
    return f"{obj.get('kind', '?')}/{mapping(obj, 'metadata').get('name', '?')}"


def _labels(labels: dict[str, Any], where: str, what: str, t: Tracer) -> Iterator[Finding]:
    for k, v in labels.items():
        if problem := label_key_problem(str(k)):
            key = t.map_entry(str(k), v) or RELEASE_KEY
            yield error(key, f"{what} key {str(k)[:80]!r} in {where}: the API server refuses it: {problem}", "rename the key")
        elif problem := label_value_problem(v):
            key = t.map_entry(str(k), v) or t.text(str(v)) or RELEASE_KEY
            yield error(key, f"{what} {k}={str(v)[:80]!r} in {where}: the API server refuses it: {problem}", "shorten or rewrite the value")


def _selector(sel: Any, where: str, t: Tracer, owner: str | None = None) -> Iterator[Finding]:
    """ValidateLabelSelector on one selector; `owner` is the values key the whole selector comes from."""
    if not isinstance(sel, dict):
        return
    for f in _labels(mapping(sel, "matchLabels"), where, "selector label", t):
        yield f if f.key != RELEASE_KEY or owner is None else error(owner, f.message, f.fix)
    for i, expr in enumerate(sel.get("matchExpressions") or []):
        if not isinstance(expr, dict):
            continue
        key = t.node(expr) or owner or RELEASE_KEY
        op, vals = expr.get("operator"), expr.get("values") or []
        at = f"{where} matchExpressions[{i}]"
        if op not in SELECTOR_OPERATORS:
            yield error(
                key, f"selector operator {op!r} in {at}: not a valid selector operator", f"use one of {', '.join(SELECTOR_OPERATORS)}"
            )
        elif op in ("In", "NotIn") and not vals:
            yield error(key, f"selector operator {op} in {at} needs values", "list the values, or use Exists")
        elif op in ("Exists", "DoesNotExist") and vals:
            yield error(key, f"selector operator {op} in {at} takes no values", "remove the values, or use In")
        if problem := label_key_problem(str(expr.get("key", ""))):
            yield error(key, f"selector key {str(expr.get('key'))[:80]!r} in {at}: {problem}", "use a label key")
        for v in vals:
            if problem := label_value_problem(v):
                yield error(key, f"selector value {str(v)[:80]!r} in {at}: {problem}", "use a label value")


def _names(obj: dict[str, Any], t: Tracer) -> Iterator[Finding]:
    name = str(mapping(obj, "metadata").get("name", ""))
    kind = str(obj.get("kind", ""))
    if kind == "RayCluster":
        return  # KubeRay's stricter rule is rules/names.py's
    if problem := name_problem(kind, name):
        yield error(
            t.text(name) or RELEASE_KEY, f"{kind} name {name[:80]!r}: the API server refuses it: {problem}", "use a shorter, lowercase name"
        )


def _tolerations(spec: dict[str, Any], where: str, t: Tracer) -> Iterator[Finding]:
    for tol in spec.get("tolerations") or []:
        if not isinstance(tol, dict):
            continue
        key = t.node(tol)
        if key is None:
            continue  # the chart's own
        if tol.get("key") and (problem := label_key_problem(str(tol["key"]))):
            fix = (
                "write the taint's key alone: key, value and effect are separate fields"
                if re.search(r"[=:]", str(tol["key"]))
                else "use the taint's key"
            )
            yield error(f"{key}.key", f"toleration key {str(tol['key'])[:80]!r} in {where}: the API server refuses it: {problem}", fix)
        if (tol.get("operator") or "Equal") == "Equal" and (problem := label_value_problem(tol.get("value"))):
            yield error(f"{key}.value", f"toleration value {str(tol.get('value'))[:80]!r} in {where}: {problem}", "use the taint's value")


def _containers(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for field in ("initContainers", "containers"):
        for c in spec.get(field) or []:
            if isinstance(c, dict):
                yield c


def _resources(spec: dict[str, Any], where: str, t: Tracer) -> Iterator[Finding]:
    for c in _containers(spec):
        res = c.get("resources") or {}
        req, lim = mapping(res, "requests"), mapping(res, "limits")
        owner = t.node(res) or t.node(req) or t.node(lim) or RELEASE_KEY
        at = f"container {c.get('name', '?')} of {where}"
        for name in sorted(req):
            try:
                r = parse_quantity(req[name])
                m = parse_quantity(lim[name]) if name in lim else None
            except (ValueError, TypeError):
                continue
            if m is None:
                if not overcommit_allowed(name):
                    yield error(
                        f"{owner}.limits.{name}",
                        f"{name} is requested but has no limit in {at}: it cannot be overcommitted",
                        "set the limit equal to the request",
                    )
            elif not overcommit_allowed(name) and r != m:
                yield error(
                    f"{owner}.limits.{name}",
                    f"{name} request {req[name]} differs from its limit {lim[name]} in {at}: it cannot be overcommitted",
                    "make them equal",
                )
            elif r > m:
                yield error(
                    f"{owner}.limits.{name}",
                    f"limit {lim[name]} is below the request {req[name]} in {at}: the API server refuses a request above its limit",
                    "raise the limit to at least the request",
                )


def _pod_spec(spec: dict[str, Any], where: str, t: Tracer) -> Iterator[Finding]:
    yield from _tolerations(spec, where, t)
    yield from _resources(spec, where, t)
    yield from _labels(mapping(spec, "nodeSelector"), where, "nodeSelector", t)
    sa = spec.get("serviceAccountName")
    if sa and (problem := name_problem("ServiceAccount", str(sa))):
        yield error(
            t.text(str(sa)) or RELEASE_KEY, f"serviceAccountName {str(sa)[:80]!r} in {where}: {problem}", "use a lowercase DNS name"
        )


def _templates(obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every pod template (or pod) of an object: where, and the template's {metadata, spec}."""
    kind, spec = obj.get("kind"), mapping(obj, "spec")
    where = _where(obj)
    if kind in POD_KINDS:
        yield where, obj
    elif kind == "RayCluster":
        yield f"{where} head", mapping(spec, "headGroupSpec", "template")
        for i, g in enumerate(spec.get("workerGroupSpecs") or []):
            yield f"{where} workerGroupSpecs[{i}]", mapping(g, "template")
    elif "template" in spec:
        yield where, mapping(spec, "template")


def _network_policy(obj: dict[str, Any], t: Tracer) -> Iterator[Finding]:
    where, spec = _where(obj), mapping(obj, "spec")
    yield from _selector(spec.get("podSelector"), f"{where} podSelector", t)
    for direction, side in (("ingress", "from"), ("egress", "to")):
        for i, rule in enumerate(spec.get(direction) or []):
            for j, peer in enumerate((rule or {}).get(side) or []):
                if not isinstance(peer, dict):
                    continue
                owner = t.node(peer)
                at = f"{where} {direction}[{i}].{side}[{j}]"
                kinds = [k for k in ("podSelector", "namespaceSelector", "ipBlock") if peer.get(k) is not None]
                if not kinds:
                    yield error(
                        owner or RELEASE_KEY,
                        f"a peer in {at} names nothing: the API server needs podSelector, namespaceSelector or ipBlock",
                        "name a peer, or remove the empty entry",
                    )
                elif "ipBlock" in kinds and len(kinds) > 1:
                    also = " and ".join(k for k in kinds if k != "ipBlock")
                    yield error(
                        owner or RELEASE_KEY,
                        f"a peer in {at} has ipBlock and {also}: the API server forbids ipBlock with another peer",
                        "split it into two peers (list entries): one ipBlock, one selector",
                    )
                for k in ("podSelector", "namespaceSelector"):
                    yield from _selector(peer.get(k), f"{at}.{k}", t, f"{owner}.{k}" if owner else None)


def check(objs: list[dict[str, Any]], values: dict[str, Any]) -> list[Finding]:
    """Every refusal above in `objs`, once per values key."""
    t = Tracer(values)
    out: list[Finding] = []
    for obj in objs:
        if not isinstance(obj, dict):
            continue
        where = _where(obj)
        out += _names(obj, t)
        out += _labels(mapping(obj, "metadata", "labels"), where, "label", t)
        for at, template in _templates(obj):
            out += _labels(mapping(template, "metadata", "labels"), at, "label", t)
            out += _pod_spec(mapping(template, "spec"), at, t)
        if obj.get("kind") == "NetworkPolicy":
            out += _network_policy(obj, t)
        elif obj.get("kind") == "PodDisruptionBudget":
            out += _selector(mapping(obj, "spec").get("selector"), f"{where} selector", t)
    seen: set[str] = set()
    unique = []
    for f in out:
        if f.key not in seen:
            seen.add(f.key)
            unique.append(f)
    return unique
