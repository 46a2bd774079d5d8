"""Class 12 of issue 25: GKE multi-networking's limits that the values schema lets through
(generator/validate/rules/networks.py _gke_limits): the Network name's length (the node resource
networking.gke.io.networks/<name>.IP), GKE's own pod network's names, and one device-mode
GKENetworkParamSet per subnet name. Each on the gVNIC and the RDMA entries, and what stays valid."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from generator.core.names import QUALIFIED_NAME
from generator.validate.findings import ERROR
from generator.validate.rules.networks import NETWORK_NAME_MAX, NETWORK_RESOURCE_SUFFIX
from generator.validate.values import validate_values
from generator.values.build import Options, build


@pytest.fixture(scope="module", params=["h200", "b200"])
def base(request: pytest.FixtureRequest) -> dict[str, Any]:
    return build(Options(gpu=request.param))


def errors(values: dict[str, Any]) -> dict[str, str]:
    return {f.key: f.message for f in validate_values(values) if f.level == ERROR}


def with_entry(base: dict[str, Any], key: str, **fields: str) -> dict[str, Any]:
    """`key` is gvnic or rdma[i]."""
    v = copy.deepcopy(base)
    entry = v["network"]["gvnic"] if key == "gvnic" else v["network"]["rdma"][int(key[5:-1])]
    entry.update(fields)
    return v


def name_of(length: int) -> str:
    return ("rdma-" + "x" * length)[:length]


def test_the_limit_is_the_resource_names_63_characters() -> None:
    assert NETWORK_NAME_MAX == 60
    # The node's resource name part for the longest name is itself a valid qualified name part; one more is not.
    assert QUALIFIED_NAME.fullmatch(name_of(60) + NETWORK_RESOURCE_SUFFIX) and len(name_of(61) + NETWORK_RESOURCE_SUFFIX) == 64


@pytest.mark.parametrize("key", ["gvnic", "rdma[0]", "rdma[7]"])
@pytest.mark.parametrize("length", [61, 63])
def test_a_network_name_the_schema_allows_but_gke_cannot_advertise_is_refused(base, key: str, length: int) -> None:
    found = errors(with_entry(base, key, name=name_of(length)))
    message = found[f"network.{key}.name"]
    assert f"has {length} characters" in message and f"networking.gke.io.networks/{name_of(length)}.IP" in message


@pytest.mark.parametrize("key", ["gvnic", "rdma[3]"])
def test_a_sixty_character_name_is_accepted(base, key: str) -> None:
    assert f"network.{key}.name" not in errors(with_entry(base, key, name=name_of(60)))


@pytest.mark.parametrize("reserved", ["default", "pod-network"])
@pytest.mark.parametrize("key", ["gvnic", "rdma[2]"])
def test_gkes_own_pod_network_names_are_refused_for_an_extra_nic(base, key: str, reserved: str) -> None:
    v = with_entry(base, key, name=reserved)
    v["network"]["defaultNetwork"] = "primary"  # not caught as a duplicate of defaultNetwork
    assert "GKE's own pod network" in errors(v)[f"network.{key}.name"]


@pytest.mark.parametrize(
    ("first", "second"),
    [("gvnic", "rdma[0]"), ("rdma[1]", "rdma[5]")],
    ids=["gvnic-and-rdma", "two-rdma-in-two-vpcs"],
)
def test_a_subnet_name_used_twice_is_refused_whatever_the_vpc(base, first: str, second: str) -> None:
    v = with_entry(base, first, subnet="shared-sub")
    v = with_entry(v, second, subnet="shared-sub", vpc="another-roce-net")
    found = errors(v)
    assert "DeviceModeSubnetAlreadyInUse" in found[f"network.{second}.subnet"], found


def test_the_same_vpc_and_subnet_twice_is_reported_once(base) -> None:
    v = with_entry(with_entry(base, "rdma[1]", subnet="same"), "rdma[2]", subnet="same")
    found = [f for f in validate_values(v) if f.key == "network.rdma[2].subnet"]
    assert len(found) == 1 and "also used by network.rdma[1]" in found[0].message


@pytest.mark.parametrize("mode", ["tcp", "dranet"])
def test_modes_without_network_objects_are_not_held_to_them(mode: str) -> None:
    v = build(Options(gpu="h200", network="dranet")) if mode == "dranet" else build(Options(gpu="h200"))
    v["network"]["mode"] = mode
    v["network"]["gvnic"]["name"] = name_of(63)
    assert "network.gvnic.name" not in errors(v)


def test_generated_files_have_no_gke_network_finding(base) -> None:
    assert not [k for k in errors(base) if k.startswith("network.")]
