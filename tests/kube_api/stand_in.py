"""A stand-in for the Kubernetes API server, for what the test bed's real one cannot serve: a
Kubernetes API that a live local Ray cluster sits behind. The test bed's pods run no Ray and its
Services have no endpoints (pod addresses are loopback), so the real service proxy answers 503;
and the launcher's GPU release is followed on a local Ray cluster whose nodes a small reconciler
adds and removes as KubeRay would.

What it serves: HTTPS on 127.0.0.1 with a self-signed CA, bearer-token authentication, a Role's
rules in one namespace (rbac.py), GET of the namespaced objects it holds (one, or a LIST with
label and field selectors), merge-patch and JSON-patch, and the service proxy
(`/api/v1/namespaces/N/services/[http:]NAME[:PORT]/proxy/PATH`, forwarded to a real local server
such as a Ray head's dashboard). It records every request, so a test can check what was asked of
it, and answers as the real API server does: a `Status` object with 400, 401, 403, 404, 405, 415,
422 or 503.

A pod reaches it the way a pod reaches the real one: KUBERNETES_SERVICE_HOST/PORT in the
environment and a service-account folder holding `token`, `ca.crt` and `namespace`
(`pod_environment`). A user's tools reach it through a kubeconfig file (`kubeconfig`), as the
official `kubernetes` client loads it.
"""

from __future__ import annotations

import base64
import copy
import datetime
import ipaddress
import json
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import jsonpatch
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.kube_api.rbac import VERBS, Attributes, forbidden, qualified, rule_allows, status
from tests.kube_api.selectors import fields_match, labels_match

__all__ = ["KINDS", "TOKEN", "ApiStandIn", "Raw", "Request", "Target", "merge_patch", "status"]

TOKEN = "stand-in-service-account-token"  # noqa: S105 - a test credential, valid only here

# The kinds the stand-in knows, all namespaced, by resource (plural) -> (group, kind): what status
# reads of a release and what the launcher patches.
KINDS: dict[str, tuple[str, str]] = {
    "rayclusters": ("ray.io", "RayCluster"),
    "pods": ("", "Pod"),
    "configmaps": ("", "ConfigMap"),
    "services": ("", "Service"),
    "events": ("", "Event"),
    "jobs": ("batch", "Job"),
}
BUILT_IN_GROUPS = {"", "batch"}  # the API server leaves kind and apiVersion out of these LIST items


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str
    body: Any
    authorized: bool  # the bearer token was the stand-in's


@dataclass(frozen=True)
class Raw:
    """An answer that is not JSON (a proxied server's)."""

    data: bytes
    content_type: str


@dataclass(frozen=True)
class Target:
    """What a request path names: /api/v1/[namespaces/N/]R[/NAME[/SUB[/REST...]]] or the same
    under /apis/G/V/. `namespace` is "" at the cluster scope; `name` is "" for a collection."""

    group: str
    version: str
    namespace: str
    resource: str
    name: str = ""
    subresource: str = ""
    rest: str = ""  # what follows a proxy subresource

    @classmethod
    def parse(cls, path: str) -> Target | None:
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        namespace = ""
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or not rest[0]:
            return None
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        tail = "/".join(rest[3:]) + ("/" if len(rest) > 3 and path.endswith("/") else "")  # a proxied path keeps its slash
        return cls(group, version, namespace, rest[0], name, sub, tail)

    @property
    def rbac_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


@dataclass
class ApiStandIn:
    """Start with `with ApiStandIn(folder, rules=...) as api:`; objects by `api.put(obj)`.

    `rules`: a Role's rules in `namespace`, bound to the service account (the identity of every
    request bearing its token, a pod's or a kubeconfig's)."""

    folder: Path
    rules: list[dict[str, Any]] = field(default_factory=list)
    namespace: str = "default"
    service_account: str = "launcher"
    on_patch: Callable[[dict[str, Any], dict[str, Any]], None] | None = None  # (before, after)
    proxies: dict[tuple[str, str], str] = field(default_factory=dict)  # (namespace, service[:port]) -> URL
    requests: list[Request] = field(default_factory=list)
    objects: dict[tuple[str, str, str, str], dict[str, Any]] = field(default_factory=dict)
    _server: ThreadingHTTPServer | None = None
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _version: int = 1000

    # --- objects ------------------------------------------------------------------------

    def put(self, obj: dict[str, Any]) -> None:
        group = obj["apiVersion"].rpartition("/")[0]
        resource = next(r for r, (g, k) in KINDS.items() if g == group and k == obj["kind"])
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", self.namespace)
        meta.setdefault("generation", 1)
        meta.setdefault("uid", f"uid-{resource}-{meta['name']}")
        meta["resourceVersion"] = self._next_version()
        self.objects[(group, meta["namespace"], resource, meta["name"])] = obj

    def _key(self, resource: str, name: str, namespace: str | None) -> tuple[str, str, str, str]:
        return (KINDS[resource][0], namespace or self.namespace, resource, name)

    def set_status(self, resource: str, name: str, status: dict[str, Any], namespace: str | None = None) -> None:
        """What a controller reports (the status subresource): replaces the object's status."""
        with self._lock:
            obj = self.objects[self._key(resource, name, namespace)]
            obj["status"] = copy.deepcopy(status)
            obj["metadata"]["resourceVersion"] = self._next_version()

    def get(self, resource: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        return copy.deepcopy(self.objects[self._key(resource, name, namespace)])

    def writes(self) -> list[Request]:
        """Every request that could change the cluster."""
        return [r for r in self.requests if r.method not in ("GET", "HEAD")]

    def _next_version(self) -> str:
        self._version += 1
        return str(self._version)

    # --- the pod's and the user's view --------------------------------------------------

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.server_address[1]

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def service_account_dir(self) -> Path:
        return self.folder / "serviceaccount"

    @property
    def identity(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"

    def pod_environment(self) -> dict[str, str]:
        return {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(self.port)}

    def kubeconfig(self, path: Path) -> Path:
        """A kubeconfig file as `gcloud container clusters get-credentials` writes one (server, CA
        data, user), with the service account's token instead of the gcloud auth plugin, and the
        stand-in's namespace as its context's."""
        ca = base64.b64encode((self.service_account_dir / "ca.crt").read_bytes()).decode()
        context = {"cluster": "stand-in-cluster", "user": "stand-in-user", "namespace": self.namespace}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "stand-in-cluster", "cluster": {"server": self.server, "certificate-authority-data": ca}}],
            "users": [{"name": "stand-in-user", "user": {"token": TOKEN}}],
            "contexts": [{"name": "stand-in", "context": context}],
            "current-context": "stand-in",
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        return path

    # --- server -------------------------------------------------------------------------

    def __enter__(self) -> ApiStandIn:
        sa = self.service_account_dir
        sa.mkdir(parents=True, exist_ok=True)
        cert, key, ca = _certificates()
        (sa / "ca.crt").write_bytes(ca)
        (sa / "token").write_text(TOKEN)
        (sa / "namespace").write_text(self.namespace)
        (self.folder / "server.crt").write_bytes(cert)
        (self.folder / "server.key").write_bytes(key)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.folder / "server.crt", self.folder / "server.key")
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        threading.Thread(target=self._server.serve_forever, name="api-stand-in", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()

    # --- the API ------------------------------------------------------------------------

    def answer(self, request: Request) -> tuple[int, dict[str, Any] | Raw]:
        with self._lock:
            self.requests.append(request)
            if not request.authorized:
                return 401, status(401, "Unauthorized", "Unauthorized")
            target = Target.parse(request.path)
            if target is None or target.resource not in KINDS or KINDS[target.resource][0] != target.group:
                return 404, status(404, "NotFound", "the server could not find the requested resource")
            return self._resource(request, target)

    def _allowed(self, attrs: Attributes) -> bool:
        return attrs.namespace == self.namespace and any(rule_allows(r, attrs) for r in self.rules)

    def _resource(self, request: Request, target: Target) -> tuple[int, dict[str, Any] | Raw]:
        verb = VERBS.get(request.method, "") if request.method != "GET" else ("get" if target.name else "list")
        attrs = Attributes(verb, target.group, target.rbac_resource, target.namespace, target.name)
        if not self._allowed(attrs):
            return 403, forbidden(attrs, self.identity)
        if verb == "list":
            try:
                return 200, self._list(target, request.query)
            except ValueError as e:
                return 400, status(400, "BadRequest", str(e))
        proxied = target.subresource == "proxy" and target.resource == "services"
        service, port = _service_port(target.name) if proxied else (target.name, "")
        key = (target.group, target.namespace, target.resource, service)
        if key not in self.objects:
            return 404, status(404, "NotFound", f'{qualified(target.group, target.resource)} "{service}" not found')
        if proxied:
            return self._proxy(target, service, port, request.query)
        if target.subresource:
            return 404, status(404, "NotFound", f"the stand-in does not serve the {target.subresource} subresource")
        if verb == "get":
            return 200, copy.deepcopy(self.objects[key])
        if verb == "patch":
            return self._patch(key, request)
        return 405, status(405, "MethodNotAllowed", f"the stand-in does not serve {request.method}")

    def _list(self, target: Target, query: dict[str, list[str]]) -> dict[str, Any]:
        labels = (query.get("labelSelector") or [""])[0]
        fields = (query.get("fieldSelector") or [""])[0]
        group, kind = KINDS[target.resource]
        items = []
        for (g, ns, res, _name), obj in sorted(self.objects.items()):
            if g != target.group or res != target.resource or (target.namespace and ns != target.namespace):
                continue
            if (labels and not labels_match(labels, obj)) or (fields and not fields_match(fields, obj)):
                continue
            item = copy.deepcopy(obj)
            if group in BUILT_IN_GROUPS:  # the API server leaves kind and apiVersion out of built-in items
                item.pop("kind", None)
                item.pop("apiVersion", None)
            items.append(item)
        api_version = f"{group}/{target.version}" if group else target.version
        return {"kind": f"{kind}List", "apiVersion": api_version, "metadata": {"resourceVersion": str(self._version)}, "items": items}

    def _proxy(self, target: Target, service: str, port: str, query: dict[str, list[str]]) -> tuple[int, dict[str, Any] | Raw]:
        """GET through the service proxy to the server registered for (namespace, service[:port])."""
        upstream = self.proxies.get((target.namespace, f"{service}:{port}" if port else service))
        if upstream is None:  # the real API server's words (it names the Service, not the proxy's target)
            return 503, status(503, "ServiceUnavailable", f'no endpoints available for service "{service}"')
        url = f"{upstream.rstrip('/')}/{target.rest}"
        if query:
            url += "?" + "&".join(f"{k}={v}" for k, vs in query.items() for v in vs)
        try:
            with urllib.request.urlopen(url, timeout=30) as r:  # noqa: S310 - a local test server
                return r.status, Raw(r.read(), r.headers.get("Content-Type", "application/octet-stream"))
        except urllib.error.HTTPError as e:
            return e.code, Raw(e.read(), e.headers.get("Content-Type", "text/plain"))
        except OSError as e:
            return 503, status(503, "ServiceUnavailable", f"error trying to reach service: {e}")

    def _patch(self, key: tuple[str, str, str, str], request: Request) -> tuple[int, dict[str, Any] | Raw]:
        before = self.objects[key]
        try:
            if request.content_type == "application/json-patch+json":
                after = jsonpatch.apply_patch(before, request.body)
            elif request.content_type == "application/merge-patch+json":
                after = merge_patch(before, request.body)
            else:
                accepted = "application/json-patch+json, application/merge-patch+json"
                message = f"the body of the request was in an unknown format - accepted media types include: {accepted}"
                return 415, status(415, "UnsupportedMediaType", message)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
            return 422, status(422, "Invalid", f"the server rejected our request due to an error in our request: {e}")
        after["metadata"]["resourceVersion"] = self._next_version()
        if after.get("spec") != before.get("spec"):
            after["metadata"]["generation"] = before["metadata"].get("generation", 1) + 1
        self.objects[key] = after
        if self.on_patch is not None:
            self.on_patch(copy.deepcopy(before), copy.deepcopy(after))
        return 200, copy.deepcopy(after)


def _service_port(name: str) -> tuple[str, str]:
    """A service proxy's name, [scheme:]service[:port], as (service, port)."""
    parts = name.split(":")
    if parts[0] in ("http", "https") and len(parts) > 1:
        parts = parts[1:]
    return parts[0], parts[1] if len(parts) > 1 else ""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def _handler(api: ApiStandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            url = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            request = Request(
                self.command,
                url.path,
                parse_qs(url.query),
                (self.headers.get("Content-Type") or "").split(";")[0].strip(),
                body,
                self.headers.get("Authorization") == f"Bearer {TOKEN}",
            )
            code, answer = api.answer(request)
            if isinstance(answer, Raw):
                data, content_type = answer.data, answer.content_type
            else:
                data, content_type = json.dumps(answer).encode(), "application/json"
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PATCH = do_PUT = do_POST = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


def _certificates() -> tuple[bytes, bytes, bytes]:
    """(server certificate, its key, the CA certificate), PEM; the server's for 127.0.0.1."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "stand-in-kubernetes-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return cert.public_bytes(pem), key_pem, ca.public_bytes(pem)
