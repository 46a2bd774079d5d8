"""The DRA drivers of a GKE A4X / managed-DRANET cluster, as far as the API server and the
scheduler see them: the DeviceClasses, a ResourceSlice per driver for each simulated node, and the
ComputeDomain controller's channel ResourceClaimTemplate. Everything speaks the real
`resource.k8s.io/v1` API, so the real kube-scheduler allocates the claims (and reports a claim it
cannot satisfy as Unschedulable) and the real resourceclaim controller makes the pods' claims.

What the real drivers publish, and where this copy of them comes from:
- NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu, the version in
  vendor/dra-driver-nvidia-gpu): its compute-domain kubelet plugin publishes, per node, a slice of
  driver `compute-domain.nvidia.com` with a `channel` device and a `daemon` device, each with the
  attributes `type` and `id`; v0.4.1 advertises channel 0 only, so one claim of the channel per
  node. Its chart installs the DeviceClasses `compute-domain-default-channel.nvidia.com` (type
  channel, id 0) and `compute-domain-daemon.nvidia.com` (type daemon). On GKE it runs with its GPU
  resources off (the `nvidia.com/gpu` device plugin stays), so no `gpu.nvidia.com` devices.
  Its controller makes, for each ComputeDomain, the ResourceClaimTemplate its
  `spec.channel.resourceClaimTemplate.name` names: one request of the default channel class, with
  an opaque ComputeDomainChannelConfig naming the domain (templates/
  compute-domain-workload-claim-template.tmpl.yaml upstream). Here the template is owned by the
  ComputeDomain (the garbage collector removes it with the domain; the real controller uses a
  finalizer), and the IMEX daemons are not simulated.
- GKE managed DRANET: the networking-dra-driver DaemonSet runs on nodes labelled
  `cloud.google.com/gke-networking-dra-driver=true` and publishes the node's RDMA NICs, which the
  DeviceClass `mrdma.google.com` (GKE installs it from 1.34.1-gke.1829001) selects. The device and
  attribute names follow the open-source DRANET driver (kubernetes-sigs/dranet: driver `dra.net`,
  attribute `rdma`); GKE's own DeviceClass selector is not public, so this one is a stand-in.
  One device per RDMA NIC of the machine (the accelerator profile's `rdma_nics`).

Run as a process of the test bed: `python -m testbed.dra_stand_in --kubeconfig K --ready FILE`.
It reconciles every RECONCILE_S seconds and writes FILE after its first pass.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from generator.gke.profiles import PROFILES, AcceleratorProfile
from generator.gke.provisioning import DRANET_DRIVER_LABEL
from testbed.kube import Kube, api_client
from testbed.nodes import KWOK_ANNOTATION

RESOURCE = "resource.k8s.io/v1"
COMPUTE_DOMAIN_API = "resource.nvidia.com/v1beta1"
COMPUTE_DOMAIN_DRIVER = "compute-domain.nvidia.com"
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
DAEMON_CLASS = "compute-domain-daemon.nvidia.com"
CHANNELS_PER_NODE = 1  # v0.4.1: channel-0 only
DRANET_DRIVER = "dra.net"
RDMA_CLASS = "mrdma.google.com"
DOMAIN_LABEL = "resource.nvidia.com/computeDomain"
ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
RECONCILE_S = 0.5
MANAGER = "testbed-dra-stand-in"


def device_classes() -> list[dict[str, Any]]:
    """The DeviceClasses NVIDIA's DRA driver's chart and GKE install."""

    def cls(name: str, expression: str) -> dict[str, Any]:
        spec = {"selectors": [{"cel": {"expression": expression}}]}
        return {"apiVersion": RESOURCE, "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}

    cd = f"device.driver == '{COMPUTE_DOMAIN_DRIVER}' && device.attributes['{COMPUTE_DOMAIN_DRIVER}']"
    return [
        cls(CHANNEL_CLASS, f"{cd}.type == 'channel' && {cd}.id == 0"),
        cls(DAEMON_CLASS, f"{cd}.type == 'daemon'"),
        cls(RDMA_CLASS, f"device.driver == '{DRANET_DRIVER}' && device.attributes['{DRANET_DRIVER}'].rdma == true"),
    ]


def _profile_of(node: dict[str, Any]) -> AcceleratorProfile | None:
    label = (node["metadata"].get("labels") or {}).get(ACCELERATOR_LABEL)
    return next((p for p in PROFILES.values() if p.node_label == label), None)


def _slice(node: dict[str, Any], driver: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    name = node["metadata"]["name"]
    owner = {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"], "controller": True}
    return {
        "apiVersion": RESOURCE,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{name}-{driver}", "ownerReferences": [owner]},
        "spec": {"driver": driver, "nodeName": name, "pool": {"name": name, "generation": 1, "resourceSliceCount": 1}, "devices": devices},
    }


def _device(name: str, **attributes: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "attributes": attributes}


def resource_slices(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The slices the drivers publish for one simulated node: the compute-domain plugin's on the
    GPU nodes of a machine with cross-node NVLink, DRANET's on the nodes of a DRANET pool."""
    p = _profile_of(node)
    if p is None:
        return []
    out = []
    if p.compute_domain:
        devices = [_device(f"channel-{i}", type={"string": "channel"}, id={"int": i}) for i in range(CHANNELS_PER_NODE)]
        devices.append(_device("daemon-0", type={"string": "daemon"}, id={"int": 0}))
        out.append(_slice(node, COMPUTE_DOMAIN_DRIVER, devices))
    if (node["metadata"].get("labels") or {}).get(DRANET_DRIVER_LABEL) == "true":
        nics = [_device(f"gpu{i}rdma0", rdma={"bool": True}, ifName={"string": f"gpu{i}rdma0"}) for i in range(p.rdma_nics)]
        out.append(_slice(node, DRANET_DRIVER, nics))
    return out


def channel_template(domain: dict[str, Any]) -> dict[str, Any]:
    """The ResourceClaimTemplate the ComputeDomain controller makes for a domain's channel."""
    meta = domain["metadata"]
    uid = meta["uid"]
    owner = {"apiVersion": COMPUTE_DOMAIN_API, "kind": "ComputeDomain", "name": meta["name"], "uid": uid, "controller": True}
    config = {"apiVersion": COMPUTE_DOMAIN_API, "kind": "ComputeDomainChannelConfig", "domainID": uid}
    return {
        "apiVersion": RESOURCE,
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": domain["spec"]["channel"]["resourceClaimTemplate"]["name"],
            "namespace": meta["namespace"],
            "labels": {DOMAIN_LABEL: uid},
            "ownerReferences": [owner],
        },
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "channel", "exactly": {"deviceClassName": CHANNEL_CLASS}}],
                    "config": [{"requests": ["channel"], "opaque": {"driver": COMPUTE_DOMAIN_DRIVER, "parameters": config}}],
                }
            }
        },
    }


class StandIn:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.published: set[str] = set()  # slice names applied by this process
        self.templates: set[tuple[str, str, str]] = set()  # (namespace, name, domain uid)

    def reconcile(self) -> None:
        key, value = KWOK_ANNOTATION
        nodes = [n for n in self.kube.list("v1", "Node") if (n["metadata"].get("annotations") or {}).get(key) == value]
        for node in nodes:
            for s in resource_slices(node):
                if s["metadata"]["name"] + node["metadata"]["uid"] not in self.published:
                    self.kube.apply(s)
                    self.published.add(s["metadata"]["name"] + node["metadata"]["uid"])
        for domain in self._domains():
            t = channel_template(domain)
            ident = (t["metadata"]["namespace"], t["metadata"]["name"], domain["metadata"]["uid"])
            if ident in self.templates and self.kube.get(RESOURCE, "ResourceClaimTemplate", ident[1], ident[0]) is not None:
                continue
            if not domain["metadata"].get("deletionTimestamp"):
                self.kube.apply(t)
                self.templates.add(ident)

    def _domains(self) -> list[dict[str, Any]]:
        try:
            return self.kube.list(COMPUTE_DOMAIN_API, "ComputeDomain")
        except Exception:  # the CRD not (yet) served: no domain to serve
            self.kube.refresh()
            return []


def install(kube: Kube) -> None:
    """The DeviceClasses, as the drivers' installations leave them."""
    kube.apply_all(device_classes())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testbed.dra_stand_in", description=__doc__.splitlines()[0])
    p.add_argument("--kubeconfig", required=True, type=Path)
    p.add_argument("--ready", required=True, type=Path, help="written after the first reconcile")
    args = p.parse_args(argv)
    stand_in = StandIn(Kube(api_client(args.kubeconfig)))
    first = True
    while True:
        try:
            stand_in.reconcile()
        except Exception as e:  # an API server restarting or an object gone mid-pass: next pass
            print(f"reconcile: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        else:
            if first:
                args.ready.write_text("ready\n")
                first = False
        time.sleep(RECONCILE_S)


if __name__ == "__main__":
    sys.exit(main())
