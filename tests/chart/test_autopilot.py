"""Autopilot mode: scheduling keys only, and nothing rendered that Autopilot refuses."""

from __future__ import annotations

import pytest
from conftest import CI_DIR, one, pod_specs, render, values_for, with_changes

from generator.validate.values import validate_values

# The host paths Google's own Autopilot RDMA pods mount (read-only).
AUTOPILOT_HOST_PATHS = {"/home/kubernetes/bin/gib", "/home/kubernetes/bin/nvidia"}


def flatten(node, path=""):
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            out |= flatten(v, f"{path}.{k}")
        return out or {path: {}}
    if isinstance(node, list):
        out = {}
        for i, v in enumerate(node):
            out |= flatten(v, f"{path}[{i}]")
        return out or {path: []}
    return {path: node}


def by_id(objs):
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


@pytest.mark.parametrize("gpu", ["b200", "h200"])
def test_standard_and_autopilot_differ_only_in_scheduling_keys(helm, gpu):
    std = by_id(render(helm, [values_for(gpu)]))
    auto = by_id(render(helm, [values_for(gpu, mode="autopilot")]))
    assert std.keys() == auto.keys()
    differing = set()
    for key in std:
        a, b = flatten(std[key]), flatten(auto[key])
        differing |= {p for p in a.keys() | b.keys() if a.get(p) != b.get(p)}
    assert differing, "autopilot changed nothing"
    # and the Ray containers' disk: Autopilot gives a container without a request 1 GiB
    assert all(".nodeSelector." in p or p.endswith(".ephemeral-storage") for p in differing), sorted(differing)
    assert any(p.endswith(".ephemeral-storage") for p in differing)
    rc = auto[("RayCluster", "nemo-rl")]
    head_sel = rc["spec"]["headGroupSpec"]["template"]["spec"]["nodeSelector"]
    assert head_sel == {"cloud.google.com/compute-class": "Balanced"}
    worker_sel = rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["nodeSelector"]
    assert worker_sel["cloud.google.com/gke-accelerator-count"] == "8"  # a string: Autopilot rejects an integer


@pytest.mark.parametrize("scenario", sorted(CI_DIR.glob("*autopilot*.yaml")), ids=lambda p: p.stem)
def test_nothing_rendered_needs_what_autopilot_refuses(helm, scenario):
    objs = render(helm, [scenario])
    for name, tpl in pod_specs(objs):
        spec = tpl["spec"]
        assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC"), name
        for c in spec.get("initContainers", []):
            assert "nvidia.com/gpu" not in str(c.get("resources", {})), f"{name}: GPU init container {c['name']}"
        containers = spec["containers"] + spec.get("initContainers", [])
        for c in containers:
            sc = c.get("securityContext") or {}
            assert not sc.get("privileged") and not (sc.get("capabilities") or {}).get("add"), f"{name}/{c['name']}"
        host = {v["name"]: v["hostPath"]["path"] for v in spec.get("volumes", []) if "hostPath" in v}
        assert set(host.values()) <= AUTOPILOT_HOST_PATHS, f"{name}: {host}"
        for c in containers:
            for m in c.get("volumeMounts", []):
                if m["name"] in host:
                    assert m.get("readOnly") is True, f"{name}/{c['name']}: {m}"


def test_autopilot_keeps_the_rdma_interfaces_with_gvnic_1_on_eth1(helm):
    import json

    rc = one(render(helm, [CI_DIR / "h200-autopilot-values.yaml"]), "RayCluster")
    ifs = json.loads(rc["spec"]["workerGroupSpecs"][0]["template"]["metadata"]["annotations"]["networking.gke.io/interfaces"])
    assert ifs[1] == {"interfaceName": "eth1", "network": "gvnic-1"}
    assert len(ifs) == 10


def test_gpu_compute_class_is_optional(helm):
    v = with_changes(values_for(mode="autopilot"), {"gke.gpuComputeClass": "Accelerator"})
    rc = one(render(helm, [v]), "RayCluster")
    assert rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["nodeSelector"]["cloud.google.com/compute-class"] == "Accelerator"


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"worker.securityContext": {"privileged": True}}, "worker.securityContext.privileged"),
        ({"head.nodeSelector": {"cloud.google.com/gke-nodepool": "system"}}, "head.nodeSelector.cloud.google.com/gke-nodepool"),
        (
            {
                "workerGroups": [
                    {"name": "gpu", "replicas": 2, "provisioning": "spot", "nodeSelector": {"cloud.google.com/gke-accelerator-count": "4"}}
                ]
            },
            "workerGroups[0].nodeSelector.cloud.google.com/gke-accelerator-count",
        ),
        (
            {
                "workerGroups": [
                    {"name": "gpu", "replicas": 2, "provisioning": "spot", "nodeSelector": {"cloud.google.com/gke-nodepool": "gpu"}}
                ]
            },
            "workerGroups[0].nodeSelector.cloud.google.com/gke-nodepool",
        ),
    ],
)
def test_validate_knows_autopilot_rules(changes, key):
    findings = validate_values(with_changes(values_for(mode="autopilot"), changes))
    assert key in {f.key for f in findings if f.level == "error"}


def test_the_same_changes_are_fine_on_standard():
    v = with_changes(values_for(), {"head.nodeSelector": {"cloud.google.com/gke-nodepool": "system"}})
    assert [f for f in validate_values(v) if f.level == "error"] == []


PRELOAD = "cloud.google.com.node-restriction.kubernetes.io/gke-secondary-boot-disk-nemo-rl-v070"


@pytest.mark.parametrize("mode", ["standard", "autopilot"])
def test_image_preload_selects_nodes_with_the_disk_only_on_autopilot(helm, mode):
    v = with_changes(values_for(mode=mode), {"image.preload": {"diskImage": "nemo-rl-v070", "project": "my-proj-1"}})
    rc = one(render(helm, [v]), "RayCluster")
    selectors = [rc["spec"]["headGroupSpec"]["template"]["spec"].get("nodeSelector", {})]
    selectors += [g["template"]["spec"]["nodeSelector"] for g in rc["spec"]["workerGroupSpecs"]]
    for sel in selectors:
        if mode == "autopilot":
            assert sel[PRELOAD] == "CONTAINER_IMAGE_CACHE.my-proj-1"
        else:
            assert PRELOAD not in sel  # Standard: the node pool carries the disk (infra --preload-image-disk)
