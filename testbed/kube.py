"""What the test bed asks of its API servers, through the official `kubernetes` client: apply
objects server-side (as `kubectl apply --server-side` does: CRDs exceed client-side apply's
annotation limit), wait for conditions, and request service-account tokens (TokenRequest)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError

FIELD_MANAGER = "nemo-rl-gke-testbed"


def api_client(kubeconfig: Path, context: str | None = None) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(kubeconfig), context=context)


class Kube:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self._dynamic: DynamicClient | None = None

    @property
    def dynamic(self) -> DynamicClient:
        if self._dynamic is None:
            self._dynamic = DynamicClient(self.api)
        return self._dynamic

    def refresh(self) -> None:
        """Forget what discovery found (after CRDs were added)."""
        self._dynamic = None

    def resource(self, api_version: str, kind: str):
        return self.dynamic.resources.get(api_version=api_version, kind=kind)

    def apply(self, obj: dict[str, Any]) -> Any:
        res = self.resource(obj["apiVersion"], obj["kind"])
        ns = obj.get("metadata", {}).get("namespace") if res.namespaced else None
        return res.server_side_apply(body=obj, namespace=ns, field_manager=FIELD_MANAGER, force_conflicts=True)

    def apply_all(self, objs: Iterable[dict[str, Any]]) -> None:
        for obj in objs:
            self.apply(obj)

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        try:
            return self.resource(api_version, kind).get(name=name, namespace=namespace).to_dict()
        except NotFoundError:
            return None

    def list(self, api_version: str, kind: str, namespace: str | None = None, **selectors: str) -> list[dict[str, Any]]:
        found = self.resource(api_version, kind).get(namespace=namespace, **selectors)
        return [item.to_dict() for item in found.items]

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        with contextlib.suppress(NotFoundError):
            self.resource(api_version, kind).delete(name=name, namespace=namespace)

    def token(self, service_account: str, namespace: str, seconds: int = 3600) -> str:
        """A token of a service account from the TokenRequest API, as the kubelet projects one."""
        body = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=seconds))
        out = client.CoreV1Api(self.api).create_namespaced_service_account_token(service_account, namespace, body)
        return out.status.token


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 120, interval_s: float = 0.2) -> Any:
    """check()'s first truthy answer; an error naming `what` after timeout_s (exceptions count as no)."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while True:
        try:
            got = check()
            if got:
                return got
        except Exception as e:
            last = e
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s:.0f} s" + (f" (last error: {last})" if last else ""))
        time.sleep(interval_s)


def crd_established(kube: Kube, name: str) -> bool:
    crd = kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)
    conds = (crd or {}).get("status", {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conds)
