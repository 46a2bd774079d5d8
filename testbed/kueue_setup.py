"""Kueue as a local process: its configuration, its serving certificates, and the webhook
configurations of its release manifests pointed at it (Kueue cannot run without its webhooks).

Read in Kueue v0.19.2's source (cmd/kueue/main.go, apis/config/v1beta2/defaults.go,
pkg/controller/jobframework/setup.go):
- with internal certificate management off, the webhook server reads `<certDir>/tls.{crt,key}`
  and the metrics server `/etc/kueue/metrics/certs/tls.{crt,key}`, a fixed path no flag changes:
  Kueue exits without those files even when metrics are off, so the test bed writes a throwaway
  certificate there (only when none is there);
- the visibility API server (VisibilityOnDemand) needs certificates of its own and an APIService
  that would break discovery when not served: turned off;
- the DeviceClasses the workers' DRA claims name are mapped to quota resources as the infra
  script maps them, from the same table (generator/gke/kueue_dra.py: resources.deviceClassMappings);
- only the RayCluster integration is enabled; a framework's webhooks are kept only for what is
  enabled (RayClusters and Kueue's own kinds), each pointed at `https://127.0.0.1:PORT/<path>`
  with the test bed's CA, as controller-runtime's envtest does. The pod, Job and Deployment
  webhooks (failurePolicy Fail) are left out, so no other object depends on Kueue being up.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import yaml

from generator.gke import kueue_dra

METRICS_CERTS = Path("/etc/kueue/metrics/certs")
KEPT_GROUPS = {"kueue.x-k8s.io"}
KEPT_RESOURCES = {"rayclusters"}


def config(webhook_port: int, health_port: int, cert_dir: Path) -> dict[str, Any]:
    """Kueue's Configuration (the API server is given through KUBECONFIG in its environment)."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": "kueue-system",
        "manageJobsWithoutQueueName": False,
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "integrations": {"frameworks": ["ray.io/raycluster"]},
        "resources": kueue_dra.configuration(),
        "featureGates": {"VisibilityOnDemand": False},
    }


def install_certs(cert: Path, key: Path, cert_dir: Path) -> None:
    cert_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cert, cert_dir / "tls.crt")
    shutil.copyfile(key, cert_dir / "tls.key")
    if not (METRICS_CERTS / "tls.crt").exists() or not (METRICS_CERTS / "tls.key").exists():
        try:
            METRICS_CERTS.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(cert, METRICS_CERTS / "tls.crt")
            shutil.copyfile(key, METRICS_CERTS / "tls.key")
        except OSError as e:
            raise OSError(f"Kueue reads its metrics certificate from {METRICS_CERTS} (a fixed path) and it cannot be written: {e}") from e


def _kept(webhook: dict[str, Any]) -> bool:
    for rule in webhook.get("rules") or []:
        groups = set(rule.get("apiGroups") or [])
        resources = {r.split("/")[0] for r in rule.get("resources") or []}
        if groups <= KEPT_GROUPS or resources <= KEPT_RESOURCES:
            return True
    return False


def webhook_configurations(manifests: str, port: int, ca_bundle: str, suffix: str) -> list[dict[str, Any]]:
    """Kueue's webhook configurations, reduced to the enabled kinds and pointed at the local process."""
    out = []
    for original in yaml.safe_load_all(manifests):
        if not original or original.get("kind") not in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            continue
        doc = copy.deepcopy(original)
        doc["metadata"] = {"name": f"kueue-{doc['metadata']['name']}-{suffix}"}
        kept = []
        for hook in doc.get("webhooks") or []:
            if not _kept(hook):
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle}
            kept.append(hook)
        doc["webhooks"] = kept
        out.append(doc)
    return out
