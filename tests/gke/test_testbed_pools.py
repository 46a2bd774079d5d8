"""The test bed's simulated A4X and managed-DRANET nodes against the tables they come from
(generator/gke/provisioning.py, the accelerator profiles) and against what the chart's workers
select and tolerate, without starting the bed: the cluster lane then only has to find out whether
the real scheduler agrees."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from generator.cluster.release import render
from generator.gke.networks import DRANET_PROFILE, DRANET_PROFILE_LABEL
from generator.gke.profiles import PROFILES, profile
from generator.gke.provisioning import ARCH_LABEL, DRANET_DRIVER_LABEL, arch_taints
from generator.values.layers import configurations
from testbed import dra_stand_in, nodes
from testbed.bed import default_infra

CI = Path(__file__).resolve().parents[2] / "charts" / "nemo-rl-gke" / "ci"


def _pool(gpu: str, dranet: bool) -> list[dict[str, Any]]:
    o = default_infra(gpu, 2)
    return nodes.gpu_pool(o, o.worker_groups[0], dranet=dranet)


def _tolerated(taint: dict[str, str], tolerations: list[dict[str, Any]]) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if not t.get("key") and t.get("operator") == "Exists":
            return True
        if t.get("key") == taint["key"] and (t.get("operator") == "Exists" or t.get("value") == taint["value"]):
            return True
    return False


@pytest.mark.parametrize("gpu", sorted(PROFILES))
@pytest.mark.parametrize("dranet", [False, True], ids=["rdma", "dranet"])
def test_a_pool_carries_its_architecture_and_network_profile(gpu: str, dranet: bool):
    p = profile(gpu)
    for node in _pool(gpu, dranet):
        labels, taints = node["metadata"]["labels"], node["spec"]["taints"]
        assert labels[ARCH_LABEL] == p.cpu_arch == node["status"]["nodeInfo"]["architecture"]
        arch = [t for t in taints if t["key"] == ARCH_LABEL]
        assert arch == [dataclasses.asdict(t) for t in arch_taints(p.cpu_arch)]
        assert (labels.get(DRANET_PROFILE_LABEL) == DRANET_PROFILE) is dranet
        assert (labels.get(DRANET_DRIVER_LABEL) == "true") is dranet
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == str(p.gpus_per_node)


@pytest.mark.parametrize("gpu", sorted(PROFILES))
@pytest.mark.parametrize("dranet", [False, True], ids=["rdma", "dranet"])
def test_the_drivers_publish_a_channel_per_nvlink_node_and_a_device_per_nic(gpu: str, dranet: bool):
    p = profile(gpu)
    node = _pool(gpu, dranet)[0] | {}
    node["metadata"] = node["metadata"] | {"uid": "uid-0"}
    slices = {s["spec"]["driver"]: s for s in dra_stand_in.resource_slices(node)}
    expected = ({dra_stand_in.COMPUTE_DOMAIN_DRIVER} if p.compute_domain else set()) | ({dra_stand_in.DRANET_DRIVER} if dranet else set())
    assert set(slices) == expected
    for s in slices.values():
        assert s["spec"]["nodeName"] == s["spec"]["pool"]["name"] == node["metadata"]["name"]
        assert s["metadata"]["ownerReferences"][0]["uid"] == "uid-0"  # gone with its node
    if p.compute_domain:
        types = [d["attributes"]["type"]["string"] for d in slices[dra_stand_in.COMPUTE_DOMAIN_DRIVER]["spec"]["devices"]]
        assert sorted(types) == ["channel", "daemon"]  # v0.4.1: channel 0 only
    if dranet:
        assert len(slices[dra_stand_in.DRANET_DRIVER]["spec"]["devices"]) == p.rdma_nics


@pytest.mark.parametrize("values", ["gb200-dranet-values.yaml", "gb200-values.yaml", "h200-dranet-values.yaml"])
def test_the_charts_workers_fit_the_simulated_pool(values: str):
    """Every worker selects labels the simulated nodes carry and tolerates every taint on them."""
    rendered = render(configurations([CI / values])[0], "rl", "default")
    dranet = rendered.values["network"]["mode"] == "dranet"
    node = _pool(rendered.values["accelerator"]["type"], dranet)[0]
    for _, _, pod in rendered.workers():
        selector = pod.spec.get("nodeSelector") or {}
        missing = {k: v for k, v in selector.items() if node["metadata"]["labels"].get(k) != str(v)}
        assert not missing, f"the simulated node lacks what the workers select: {missing}"
        untolerated = [t for t in node["spec"]["taints"] if not _tolerated(t, pod.spec.get("tolerations") or [])]
        assert not untolerated, f"the workers do not tolerate {untolerated}"
