"""The Kubernetes API as a pod reaches it, with the standard library only (the launcher runs in
the NeMo RL image, which carries no Kubernetes client).

The pod's service-account token, CA and namespace are files in the service-account folder
(/var/run/secrets/kubernetes.io/serviceaccount), and the API server's address is in
KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT: the in-cluster configuration every
Kubernetes client reads. TLS is verified against that CA; the token is read again for every
request (the kubelet rotates projected tokens) and never logged.
"""

from __future__ import annotations

import json
import os
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
FIELD_MANAGER = "nemo-rl-gke-launcher"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
RETRIES = 4  # a restarting API server (5xx, refused connections) is tried this many times


class KubeError(Exception):
    """The API server refused a request (code is its HTTP status; 0: it could not be reached)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class KubeApi:
    """GET and PATCH on namespaced objects, as the pod's service account."""

    def __init__(self, sa_dir: str = SERVICE_ACCOUNT_DIR, environ: Mapping[str, str] = os.environ) -> None:
        host, port = environ.get("KUBERNETES_SERVICE_HOST", ""), environ.get("KUBERNETES_SERVICE_PORT", "")
        if not host or not port:
            raise KubeError(0, "KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not set: not running in a pod")
        self.base = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
        self.token_file = os.path.join(sa_dir, "token")
        ca = os.path.join(sa_dir, "ca.crt")
        if not os.path.isfile(self.token_file) or not os.path.isfile(ca):
            raise KubeError(0, f"no service-account token in {sa_dir}: the pod mounts none (automountServiceAccountToken)")
        self.context = ssl.create_default_context(cafile=ca)

    def get(self, path: str) -> dict[str, Any]:
        return self.request("GET", path)

    def patch(self, path: str, body: Any, content_type: str) -> dict[str, Any]:
        return self.request("PATCH", f"{path}?fieldManager={FIELD_MANAGER}", body, content_type)

    def request(self, method: str, path: str, body: Any = None, content_type: str = "") -> dict[str, Any]:
        for attempt in range(RETRIES):
            try:
                return self._once(method, path, body, content_type)
            except KubeError as e:
                if (e.code and e.code < 500) or attempt == RETRIES - 1:
                    raise
                time.sleep(2**attempt)
        raise AssertionError("unreachable")

    def _once(self, method: str, path: str, body: Any, content_type: str) -> dict[str, Any]:
        with open(self.token_file, encoding="utf-8") as f:
            token = f.read().strip()
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)  # noqa: S310 - https to the API server
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=30) as r:  # noqa: S310 - https to the API server
                return json.loads(r.read(1 << 24))
        except urllib.error.HTTPError as e:
            raise KubeError(e.code, _status_message(e)) from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise KubeError(0, f"cannot reach the Kubernetes API at {self.base}: {getattr(e, 'reason', e)}") from None


def _status_message(e: urllib.error.HTTPError) -> str:
    """The API server's own message (a Status object), else the HTTP reason."""
    try:
        status = json.loads(e.read(1 << 16))
        return str(status.get("message") or e.reason)
    except (ValueError, AttributeError, OSError):
        return f"HTTP {e.code} {e.reason}"
