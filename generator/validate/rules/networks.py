"""RDMA wiring: NIC count, unique names, separate VPCs, nothing RDMA in tcp mode; the CIDRs of the
NetworkPolicy's extra peers."""

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
