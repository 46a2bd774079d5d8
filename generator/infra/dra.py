"""NVIDIA's DRA driver for the infra script: the pinned Helm chart and the values GKE needs, for
machines whose GPU workers claim a ComputeDomain channel (cross-node NVLink, A4X).

Sources:
- the chart: kubernetes-sigs/dra-driver-nvidia-gpu, deployments/helm/dra-driver-nvidia-gpu
  (values.yaml at chart 0.4.1: `nvidiaDriverRoot`, `resources.gpus.enabled`,
  `resources.computeDomains.enabled`, `controller.affinity`, `kubeletPlugin.affinity`,
  `kubeletPlugin.tolerations`; published as oci://registry.k8s.io/dra-driver-nvidia/charts/dra-driver-nvidia-gpu);
  its ComputeDomain CRD is vendored at vendor/dra-driver-nvidia-gpu/v0.4.1.
- GKE's values: "Create a custom AI-optimized GKE cluster which uses A4X", Install the NVIDIA
  Compute Domain CRD and DRA driver
  (https://docs.cloud.google.com/ai-hypercomputer/docs/create/gke-ai-hypercompute-custom-a4x):
  the driver root is GKE's driver directory /home/kubernetes/bin/nvidia; GPU allocation off (GKE's
  device plugin serves nvidia.com/gpu, only ComputeDomains come from this driver); the controller
  on nodes without GPUs; the kubelet plugin only on the machine's GPU nodes (accelerator label and
  arm64), tolerating GKE's GPU taint and the arm64 taint; a ResourceQuota in the driver's
  namespace admitting pods of the system-node-critical and system-cluster-critical priority
  classes (GKE limits them outside kube-system), at least 2 per GPU node plus 1.
"""

from __future__ import annotations

from typing import Any

import yaml

from generator.gke.profiles import AcceleratorProfile

CHART = "oci://registry.k8s.io/dra-driver-nvidia/charts/dra-driver-nvidia-gpu"
CHART_VERSION = "0.4.1"  # the CRD vendored at vendor/dra-driver-nvidia-gpu/v0.4.1
RELEASE = "dra-driver-nvidia-gpu"
NAMESPACE = "nvidia-dra-driver-gpu"  # the namespace of GKE's A4X guide
# With the release named like the chart, the chart's objects are named after the release.
KUBELET_PLUGIN = f"{RELEASE}-kubelet-plugin"
CONTROLLER = f"{RELEASE}-controller"
QUOTA = "nvidia-dra-driver-gpu-quota"
DRIVER_ROOT = "/home/kubernetes/bin/nvidia"
CRD = "computedomains.resource.nvidia.com"
# The kubelet plugin's driver name in the ResourceSlices it publishes for ComputeDomain channels.
COMPUTE_DOMAIN_DRIVER = "compute-domain.nvidia.com"


def needed(p: AcceleratorProfile, mode: str) -> bool:
    """The script installs the driver: the machine's workers claim a ComputeDomain (Standard only)."""
    return p.compute_domain and mode == "standard"


def pod_quota(gpu_nodes: int) -> int:
    """GKE's guide: at least 2 pods per GPU node plus 1 (the kubelet plugin, the IMEX daemon, the controller)."""
    return 2 * gpu_nodes + 1


def values(p: AcceleratorProfile) -> dict[str, Any]:
    """The chart values GKE needs for this machine (see the module's sources)."""
    return {
        "nvidiaDriverRoot": DRIVER_ROOT,
        "resources": {"gpus": {"enabled": False}, "computeDomains": {"enabled": True}},
        "controller": {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": "nvidia.com/gpu", "operator": "DoesNotExist"}]}]
                    }
                }
            }
        },
        "kubeletPlugin": {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "cloud.google.com/gke-accelerator", "operator": "In", "values": [p.node_label]},
                                    {"key": "kubernetes.io/arch", "operator": "In", "values": [p.cpu_arch]},
                                ]
                            }
                        ]
                    }
                }
            },
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
                *(
                    [{"key": "kubernetes.io/arch", "operator": "Equal", "value": p.cpu_arch, "effect": "NoSchedule"}]
                    if p.cpu_arch != "amd64"
                    else []
                ),
            ],
        },
    }


def quota(gpu_nodes: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": QUOTA, "namespace": NAMESPACE},
        "spec": {
            "hard": {"pods": str(pod_quota(gpu_nodes))},
            "scopeSelector": {
                "matchExpressions": [
                    {"operator": "In", "scopeName": "PriorityClass", "values": ["system-node-critical", "system-cluster-critical"]}
                ]
            },
        },
    }


INSTALL = """\
# NVIDIA's DRA driver, chart %(version)s (pinned), for the ComputeDomain every GPU worker claims
# (cross-node NVLink). Values as GKE's A4X guide sets them: GKE's driver root, GPU allocation off
# (GKE's device plugin serves nvidia.com/gpu), the kubelet plugin on the %(label)s nodes only.
if ! exists kubectl get namespace "$DRA_NAMESPACE"; then
  run kubectl create namespace "$DRA_NAMESPACE"
fi
# GKE admits system-node-critical pods outside kube-system only under a quota: 2 per GPU node + 1.
if ! exists kubectl get resourcequota "$DRA_QUOTA" --namespace="$DRA_NAMESPACE"; then
  dra_quota="$(
    cat <<'EOF'
%(quota)sEOF
  )"
  run kubectl apply -f - <<<"$dra_quota"
fi
if ! exists helm status "$DRA_RELEASE" --namespace="$DRA_NAMESPACE"; then
  dra_values="$(
    cat <<'EOF'
%(values)sEOF
  )"
  if [ "$DRY_RUN" = 1 ]; then
    printf '%%s\\n' "$dra_values" | sed 's/^/      | /'
  fi
  run helm install "$DRA_RELEASE" "$DRA_CHART" --version="$DRA_CHART_VERSION" --namespace="$DRA_NAMESPACE" \\
    --values=- --wait --timeout=10m <<<"$dra_values"
fi
"""


def install_step(p: AcceleratorProfile, gpu_nodes: int) -> str:
    return INSTALL % {
        "version": CHART_VERSION,
        "label": p.node_label,
        "quota": yaml.safe_dump(quota(gpu_nodes), sort_keys=False),
        "values": yaml.safe_dump(values(p), sort_keys=False),
    }
