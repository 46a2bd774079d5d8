"""The live cluster, read through the official `kubernetes` Python client and the user's kubeconfig.

Read-only by construction: `Kube` sends GET requests and two kinds of POST that store nothing: a
SelfSubjectAccessReview, which asks the API server what the caller may do
(https://kubernetes.io/docs/reference/access-authn-authz/authorization/#checking-api-access), and a
create with dryRun=All, which runs every admission step and persists nothing
(https://kubernetes.io/docs/reference/using-api/api-concepts/#dry-run). It has no method that
creates, updates, patches or deletes. The kubeconfig is loaded as kubectl loads
it (KUBECONFIG, its contexts, exec plugins such as gke-gcloud-auth-plugin), and paths are sent as
written: the service proxy's path must reach the Ray dashboard with its slashes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

CONNECT_TIMEOUT_S = 10
READ_TIMEOUT_S = 60
ACCESS_REVIEW = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
DRY_RUN = "All"  # the only value the API accepts: every stage runs, nothing is persisted


class ClusterError(Exception):
    """The cluster cannot be used at all (no kubeconfig, unreachable, refused credentials): one
    line naming the server; exit status 2."""


class ApiError(Exception):
    """The API server answered a read with an error status."""

    def __init__(self, code: int, message: str, path: str) -> None:
        super().__init__(message)
        self.code = code
        self.path = path


class Forbidden(ApiError):
    """403: the caller may not read this; a check says what it could not check."""

    @property
    def permission(self) -> str:
        """The permission the read needed, as RBAC names it: 'list nodes (cluster-scoped)',
        'get customresourcedefinitions.apiextensions.k8s.io rayclusters.ray.io', 'list pods in
        namespace N'. A GET of a collection is RBAC's `list`, of a named object `get`
        (https://kubernetes.io/docs/reference/access-authn-authz/authorization/#determine-the-request-verb)."""
        return permission_of(self.path)


def permission_of(path: str) -> str:
    """The RBAC verb, resource and scope of a GET of an API path (/api/v1/... or /apis/GROUP/VERSION/...)."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if parts[:1] == ["api"]:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        return f"get {path} (a non-resource URL)"
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest:
        return f"get {path}"
    resource = f"{rest[0]}.{group}" if group else rest[0]
    if len(rest) >= 3:  # a subresource, e.g. services/NAME/proxy
        resource = f"{resource}/{rest[2]}"
    what = f"get {resource} {rest[1]}" if len(rest) >= 2 else f"list {resource}"
    return f"{what} in namespace {namespace}" if namespace else f"{what} (cluster-scoped)"


@dataclass
class Kube:
    server: str
    context: str
    namespace: str  # the context's namespace, or the one asked for
    client: Any  # kubernetes.client.ApiClient
    _cache: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = field(default_factory=dict)

    # --- reads ------------------------------------------------------------------------------

    def get(self, path: str, **query: str) -> dict[str, Any] | None:
        """One object (or any JSON answer); None when it does not exist (404)."""
        try:
            return json.loads(self._call("GET", path, query))
        except ApiError as e:
            if e.code == 404:
                return None
            raise

    def items(self, path: str, labels: str = "", fields: str = "") -> list[dict[str, Any]]:
        """A collection's items, with optional label and field selectors. Cached per run: several
        checks read the nodes."""
        query = {k: v for k, v in (("labelSelector", labels), ("fieldSelector", fields)) if v}
        key = (path, tuple(sorted(query.items())))
        if key not in self._cache:
            self._cache[key] = (json.loads(self._call("GET", path, query)) or {}).get("items") or []
        return self._cache[key]

    def text(self, path: str, **query: str) -> str:
        """A non-JSON answer, e.g. a server's through the service proxy."""
        return self._call("GET", path, query)

    def may(self, verb: str, group: str, resource: str, *, namespace: str = "", name: str = "", subresource: str = "") -> bool:
        """Whether the caller may do this (a SelfSubjectAccessReview: a question, not a write)."""
        attrs = {"verb": verb, "group": group, "resource": resource, "namespace": namespace, "name": name, "subresource": subresource}
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {k: v for k, v in attrs.items() if v}},
        }
        answer = json.loads(self._call("POST", ACCESS_REVIEW, {}, body))
        return bool((answer.get("status") or {}).get("allowed"))

    def dry_run_create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST `body` to the collection at `path` as a server-side dry run: the API server validates
        and admits it (webhooks, Pod Security, quotas, LimitRanges) and stores nothing. Strict field
        validation, as Helm 4 creates objects. The admitted object; ApiError when refused."""
        return json.loads(self._call("POST", path, {"dryRun": DRY_RUN, "fieldValidation": "Strict"}, body))

    def version(self) -> dict[str, Any]:
        """The server's version; {} when it will not say (it answered: it is reachable)."""
        try:
            return self.get("/version") or {}
        except (ApiError, ValueError):
            return {}

    # --- transport --------------------------------------------------------------------------

    def _call(self, method: str, path: str, query: dict[str, str], body: Any = None) -> str:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError as Urllib3Error

        headers = {"Accept": "application/json, */*"} | ({"Content-Type": "application/json"} if body is not None else {})
        try:
            request = self.client.param_serialize(
                method, path, query_params=list(query.items()) or None, header_params=headers, body=body, auth_settings=["BearerToken"]
            )
            response = self.client.call_api(*request, _request_timeout=(CONNECT_TIMEOUT_S, READ_TIMEOUT_S))
            response.read()
        except ApiException as e:  # the client's TLS failures come as status 0
            raise ClusterError(f"cannot reach the Kubernetes API server at {self.server} (context {self.context}): {_reason(e)}") from None
        except (Urllib3Error, OSError) as e:
            raise ClusterError(f"cannot reach the Kubernetes API server at {self.server} (context {self.context}): {_reason(e)}") from None
        text = (response.data or b"").decode("utf-8", "replace")
        if not 200 <= response.status <= 299:
            raise self._refused(response.status, text, path)
        return text

    def _refused(self, code: int, text: str, path: str) -> Exception:
        message = _status_message(code, text)
        if code == 401:
            return ClusterError(
                f"the Kubernetes API server at {self.server} refused the credentials of context {self.context} (401 Unauthorized): "
                "renew them, e.g. gcloud container clusters get-credentials CLUSTER --location LOCATION"
            )
        if code == 403:
            return Forbidden(403, message, path)
        return ApiError(code, message, path)


def _status_message(code: int, text: str) -> str:
    """The message of the API server's Status object, else the answer's first line."""
    try:
        doc = json.loads(text)
        if isinstance(doc, dict) and doc.get("message"):
            return str(doc["message"])
    except ValueError:
        pass
    return text.strip().splitlines()[0][:300] if text.strip() else f"HTTP {code}"


def _reason(e: BaseException) -> str:
    """The innermost cause of a connection failure, in one line."""
    text = str(getattr(e, "reason", None) or e)
    if "Connection refused" in text:
        return "connection refused"
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return "its TLS certificate is not signed by the kubeconfig's certificate authority"
    if "timed out" in text.lower():
        return "timed out"
    return text.splitlines()[0][:200]


def connect(kubeconfig: str | None, context: str | None, namespace: str | None) -> Kube:
    """A client for the chosen context of the kubeconfig (KUBECONFIG or ~/.kube/config by default)."""
    from kubernetes import client, config

    try:
        contexts, current = config.list_kube_config_contexts(kubeconfig)
        chosen = next((c for c in contexts if c.get("name") == context), None) if context else current
        if context and chosen is None:
            names = ", ".join(c.get("name", "?") for c in contexts) or "none"
            raise ClusterError(f"kubeconfig has no context {context!r} (it has: {names})")
        configuration = client.Configuration()
        config.load_kube_config(kubeconfig, context, client_configuration=configuration, persist_config=False)
    except ClusterError:
        raise
    except Exception as e:  # ConfigException, a missing or unreadable file, a failing exec plugin
        where = kubeconfig or "the default kubeconfig (KUBECONFIG or ~/.kube/config)"
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ClusterError(
            f"cannot load {where}: {first}; get one with: gcloud container clusters get-credentials CLUSTER --location LOCATION"
        ) from None
    configuration.retries = 1  # one retry, then the one-line error (urllib3's default is 3)
    name = (chosen or {}).get("name", "?")
    ns = namespace or ((chosen or {}).get("context") or {}).get("namespace") or "default"
    return Kube(server=configuration.host, context=name, namespace=ns, client=client.ApiClient(configuration))


def add_cluster_arguments(p: Any) -> None:
    """--kubeconfig, --context, --namespace, as kubectl takes them."""
    p.add_argument("--kubeconfig", default=None, metavar="PATH", help="kubeconfig file (default: KUBECONFIG, else ~/.kube/config)")
    p.add_argument("--context", default=None, metavar="C", help="kubeconfig context (default: its current context)")
    p.add_argument("-n", "--namespace", default=None, metavar="N", help="the release's namespace (default: the context's, else default)")
