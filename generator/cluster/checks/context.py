"""What every check reads: the cluster (read-only) and the release as the chart renders it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from generator.cluster.kube import Kube
from generator.cluster.release import Rendered

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"


@dataclass
class Context:
    kube: Kube
    rendered: Rendered

    @property
    def values(self) -> dict[str, Any]:
        return self.rendered.values

    @property
    def namespace(self) -> str:
        return self.rendered.namespace

    @property
    def release(self) -> str:
        return self.rendered.release

    def value(self, dotted: str, default: Any = None) -> Any:
        node: Any = self.values
        for part in dotted.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        return default if node is None else node

    def crd(self, name: str) -> dict[str, Any] | None:
        return self.kube.get(f"{CRDS}/{name}")

    def served_version(self, name: str) -> str | None:
        """The version a CRD stores (else the first it serves); None without the CRD."""
        crd = self.crd(name)
        if crd is None:
            return None
        versions = [v for v in crd["spec"].get("versions") or [] if v.get("served", True)]
        stored = next((v for v in versions if v.get("storage")), versions[0] if versions else None)
        return stored["name"] if stored else None

    def taken(self, path: str) -> str:
        """Who holds the object at `path` when it exists and is not this release's (Helm would
        refuse to create or adopt it): "release NS/NAME" or "no Helm release"; "" when it is free."""
        obj = self.kube.get(path)
        if obj is None or (owner := helm_owner(obj)) == (self.namespace, self.release):
            return ""
        return f"release {owner[0]}/{owner[1]}" if owner else "no Helm release"

    def gpu_nodes(self) -> list[dict[str, Any]]:
        """The nodes of the values' accelerator (cloud.google.com/gke-accelerator)."""
        return self.kube.items("/api/v1/nodes", labels=f"{ACCELERATOR_LABEL}={self.value('accelerator.nodeLabel', '')}")


def labels(obj: dict[str, Any]) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def annotations(obj: dict[str, Any]) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def helm_owner(obj: dict[str, Any]) -> tuple[str, str] | None:
    """(namespace, release) of the Helm release that owns an object, from the metadata Helm checks
    before it adopts an existing object (label app.kubernetes.io/managed-by=Helm, annotations
    meta.helm.sh/release-name and meta.helm.sh/release-namespace); None when Helm does not own it."""
    a = annotations(obj)
    if labels(obj).get("app.kubernetes.io/managed-by") != "Helm" or "meta.helm.sh/release-name" not in a:
        return None
    return a.get("meta.helm.sh/release-namespace", ""), a["meta.helm.sh/release-name"]


def listed(names: list[str], most: int = 4) -> str:
    """'a, b, c and 2 more'."""
    shown = ", ".join(names[:most])
    return f"{shown} and {len(names) - most} more" if len(names) > most else shown
