"""A stand-in for the Kubernetes API server, for what cannot run here: HTTPS on 127.0.0.1 with a
self-signed CA, bearer-token authentication, RBAC decided by Role rules (the chart's own, taken
from the rendered Role), and GET, merge-patch and JSON-patch on the objects it holds. It records
every request, so a test can check what was asked of it, and answers as the real API server does:
a `Status` object with 401, 403, 404, 409, 415 or 422.

A pod reaches it the way a pod reaches the real one: KUBERNETES_SERVICE_HOST/PORT in the
environment and a service-account folder holding `token`, `ca.crt` and `namespace`
(`pod_environment`).
"""

from __future__ import annotations

import copy
import datetime
import ipaddress
import json
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonpatch
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

TOKEN = "stand-in-service-account-token"  # noqa: S105 - a test credential, valid only here

# Built-in kinds the stand-in knows, by resource (plural) -> (group, kind); custom ones too.
KINDS: dict[str, tuple[str, str]] = {
    "rayclusters": ("ray.io", "RayCluster"),
    "rayjobs": ("ray.io", "RayJob"),
    "pods": ("", "Pod"),
    "secrets": ("", "Secret"),
    "configmaps": ("", "ConfigMap"),
    "workloads": ("kueue.x-k8s.io", "Workload"),
}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str
    body: Any
    authorized: bool  # the bearer token was the service account's


@dataclass(frozen=True)
class Target:
    """What a request path names: /api/v1/namespaces/N/R/NAME or /apis/G/V/namespaces/N/R/NAME."""

    group: str
    version: str
    namespace: str
    resource: str
    name: str

    @classmethod
    def parse(cls, path: str) -> Target | None:
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        if len(rest) == 4 and rest[0] == "namespaces":
            return cls(group, version, rest[1], rest[2], rest[3])
        return None


def rule_allows(rule: dict[str, Any], verb: str, target: Target) -> bool:
    """One RBAC PolicyRule, as the API server's RBAC authorizer reads it."""

    def has(key: str, value: str) -> bool:
        values = rule.get(key) or []
        return "*" in values or value in values

    names = rule.get("resourceNames") or []
    named = not names or target.name in names
    return has("apiGroups", target.group) and has("resources", target.resource) and has("verbs", verb) and named


@dataclass
class ApiStandIn:
    """Start with `with ApiStandIn(folder, rules=...) as api:`; objects by `api.put(obj)`."""

    folder: Path
    rules: list[dict[str, Any]] = field(default_factory=list)
    namespace: str = "default"
    service_account: str = "launcher"
    on_patch: Callable[[dict[str, Any], dict[str, Any]], None] | None = None  # (before, after)
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
        meta["resourceVersion"] = self._next_version()
        self.objects[(group, meta["namespace"], resource, meta["name"])] = obj

    def set_status(self, resource: str, name: str, status: dict[str, Any], namespace: str | None = None) -> None:
        """What a controller reports (the status subresource): replaces the object's status."""
        with self._lock:
            obj = self.objects[(KINDS[resource][0], namespace or self.namespace, resource, name)]
            obj["status"] = copy.deepcopy(status)
            obj["metadata"]["resourceVersion"] = self._next_version()

    def get(self, resource: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        group = KINDS[resource][0]
        return copy.deepcopy(self.objects[(group, namespace or self.namespace, resource, name)])

    def writes(self) -> list[Request]:
        return [r for r in self.requests if r.method not in ("GET", "HEAD")]

    def _next_version(self) -> str:
        self._version += 1
        return str(self._version)

    # --- the pod's view -----------------------------------------------------------------

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.server_address[1]

    @property
    def service_account_dir(self) -> Path:
        return self.folder / "serviceaccount"

    def pod_environment(self) -> dict[str, str]:
        return {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(self.port)}

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

    def answer(self, request: Request) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append(request)
            if not request.authorized:
                return 401, status(401, "Unauthorized", "Unauthorized")
            target = Target.parse(request.path)
            if target is None:
                return 404, status(404, "NotFound", f"the server could not find the requested resource ({request.path})")
            verb = {"GET": "get", "PATCH": "patch", "PUT": "update", "DELETE": "delete", "POST": "create"}.get(request.method, "")
            if not any(rule_allows(r, verb, target) for r in self.rules):
                return 403, forbidden(verb, target, f"system:serviceaccount:{self.namespace}:{self.service_account}")
            key = (target.group, target.namespace, target.resource, target.name)
            if key not in self.objects:
                return 404, status(404, "NotFound", f'{_qualified(target)} "{target.name}" not found')
            if verb == "get":
                return 200, copy.deepcopy(self.objects[key])
            if verb == "patch":
                return self._patch(key, request)
            return 405, status(405, "MethodNotAllowed", f"the stand-in does not serve {request.method}")

    def _patch(self, key: tuple[str, str, str, str], request: Request) -> tuple[int, dict[str, Any]]:
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


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code}


def _qualified(target: Target) -> str:
    return f"{target.resource}.{target.group}" if target.group else target.resource


def forbidden(verb: str, target: Target, user: str) -> dict[str, Any]:
    group = f'"{target.group}"' if target.group else '""'
    message = (
        f'{_qualified(target)} "{target.name}" is forbidden: User "{user}" cannot {verb} resource "{target.resource}" '
        f'in API group {group} in the namespace "{target.namespace}"'
    )
    out = status(403, "Forbidden", message)
    out["details"] = {"name": target.name, "group": target.group, "kind": target.resource}
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
            data = json.dumps(answer).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
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
