"""doctor's dra-driver and kueue-version checks against the test bed's real API server: the
vendored ComputeDomain CRD, a DaemonSet in the DRA driver's place whose pods kwok runs on the
simulated A4X nodes, ResourceSlices of compute-domain.nvidia.com (resource.k8s.io/v1) for some or
all of them, and a Kueue controller Deployment whose image names its version."""

from __future__ import annotations

import copy
from typing import Any

import clusters
import pytest
import yaml
from clusters import Made, kubelet_plugin, kubelet_plugin_ready, made_for, rendered_for, unique

from generator.cluster import report
from generator.cluster.checks import dra as dra_check
from generator.cluster.checks import kueue as kueue_check
from generator.cluster.checks import kueue_version
from generator.cluster.checks.context import Context
from generator.cluster.kube import connect
from generator.core.paths import ROOT
from generator.gke import kueue_dra
from generator.infra import dra
from testbed.kube import crd_established, wait_for

pytestmark = pytest.mark.cluster

NEWEST = "v1.6.2"
GB200 = ROOT / "examples" / "tutorial-gb200.yaml"
TUTORIAL = ROOT / "examples" / "tutorial-h200.yaml"
CRD_FILE = ROOT / "vendor" / "dra-driver-nvidia-gpu" / "v0.4.1" / "resource.nvidia.com_computedomains.yaml"
LABEL = "cloud.google.com/gke-accelerator"


def _check(made: Made, check: Any) -> report.Result:
    """One check as doctor runs it: its own client from the kubeconfig, a fresh cache."""
    return check(Context(connect(made.cluster.kubeconfig, None, made.namespace), made.rendered))


def _gb200_nodes(made: Made) -> list[str]:
    return sorted(n["metadata"]["name"] for n in made.kube.list("v1", "Node", label_selector=f"{LABEL}=nvidia-gb200"))


def test_the_dra_driver_check_follows_what_the_cluster_has(bed):
    with made_for(bed.cluster(NEWEST), rendered_for(GB200, unique("dra")), dra_driver=False) as made:
        nodes = _gb200_nodes(made)
        assert len(nodes) == 2  # the tutorial's 2 A4X nodes, simulated
        if made.kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", dra.CRD) is None:
            r = _check(made, dra_check.check)
            assert (r.status, r.message) == ("fail", f"no CustomResourceDefinition {dra.CRD}: NVIDIA's DRA driver is not installed")
            assert f"helm install {dra.RELEASE} {dra.CHART} --version 0.4.1" in r.fix
            made.create(yaml.safe_load(CRD_FILE.read_text()), wait_gone=True)
            wait_for(f"CRD {dra.CRD} established", lambda: crd_established(made.kube, dra.CRD), 60)

        r = _check(made, dra_check.check)
        assert r.status == "fail" and f"DaemonSet {dra.NAMESPACE}/{dra.KUBELET_PLUGIN} (the driver's kubelet plugin) not found" in r.message

        if made.kube.get("v1", "Namespace", dra.NAMESPACE) is None:
            made.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": dra.NAMESPACE}}, wait_gone=True)
            wait_for(f"ServiceAccount default in {dra.NAMESPACE}", lambda: made.kube.get("v1", "ServiceAccount", "default", dra.NAMESPACE))
        made.create(kubelet_plugin("nvidia-gb200"), wait_gone=True)
        wait_for("the kubelet plugin ready on both A4X nodes", lambda: kubelet_plugin_ready(made.kube, 2), 120)
        # The bed's DRA stand-in (testbed/dra_stand_in.py) publishes each A4X node's ResourceSlice
        # of compute-domain.nvidia.com, as the driver's kubelet plugin does on GKE.
        r = wait_for("doctor's dra-driver check passing", lambda: (c := _check(made, dra_check.check)).status == "pass" and c, 60)
        plugin = f"DaemonSet {dra.NAMESPACE}/{dra.KUBELET_PLUGIN}"
        assert r.message == f"{dra.CRD} serves v1beta1; {plugin} publishes ComputeDomain devices on all 2 GPU node(s)"


def _kueue_deployment(image: str) -> dict[str, Any]:
    labels = {"control-plane": "controller-manager"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "kueue-controller-manager", "namespace": "kueue-system", "labels": labels},
        "spec": {
            "replicas": 0,  # only its image is read; nothing needs to run
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "manager", "image": image}]}},
        },
    }


def _with_groups(made: Made, groups: int, version: str) -> None:
    values = made.rendered.values
    first = values["workerGroups"][0]
    values["workerGroups"] = [copy.deepcopy(first) | {"name": f"g{i}"} for i in range(groups)]
    values["kueue"]["version"] = version


def test_the_kueue_version_check_reads_kueues_controller_image(bed):
    sets = ("kueue.enabled=true", "kueue.queueName=gpu-queue")
    with made_for(bed.cluster(NEWEST), rendered_for(TUTORIAL, unique("kueue-version"), *sets)) as made:
        assert made.kube.get("apps/v1", "Deployment", "kueue-controller-manager", "kueue-system") is None  # the bed runs Kueue as a process
        r = _check(made, kueue_version.check)
        assert r.status == "pass" and "Kueue's version not read (no Deployment kueue-system/kueue-controller-manager)" in r.message
        _with_groups(made, 9, "v0.18.2")
        r = _check(made, kueue_version.check)
        assert r.status == "warn" and "9 worker groups need Kueue >= 0.18" in r.message

        if made.kube.get("v1", "Namespace", "kueue-system") is None:
            made.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}}, wait_gone=True)
        made.create(_kueue_deployment("registry.k8s.io/kueue/kueue:v0.16.5"), wait_gone=True)
        r = _check(made, kueue_version.check)
        assert r.status == "fail"
        assert (
            "the cluster runs Kueue v0.16.5 (registry.k8s.io/kueue/kueue:v0.16.5): a RayCluster with at most 7 worker groups" in r.message
        )
        assert "the release has 9" in r.message

        made.kube.apply(_kueue_deployment("registry.k8s.io/kueue/kueue:v0.18.2"))
        r = _check(made, kueue_version.check)
        assert (r.status, r.message) == ("pass", "the cluster runs Kueue v0.18.2: up to 9 worker groups, the release has 9")
        _with_groups(made, 3, "v0.19.2")
        r = _check(made, kueue_version.check)
        assert (r.status, r.message) == ("warn", "kueue.version v0.19.2 allows 17 worker groups, the cluster's Kueue v0.18.2 only 9")


def _kueue_config(resources: dict[str, Any] | None) -> dict[str, Any]:
    config = {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration"} | ({"resources": resources} if resources else {})
    meta = {"name": kueue_dra.CONFIG_MAP, "namespace": "kueue-system"}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {kueue_dra.CONFIG_KEY: yaml.safe_dump(config)}}


def test_the_kueue_version_check_reads_the_dra_mappings_of_a_kueue_that_counts_claims(bed):
    """A4X workers claim a ComputeDomain channel: Kueue >= 0.18 holds them unless its configuration
    maps the channel's DeviceClass (kubernetes-sigs/kueue v0.19.2 pkg/dra/claims.go)."""
    sets = ("kueue.enabled=true", "kueue.queueName=gpu-queue")
    with made_for(bed.cluster(NEWEST), rendered_for(GB200, unique("kueue-dra"), *sets), gpu_nodes=False, dra_driver=False) as made:
        if made.kube.get("v1", "Namespace", "kueue-system") is None:
            made.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}}, wait_gone=True)
        made.create(_kueue_deployment("registry.k8s.io/kueue/kueue:v0.17.3"), wait_gone=True)
        r = _check(made, kueue_version.check)
        assert (r.status, r.message) == ("pass", "the cluster runs Kueue v0.17.3: up to 7 worker groups, the release has 1")

        made.kube.apply(_kueue_deployment("registry.k8s.io/kueue/kueue:v0.19.2"))
        r = _check(made, kueue_version.check)
        assert r.status == "warn" and f"no ConfigMap kueue-system/{kueue_dra.CONFIG_MAP}" in r.message

        made.create(_kueue_config({"excludeResourcePrefixes": []}))
        r = _check(made, kueue_version.check)
        assert r.status == "fail", r
        assert "maps no compute-domain-default-channel.nvidia.com: Kueue holds the RayCluster" in r.message
        assert "resources.deviceClassMappings (nvidia.com/compute-domain-channel: [compute-domain-default-channel.nvidia.com])" in r.fix

        made.kube.apply(_kueue_config(kueue_dra.configuration()))
        r = _check(made, kueue_version.check)
        assert r.status == "pass", r


def test_the_kueue_queue_check_wants_quota_for_each_claimed_device_class(bed):
    """The ClusterQueue the infra script makes quotas the A4X workers' channels; with that quota
    taken away Kueue never admits the RayCluster, and doctor says which resource is short."""
    sets = ("kueue.enabled=true", "kueue.queueName=gpu-queue")
    with made_for(bed.cluster(NEWEST), rendered_for(GB200, unique("kueue-dra-quota"), *sets), gpu_nodes=False, dra_driver=False) as made:
        r = _check(made, kueue_check.check)
        assert r.status == "pass", r
        cq = clusters._cluster_queue(made)
        for flavor in cq["spec"]["resourceGroups"][0]["flavors"]:
            for res in flavor["resources"]:
                if res["name"] == "nvidia.com/compute-domain-channel":
                    res["nominalQuota"] = "0"
        made.kube.apply(cq)
        wait_for("the ClusterQueue's new quota served", lambda: _channel_quota(made) == "0", 30)
        r = _check(made, kueue_check.check)
        assert r.status == "fail", r
        assert (
            "has 0 nominal nvidia.com/compute-domain-channel (DeviceClass compute-domain-default-channel.nvidia.com), the workers claim 2"
            in r.message
        )


def _channel_quota(made: Made) -> str:
    cq = made.kube.get(clusters.KUEUE, "ClusterQueue", "nemo-rl") or {}
    flavors = cq["spec"]["resourceGroups"][0]["flavors"]
    return next(r["nominalQuota"] for f in flavors if f["name"] != "cpu" for r in f["resources"] if r["name"].endswith("channel"))
