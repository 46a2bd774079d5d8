"""Kueue and the DRA devices the GPU workers claim: the one table mapping each DeviceClass to the
quota resource a ClusterQueue gives, read by the infra script's Kueue configuration and queue
(generator/infra/kueue.py), the test bed's Kueue (testbed/kueue_setup.py) and `doctor`.

Read in Kueue's source, kubernetes-sigs/kueue v0.19.2:
- apis/config/v1beta2/configuration_types.go: `Configuration.resources.deviceClassMappings`, a
  list of `{name, deviceClassNames}`; `name` is the resource a ClusterQueue's nominalQuota names.
- pkg/features/kube_features.go: the gate `KueueDRAIntegration` is beta and on by default from
  0.18 (with `KueueDRARejectWorkloadsWhenDRADisabled`, also on from 0.18). Before 0.18 the gate
  was `DynamicResourceAllocation`, alpha and off by default since 0.14: such Kueue versions do not
  count the claims at all, so they admit the release without quota for them.
- pkg/dra/claims.go (GetResourceRequestsForResourceClaimTemplates, countDevicesPerClass): for
  each pod set, every request of every ResourceClaimTemplate the pods claim is counted per
  DeviceClass, and a class with no mapping holds the Workload ("DeviceClass X is not mapped in DRA
  configuration for podset Y"). Only `allocationMode: ExactCount` is counted (its `count`, 1 by
  default); `All`, FirstAvailable and adminAccess are refused, so the chart claims an exact
  count of NICs. The quota is charged per pod: count x the pod set's replicas.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from generator.gke.profiles import AcceleratorProfile

FIRST_VERSION = (0, 18)  # the first Kueue (major, minor) that counts DRA claims by default
CONFIG_MAP = "kueue-manager-config"  # Kueue's release manifests (kustomize prefix kueue- on manager-config)
CONFIG_KEY = "controller_manager_config.yaml"


@dataclass(frozen=True)
class DeviceMapping:
    resource: str  # the quota resource of the ClusterQueue (Kueue's deviceClassMappings[].name)
    device_class: str  # the DeviceClass a worker's claim names
    needed_for: str  # "compute-domain" (accelerator.computeDomain) or "dranet" (network.mode dranet)

    def per_worker(self, p: AcceleratorProfile) -> int:
        """Devices one GPU worker pod claims: the domain's channel once, every RDMA NIC of its node."""
        return 1 if self.needed_for == "compute-domain" else p.rdma_nics


MAPPINGS: tuple[DeviceMapping, ...] = (
    # NVIDIA's DRA driver: the ComputeDomain controller's channel template names this class.
    DeviceMapping("nvidia.com/compute-domain-channel", "compute-domain-default-channel.nvidia.com", "compute-domain"),
    # GKE managed DRANET: the chart's RDMA template names this class.
    DeviceMapping("google.com/mrdma", "mrdma.google.com", "dranet"),
)


def needed(compute_domain: bool, network_mode: str) -> list[DeviceMapping]:
    """The mappings a release's workers need: by accelerator.computeDomain and network.mode."""
    on = {"compute-domain": compute_domain, "dranet": network_mode == "dranet"}
    return [m for m in MAPPINGS if on[m.needed_for]]


def configuration() -> dict[str, Any]:
    """Kueue's `resources` configuration block: every mapping (a class no release claims costs nothing)."""
    return {"deviceClassMappings": [{"name": m.resource, "deviceClassNames": [m.device_class]} for m in MAPPINGS]}


def counts_claims(version: tuple[int, int]) -> bool:
    """This Kueue (major, minor) counts DRA claims against quota (and holds unmapped ones)."""
    return version >= FIRST_VERSION
