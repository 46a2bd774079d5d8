"""What the cluster lane's tests do with the test bed: namespaces as the infra script makes them,
releases installed, upgraded and uninstalled with the pinned Helm binaries, and waits on the
cluster's state (never fixed sleeps)."""

from __future__ import annotations

import itertools
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from generator.core.paths import ROOT
from generator.helm.runner import Helm, helm_env
from generator.infra.steps import NAMESPACE_LABELS
from testbed.bed import Cluster
from testbed.kube import Kube, wait_for

CHART = ROOT / "charts" / "nemo-rl-gke"
RAY = "ray.io/v1"
_names = itertools.count(1)


def needs_dra(values: Path) -> bool:
    doc = yaml.safe_load(values.read_text()) or {}
    return bool(doc.get("accelerator", {}).get("computeDomain")) or doc.get("network", {}).get("mode") == "dranet"


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


def namespace(kube: Kube, name: str, labels: dict[str, str] | None = None) -> str:
    """A namespace labelled as the infra script labels the release's (or with `labels`)."""
    meta = {"name": name, "labels": NAMESPACE_LABELS if labels is None else labels}
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
    wait_for(f"ServiceAccount default in {name}", lambda: kube.get("v1", "ServiceAccount", "default", name))
    return name


@dataclass
class Release:
    helm: Helm
    cluster: Cluster
    name: str
    namespace: str

    def _run(self, args: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.helm.path), *args, "--kubeconfig", self.cluster.kubeconfig, "--namespace", self.namespace]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=helm_env(), check=False, timeout=300)
        if check and proc.returncode != 0:
            raise AssertionError(f"helm {self.helm.version} {args[0]} {self.name}: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc

    def install(self, values: Sequence[Path] = (), sets: Sequence[str] = (), check: bool = True) -> subprocess.CompletedProcess[str]:
        return self._run(["install", self.name, str(CHART), *_values_args(values, sets)], check)

    def upgrade(self, values: Sequence[Path] = (), sets: Sequence[str] = (), check: bool = True) -> subprocess.CompletedProcess[str]:
        return self._run(["upgrade", self.name, str(CHART), *_values_args(values, sets)], check)

    def uninstall(self, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self._run(["uninstall", self.name, "--wait", "--timeout", "120s"], check)

    def revision(self) -> int:
        out = self._run(["history", self.name, "--max", "1", "-o", "json"]).stdout
        import json

        return int(json.loads(out)[-1]["revision"])


def _values_args(values: Sequence[Path], sets: Sequence[str]) -> list[str]:
    args: list[str] = []
    for v in values:
        args += ["-f", str(v)]
    for s in sets:
        args += ["--set", s]
    return args


def raycluster(kube: Kube, name: str, namespace: str) -> dict[str, Any] | None:
    return kube.get(RAY, "RayCluster", name, namespace)


def ray_pods(kube: Kube, cluster: str, namespace: str) -> list[dict[str, Any]]:
    return kube.list("v1", "Pod", namespace, label_selector=f"ray.io/cluster={cluster}")


def wait_ready(kube: Kube, name: str, namespace: str, timeout_s: float = 180) -> dict[str, Any]:
    """The RayCluster once KubeRay reports it `ready`."""

    def ready() -> dict[str, Any] | None:
        rc = raycluster(kube, name, namespace)
        return rc if rc and (rc.get("status") or {}).get("state") == "ready" else None

    return wait_for(f"RayCluster {namespace}/{name} ready", ready, timeout_s)


def events(kube: Kube, namespace: str, involved: str = "") -> list[dict[str, Any]]:
    found = kube.list("v1", "Event", namespace)
    return [e for e in found if not involved or e["involvedObject"]["name"] == involved]


def remove_cluster_scoped(kube: Kube, release: str) -> None:
    """What uninstall keeps cluster-wide and the docs' clean-up deletes: the release's
    network objects and its PersistentVolume."""
    for api, kind in (("networking.gke.io/v1", "Network"), ("networking.gke.io/v1", "GKENetworkParamSet"), ("v1", "PersistentVolume")):
        for obj in kube.list(api, kind, label_selector=f"app.kubernetes.io/instance={release}"):
            kube.delete(api, kind, obj["metadata"]["name"])
