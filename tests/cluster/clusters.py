"""Clusters for doctor and status: the API stand-in (tests/kube_api) filled with the objects a
healthy GKE cluster shows for a release's values, in the real API's shapes, and the ways each can
be broken. The KubeRay CRDs are the ones the repository carries (vendor/kuberay/)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from generator.cluster.release import Rendered, requests
from generator.gke.profiles import PROFILES
from generator.gke.sizing import allocatable
from generator.infra.steps import INSTALLERS
from generator.paths import ROOT
from tests.kube_api.stand_in import ApiStandIn

NAMESPACE = "team"
CLUSTER_ADMIN = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]
READ_EVERYTHING = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]}]
OPERATOR_IMAGE = "quay.io/kuberay/operator:v1.7.0"


def kuberay_crd(version: str = "v1.7.0") -> dict[str, Any]:
    return yaml.safe_load((ROOT / "vendor" / "kuberay" / version / "ray.io_rayclusters.yaml").read_text())


def crd(plural: str, group: str, kind: str, versions: tuple[str, ...] = ("v1",), namespaced: bool = True) -> dict[str, Any]:
    """A CustomResourceDefinition in the API's shape (its schema left open: only the names and served
    versions matter to the stand-in)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {"plural": plural, "kind": kind},
            "scope": "Namespaced" if namespaced else "Cluster",
            "versions": [
                {
                    "name": v,
                    "served": True,
                    "storage": i == 0,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
                for i, v in enumerate(versions)
            ],
        },
    }


def ready_condition(ready: bool = True) -> list[dict[str, str]]:
    return [{"type": "Ready", "status": "True" if ready else "False"}, {"type": "PodScheduled", "status": "True"}]


def gpu_node(name: str, rendered: Rendered, selector: dict[str, Any]) -> dict[str, Any]:
    """A GPU node as GKE shows it: the accelerator label, the pool's labels, GKE's allocatable."""
    profile = PROFILES[rendered.values["accelerator"]["type"]]
    a = allocatable(profile)
    alloc = {"cpu": f"{int(a.cpu * 1000)}m", "memory": f"{int(a.memory_gib * 2**20)}Ki", "nvidia.com/gpu": str(profile.gpus_per_node)}
    labels = {"kubernetes.io/hostname": name, "cloud.google.com/gke-nodepool": "gpu-pool"} | {k: str(v) for k, v in selector.items()}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {"allocatable": alloc, "capacity": dict(alloc, cpu=str(profile.host_vcpus)), "conditions": ready_condition()},
    }


def installer_pod(namespace: str, node: str, ready: bool = True) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Running" if ready else "Pending", "conditions": ready_condition(ready)}
    if not ready:
        status["initContainerStatuses"] = [{"name": "nccl-rdma-installer", "state": {"waiting": {"reason": "PodInitializing"}}}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"nccl-rdma-installer-{node}", "namespace": namespace, "labels": {"k8s-app": "nccl-rdma-installer"}},
        "spec": {"nodeName": node},
        "status": status,
    }


def healthy(api: ApiStandIn, rendered: Rendered) -> None:
    """What a cluster made by infra.sh (plus the user's token Secret, and Kueue when the values use
    it) shows before `helm install`, with the GPU nodes up."""
    values, ns = rendered.values, rendered.namespace
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}}})
    api.put(kuberay_crd())
    api.put(crd("networks", "networking.gke.io", "Network", namespaced=False))
    api.put(crd("gkenetworkparamsets", "networking.gke.io", "GKENetworkParamSet", namespaced=False))
    api.put({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": "lustre.csi.storage.gke.io"}, "spec": {}})
    operator = {"template": {"spec": {"containers": [{"name": "kuberay-operator", "image": OPERATOR_IMAGE}]}}}
    api.put(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "kuberay-operator",
                "namespace": "kuberay-system",
                "labels": {"app.kubernetes.io/name": "kuberay-operator"},
            },
            "spec": operator,
        }
    )
    api.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gke-default-pool-0"}, "status": {"conditions": ready_condition()}})
    _, installer_ns = INSTALLERS[values["gke"]["mode"]]
    api.put(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "nccl-rdma-installer", "namespace": installer_ns, "labels": {"k8s-app": "nccl-rdma-installer"}},
            "spec": {"selector": {"matchLabels": {"k8s-app": "nccl-rdma-installer"}}},
        }
    )
    for group, replicas, pod in rendered.workers():
        for i in range(replicas):
            name = f"gke-gpu-pool-{group}-{i:05d}"
            api.put(gpu_node(name, rendered, pod.spec.get("nodeSelector") or {}))
            api.put(installer_pod(installer_ns, name))
    secrets = values["secrets"]
    if secrets["source"] == "existing":
        keys = [k for k in (secrets["hfTokenKey"], secrets["wandbApiKeyKey"]) if k]
        data = {k: "c2VjcmV0LXRva2Vu" for k in keys}  # base64 of a made-up token
        api.put({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secrets["existingSecret"], "namespace": ns}, "data": data})
    if secrets["source"] == "external":
        api.put(crd("externalsecrets", "external-secrets.io", "ExternalSecret"))
        api.put(crd("clustersecretstores", "external-secrets.io", "ClusterSecretStore", namespaced=False))
        store = {"name": secrets["external"]["storeName"]} | (
            {} if secrets["external"]["storeKind"] == "ClusterSecretStore" else {"namespace": ns}
        )
        api.put({"apiVersion": secrets["external"]["apiVersion"], "kind": secrets["external"]["storeKind"], "metadata": store, "spec": {}})
    if values["kueue"]["enabled"]:
        add_kueue(api, rendered)
    if claim := values["storage"]["existingClaim"]:
        spec = {"accessModes": ["ReadWriteMany"], "volumeName": "team-lustre-pv"}
        api.put(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim, "namespace": ns},
                "spec": spec,
                "status": {"phase": "Bound"},
            }
        )
    if values["network"]["mode"] == "rdma" and not values["network"]["createObjects"]:
        with_existing_networks(api, rendered)


def add_kueue(api: ApiStandIn, rendered: Rendered, gpus: int | None = None) -> None:
    api.put(crd("localqueues", "kueue.x-k8s.io", "LocalQueue", ("v1beta1",)))
    api.put(crd("clusterqueues", "kueue.x-k8s.io", "ClusterQueue", ("v1beta1",), namespaced=False))
    quota = [{"name": "nvidia.com/gpu", "nominalQuota": gpus if gpus is not None else rendered.gpus}]
    api.put(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {"name": "gpu-cluster-queue"},
            "spec": {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "h200", "resources": quota}]}]},
        }
    )
    api.put(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "LocalQueue",
            "metadata": {"name": rendered.values["kueue"]["queueName"], "namespace": rendered.namespace},
            "spec": {"clusterQueue": "gpu-cluster-queue"},
            "status": {"conditions": [{"type": "Active", "status": "True", "reason": "Ready"}]},
        }
    )


# --- the ways a cluster is broken: each changes a healthy one -------------------------------------


def without_kuberay(api: ApiStandIn, rendered: Rendered) -> None:
    api.remove("customresourcedefinitions", "rayclusters.ray.io")


def with_an_older_raycluster_crd(api: ApiStandIn, rendered: Rendered) -> None:
    """An operator whose CRD lacks headGroupSpec.headService (the vendored v1.3.2 CRD without it)."""
    old = kuberay_crd("v1.3.2")
    head = old["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["headGroupSpec"]
    del head["properties"]["headService"]
    api.put(old)


def without_the_rdma_installer(api: ApiStandIn, rendered: Rendered) -> None:
    _, ns = INSTALLERS[rendered.values["gke"]["mode"]]
    api.remove("daemonsets", "nccl-rdma-installer", ns)


def with_the_rdma_installer_not_ready(api: ApiStandIn, rendered: Rendered) -> None:
    _, ns = INSTALLERS[rendered.values["gke"]["mode"]]
    node = next(n for (_, _, r, n) in api.objects if r == "nodes" and n.startswith("gke-gpu-pool"))
    api.put(installer_pod(ns, node, ready=False))


def with_networks_of_another_release(api: ApiStandIn, rendered: Rendered) -> None:
    for kind in ("Network", "GKENetworkParamSet"):
        meta = {
            "name": "rdma-3",
            "labels": {"app.kubernetes.io/managed-by": "Helm"},
            "annotations": {"meta.helm.sh/release-name": "other", "meta.helm.sh/release-namespace": "research"},
        }
        api.put({"apiVersion": "networking.gke.io/v1", "kind": kind, "metadata": meta, "spec": {}})


def with_existing_networks(api: ApiStandIn, rendered: Rendered, wrong_subnet: str = "") -> None:
    """The network objects another release made, as the values name them (one subnet wrong if asked)."""
    net = rendered.values["network"]
    for i, n in enumerate([net["gvnic"], *net["rdma"]]):
        subnet = wrong_subnet if wrong_subnet and i == 2 else n["subnet"]
        spec = {"vpc": n["vpc"], "vpcSubnet": subnet, "deviceMode": "NetDevice" if i == 0 else "RDMA"}
        api.put({"apiVersion": "networking.gke.io/v1", "kind": "GKENetworkParamSet", "metadata": {"name": n["name"]}, "spec": spec})
        ref = {"group": "networking.gke.io", "kind": "GKENetworkParamSet", "name": n["name"]}
        api.put(
            {
                "apiVersion": "networking.gke.io/v1",
                "kind": "Network",
                "metadata": {"name": n["name"]},
                "spec": {"type": "Device", "parametersRef": ref},
            }
        )


def with_small_gpu_nodes(api: ApiStandIn, rendered: Rendered) -> None:
    for key, obj in list(api.objects.items()):
        if key[2] == "nodes" and key[3].startswith("gke-gpu-pool"):
            small = copy.deepcopy(obj)
            small["status"]["allocatable"]["memory"] = "1000Gi"
            api.put(small)


def without_gpu_nodes(api: ApiStandIn, rendered: Rendered) -> None:
    for key in [k for k in api.objects if k[2] in ("nodes", "pods") and ("gpu-pool" in k[3] or "nccl-rdma-installer-" in k[3])]:
        del api.objects[key]


def without_the_lustre_driver(api: ApiStandIn, rendered: Rendered) -> None:
    api.remove("csidrivers", "lustre.csi.storage.gke.io")


def with_a_token_key_missing(api: ApiStandIn, rendered: Rendered) -> None:
    s = rendered.values["secrets"]
    secret = api.get("secrets", s["existingSecret"], rendered.namespace)
    del secret["data"][s["wandbApiKeyKey"]]
    api.put(secret)


def without_the_token_secret(api: ApiStandIn, rendered: Rendered) -> None:
    api.remove("secrets", rendered.values["secrets"]["existingSecret"], rendered.namespace)


def without_the_local_queue(api: ApiStandIn, rendered: Rendered) -> None:
    api.remove("localqueues", rendered.values["kueue"]["queueName"], rendered.namespace)


def with_baseline_pod_security(api: ApiStandIn, rendered: Rendered) -> None:
    ns = api.get("namespaces", rendered.namespace)
    ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] = "baseline"
    api.put(ns)


def with_a_gpu_quota_too_small(api: ApiStandIn, rendered: Rendered) -> None:
    per_node = int(requests(rendered.workers()[0][2].spec)["nvidia.com/gpu"])
    api.put(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "gpu-quota", "namespace": rendered.namespace},
            "spec": {"hard": {"requests.nvidia.com/gpu": str(per_node)}},
            "status": {"hard": {"requests.nvidia.com/gpu": str(per_node)}, "used": {"requests.nvidia.com/gpu": "0"}},
        }
    )


def kubeconfig(api: ApiStandIn, folder: Path, **kw: Any) -> Path:
    return api.kubeconfig(folder / "kubeconfig", namespace=NAMESPACE, **kw)
