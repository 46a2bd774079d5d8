"""RDMA wiring: NIC count, unique names, separate VPCs, nothing RDMA in tcp mode; the CIDRs of the
NetworkPolicy's extra peers; GKE multi-networking's limits that the values schema lets through.

GKE's limits on the Network and GKENetworkParamSet objects (network.gvnic, network.rdma[i]), from
the code of GKE's controllers (kubernetes/cloud-provider-gcp at 4e24531247d7) and its API
(GoogleCloudPlatform/gke-networking-api at 34c617f213240, apis/network/v1/network_types.go):
- Name length: the node IPAM controller advertises each additional network of a node as the
  extended resource `networking.gke.io.networks/<Network name>.IP` (NetworkResourceKeyPrefix;
  pkg/controller/nodeipam/ipam/multinetwork_cloud_cidr_allocator.go allocateIPCapacity). A resource
  name's part after the '/' is a qualified name of at most 63 characters (Kubernetes
  apimachinery IsQualifiedName), so a Network name has at most 60; the schema allows 63.
- Reserved names: `default` (DefaultPodNetworkName) and `pod-network` (DefaultNetworkName) are the
  cluster's own pod network, and the GKENetworkParamSet controller re-creates the `default`
  paramset with the cluster's VPC and subnet (pkg/controller/gkenetworkparamset/
  gkenetworkparamset_controller.go); an extra NIC by either name is the pod network again.
- One subnet per device-mode paramset: a GKENetworkParamSet with deviceMode (the chart sets
  NetDevice on the gVNIC's, RDMA on the others) is refused, DeviceModeSubnetAlreadyInUse, when an
  older one names the same vpcSubnet; the controller compares the subnet's name only, not its VPC
  (gnpcontroller_validations.go validateGKENetworkParamSet).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from typing import Any

from generator.validate.findings import Finding, error, warning
from generator.validate.rules.context import Context

INTERFACES = "networking.gke.io/interfaces"
IPV4_WITH_ZEROS = re.compile(r"\d+(\.\d+){3}")
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _groups_with_interface_annotations(ctx: Context) -> Iterator[tuple[int, str]]:
    for i, g in enumerate(ctx.values["workerGroups"]):
        if INTERFACES in (g.get("annotations") or {}):
            yield i, g["annotations"][INTERFACES]


def cidr_network(text: Any) -> Network | None:
    """The network the API server reads from a CIDR (Kubernetes' ParseCIDRSloppy: ADDRESS/PREFIX,
    host bits and leading zeros in IPv4 allowed), or None where it refuses it."""
    if not isinstance(text, str) or text.count("/") != 1:
        return None
    address, prefix = text.split("/")
    if IPV4_WITH_ZEROS.fullmatch(address):
        address = ".".join(str(int(part)) for part in address.split("."))
    try:
        return ipaddress.ip_network(f"{address}/{prefix}", strict=False)
    except ValueError:
        return None


def _strict(text: str) -> bool:
    try:
        ipaddress.ip_network(text, strict=True)
    except ValueError:
        return False
    return True


def _ip_block(key: str, block: dict[str, Any]) -> Iterator[Finding]:
    """Kubernetes' ValidateIPBlock (pkg/apis/networking/validation): cidr is a CIDR, each `except`
    a CIDR strictly inside it; a CIDR with host bits set passes with a warning ("ambiguous")."""
    cidr = block.get("cidr")
    net = cidr_network(cidr)
    if net is None:
        yield error(
            f"{key}.cidr",
            f"{'no cidr' if cidr is None else repr(cidr) + ' is not a CIDR'}: the API server refuses the NetworkPolicy",
            "write a network as ADDRESS/PREFIX, e.g. 10.8.0.0/16, or 10.8.1.2/32 for one address",
        )
        return
    if not _strict(cidr):
        yield warning(
            f"{key}.cidr",
            f"{cidr} is not in network form: Kubernetes reads it as {net} (the whole network) and warns that it is ambiguous",
            f"write {net}, or {cidr.split('/')[0]}/{net.max_prefixlen} for one address",
        )
    excepts = block.get("except") or []
    for j, text in enumerate(excepts if isinstance(excepts, list) else [excepts]):
        part = cidr_network(text)
        if part is None or part.version != net.version or not part.subnet_of(net) or part.prefixlen <= net.prefixlen:
            yield error(
                f"{key}.except[{j}]",
                f"{text!r} is not a CIDR strictly inside {net}: the API server refuses the NetworkPolicy",
                f"list only smaller networks inside {net}, or remove it",
            )


def _ip_blocks(ctx: Context) -> Iterator[Finding]:
    policy = (ctx.values.get("access") or {}).get("networkPolicy") or {}
    if not policy.get("enabled", True):
        return  # not rendered
    for i, peer in enumerate(policy.get("allowFrom") or []):
        if isinstance(peer.get("ipBlock"), dict):
            yield from _ip_block(f"access.networkPolicy.allowFrom[{i}].ipBlock", peer["ipBlock"])


def check(ctx: Context) -> Iterator[Finding]:
    yield from _ip_blocks(ctx)
    yield from _nics(ctx)
    yield from _gke_limits(ctx)


# Extended resource `networking.gke.io.networks/<name>.IP`: the name part is at most 63 characters.
NETWORK_RESOURCE_SUFFIX = ".IP"
NETWORK_NAME_MAX = 63 - len(NETWORK_RESOURCE_SUFFIX)
RESERVED_NETWORKS = ("default", "pod-network")


def _extra_networks(net: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    rdma = net.get("rdma") if isinstance(net.get("rdma"), list) else []
    return [("network.gvnic", net.get("gvnic") or {})] + [(f"network.rdma[{i}]", n) for i, n in enumerate(rdma)]


def _gke_limits(ctx: Context) -> Iterator[Finding]:
    """GKE's limits on the Network and GKENetworkParamSet objects (the module's docstring)."""
    net = ctx.values["network"]
    if net["mode"] != "rdma":
        return  # tcp: no extra NIC; dranet: no Network objects
    subnets: dict[str, str] = {}
    for key, n in _extra_networks(net):
        name, subnet = str(n.get("name", "")), str(n.get("subnet", ""))
        if len(name) > NETWORK_NAME_MAX:
            yield error(
                f"{key}.name",
                f"{name!r} has {len(name)} characters: GKE advertises each network on the nodes as the resource "
                f"networking.gke.io.networks/{name}{NETWORK_RESOURCE_SUFFIX}, whose name part may have at most 63",
                f"use a name of at most {NETWORK_NAME_MAX} characters",
            )
        if name in RESERVED_NETWORKS:
            yield error(
                f"{key}.name",
                f"{name!r} is the name of GKE's own pod network (its Network and GKENetworkParamSet, which GKE re-creates "
                "with the cluster's VPC): the NIC would not be an extra one",
                "give the extra NIC its own name, e.g. gvnic-1 or rdma-0",
            )
        if subnet in subnets and not _same_vpc_pair(net, subnets[subnet], key):
            yield error(
                f"{key}.subnet",
                f"subnet name {subnet!r} is also {subnets[subnet]}'s: GKE refuses a second device-mode GKENetworkParamSet "
                "on a subnet of that name (DeviceModeSubnetAlreadyInUse), whatever its VPC",
                "give each NIC a subnet of its own name",
            )
        subnets.setdefault(subnet, key)


def _same_vpc_pair(net: dict[str, Any], first: str, key: str) -> bool:
    """Whether the duplicate is the same (VPC, subnet) pair of two RDMA NICs, which _nics reports."""
    entries = dict(_extra_networks(net))
    a, b = entries.get(first) or {}, entries.get(key) or {}
    return first.startswith("network.rdma") and key.startswith("network.rdma") and a.get("vpc") == b.get("vpc")


def _nics(ctx: Context) -> Iterator[Finding]:
    net = ctx.values["network"]
    nccl_env = ctx.values.get("nccl", {}).get("extraEnv", {}) or {}
    if net["mode"] == "dranet":
        for i, _ in _groups_with_interface_annotations(ctx):
            yield error(
                f"workerGroups[{i}].annotations",
                f"{INTERFACES} is set but network.mode is dranet: managed DRANET pods keep networking.gke.io/default-interface "
                "eth0 without an interfaces list (GKE attaches the RDMA NICs through the claim)",
                "remove the annotation",
            )
        want = ctx.profile.rdma_nics
        if len(net["rdma"]) != want:  # the chart's RDMA claim asks for one NIC per entry
            yield error(
                "network.rdma",
                f"{len(net['rdma'])} RDMA networks listed; the DRANET claim asks for one NIC per entry and each"
                f" {ctx.profile.machine_type} node has {want}",
                f"list exactly {want} (python -m generator --network dranet writes them)",
            )
        return
    if not ctx.rdma:
        for i, _ in _groups_with_interface_annotations(ctx):
            yield error(
                f"workerGroups[{i}].annotations",
                f"{INTERFACES} is set but network.mode is tcp: pods would ask for NICs the cluster may not have",
                "remove the annotation, or use network.mode: rdma",
            )
        if nccl_env.get("NCCL_NET") == "gIB":
            yield error("nccl.extraEnv.NCCL_NET", "gIB needs the RDMA NICs, but network.mode is tcp", "remove it or use network.mode: rdma")
        return

    want = ctx.profile.rdma_nics
    if len(net["rdma"]) != want:
        yield error(
            "network.rdma",
            f"{len(net['rdma'])} RDMA networks listed; each {ctx.profile.machine_type} node has {want} RDMA NICs (eth2..eth{want + 1})",
            f"list exactly {want}, one per RoCE subnet",
        )
    seen: dict[str, str] = {net["defaultNetwork"]: "network.defaultNetwork"}
    for key, n in [("network.gvnic.name", net["gvnic"])] + [(f"network.rdma[{i}].name", n) for i, n in enumerate(net["rdma"])]:
        if n["name"] in seen:
            yield error(key, f"network name {n['name']!r} is already used by {seen[n['name']]}", "give every NIC its own Network")
        seen.setdefault(n["name"], key)
    subnets: dict[tuple[str, str], int] = {}
    for i, n in enumerate(net["rdma"]):
        if (n["vpc"], n["subnet"]) in subnets:
            yield error(
                f"network.rdma[{i}].subnet",
                f"subnet {n['subnet']!r} is also used by network.rdma[{subnets[(n['vpc'], n['subnet'])]}]",
                "each RDMA NIC needs its own subnet",
            )
        subnets.setdefault((n["vpc"], n["subnet"]), i)
        if n["vpc"] == net["gvnic"]["vpc"]:
            yield error(
                f"network.rdma[{i}].vpc",
                "the RDMA networks must be on the RoCE VPC, not the gVNIC VPC",
                "use the VPC created with --network-profile=ZONE-vpc-roce",
            )
    if len({n["vpc"] for n in net["rdma"]}) > 1:
        yield warning(
            "network.rdma", "the RDMA subnets span several VPCs; GKE's RDMA setup puts all eight in one RoCE VPC", "check the VPC names"
        )
    for i, _ in _groups_with_interface_annotations(ctx):
        yield warning(
            f"workerGroups[{i}].annotations",
            f"{INTERFACES} is ignored: the chart builds it from network.* so names always match the Network objects",
            "remove it and edit network.gvnic / network.rdma instead",
        )
    if "NCCL_NET" in nccl_env and nccl_env["NCCL_NET"] != "gIB":
        yield warning(
            "nccl.extraEnv.NCCL_NET",
            f"NCCL_NET={nccl_env['NCCL_NET']} bypasses the gIB plugin although RDMA NICs are attached",
            "remove it unless debugging",
        )
