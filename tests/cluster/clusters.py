"""Clusters for doctor and status on the test bed: what `python -m generator infra` and GKE's own
controllers make for a release's values, built from the facts the repository has, and the ways to
break each. The test bed is shared by the session: whatever is made or changed here is undone.

A healthy cluster for a release (`made_for`), as infra.sh leaves it before `helm install`:
- the release's namespace, labelled as the infra script labels it (NAMESPACE_LABELS);
- GPU nodes for each worker group (the test bed's own GPU pool where it matches the group's node
  selector, else a pool of simulated nodes shaped by testbed/nodes.py, as GKE adds them);
- the CSIDriver the Lustre add-on registers (the name the chart's PersistentVolume gives);
- the NCCL RDMA installer DaemonSet with the name, namespace and `k8s-app` label of Google's
  manifest (generator/infra/steps.py INSTALLERS), on the GPU nodes only: the real DaemonSet
  controller makes its pods, the real scheduler binds them, kwok makes them Ready;
- the token Secret the values name (secrets.source existing);
- with accelerator.computeDomain, the DRA driver as the infra script installs it
  (generator/infra/dra.py): its namespace and its kubelet plugin's DaemonSet on the machine's GPU
  nodes, whose pods kwok makes Ready; the bed already serves the ComputeDomain CRD and its DRA
  stand-in publishes each GPU node's ResourceSlices (testbed/dra_stand_in.py);
- with kueue.enabled, Kueue's queue as infra.sh configures it (generator.infra.kueue.manifests),
  until the real Kueue reports the LocalQueue active;
- with storage.existingClaim, a PersistentVolume of the Lustre driver and its claim, bound by the
  real PersistentVolume controller;
- with network.createObjects false, the network objects as another release's `helm install`
  made them (the chart's objects, with the ownership metadata Helm adds);
- with serviceAccount.create false, the ServiceAccount serviceAccount.name names.

Then `installed_release` installs the release with the pinned Helm 4 and uninstalls it again, with
what uninstall keeps cluster-wide; `user_kubeconfig` gives a ServiceAccount's token with the rights
a test chooses.
"""

from __future__ import annotations

import base64
import contextlib
import copy
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from bed_helpers import Release, remove_cluster_scoped, unique
from kubernetes.client.exceptions import ApiException

from generator.cluster.checks.storage import DRIVER as LUSTRE_DRIVER
from generator.cluster.release import Rendered, render, requests
from generator.helm import runner as helm_mod
from generator.infra import dra as infra_dra
from generator.infra import kueue as infra_kueue
from generator.infra.options import InfraOptions
from generator.infra.steps import INSTALLERS, NAMESPACE_LABELS
from generator.values.layers import configurations
from generator.values.worker_groups import GroupSpec
from testbed import components
from testbed import nodes as bed_nodes
from testbed.bed import Cluster, Testbed, add_nodes
from testbed.build import module_dir
from testbed.kube import Kube, crd_established, wait_for
from testbed.kubeconfig import Context
from testbed.kubeconfig import write as write_kubeconfig

RELEASE = "nemo-rl"
INSTALLER = "nccl-rdma-installer"
INSTALLER_LABEL = "k8s-app"
ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
RAYCLUSTER_CRD = "rayclusters.ray.io"
NETWORKING = "networking.gke.io/v1"
KUEUE = infra_kueue.API
MADE_UP_TOKEN = base64.b64encode(b"made-up-token").decode()


def rendered_for(values: Path, namespace: str, *sets: str, release: str = RELEASE) -> Rendered:
    """The chart rendered as doctor renders it: VALUES with `--set K=V` pairs given as 'K=V'."""
    return render(configurations([values], sets=[("--set", s) for s in sets])[0], release, namespace)


@dataclass
class Made:
    """A cluster made for one release: the admin's client, the release as rendered, and how to
    undo each change (run last first)."""

    cluster: Cluster
    rendered: Rendered
    kube: Kube = field(init=False)
    undo: list[Callable[[], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.kube = self.cluster.kube()

    @property
    def namespace(self) -> str:
        return self.rendered.namespace

    @property
    def values(self) -> dict[str, Any]:
        return self.rendered.values

    def create(self, obj: dict[str, Any], wait_gone: bool = False) -> None:
        """Apply an object and delete it at the end (cluster-wide ones; the namespace takes the rest)."""
        self.kube.apply(obj)
        api, kind, meta = obj["apiVersion"], obj["kind"], obj["metadata"]
        self.undo.append(lambda: delete(self.kube, api, kind, meta["name"], meta.get("namespace"), wait_gone=wait_gone))

    def tear_down(self) -> None:
        while self.undo:
            self.undo.pop()()


def delete(kube: Kube, api: str, kind: str, name: str, namespace: str | None = None, *, wait_gone: bool = False) -> None:
    kube.delete(api, kind, name, namespace)
    if wait_gone:
        wait_for(f"{kind} {name} deleted", lambda: kube.get(api, kind, name, namespace) is None, 120)


@contextlib.contextmanager
def made_for(cluster: Cluster, rendered: Rendered, gpu_nodes: bool = True, dra_driver: bool = True) -> Iterator[Made]:
    """A healthy cluster for the release (see the module's docstring), undone on the way out.
    `gpu_nodes` False adds no node: the test bed's own pool is all there is; `dra_driver` False
    leaves the DRA driver's kubelet plugin out."""
    made = Made(cluster, rendered)
    try:
        make_namespace(made)
        if gpu_nodes and made.values["gke"]["mode"] == "standard":
            add_gpu_pools(made)
        made.create({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": lustre_driver(rendered)}, "spec": {}})
        add_rdma_installer(made)
        if dra_driver and made.values["accelerator"].get("computeDomain"):
            add_dra_driver(made)
        secrets = made.values["secrets"]
        if secrets["source"] == "existing":
            add_token_secret(made)
        if made.values["kueue"]["enabled"]:
            add_kueue(made)
        if made.values["storage"]["existingClaim"]:
            add_existing_claim(made)
        if made.values["network"]["mode"] == "rdma" and not made.values["network"]["createObjects"]:
            add_networks_of_another_release(made)
        if not made.values["serviceAccount"]["create"]:
            add_existing_service_account(made)
        yield made
    finally:
        made.tear_down()


def make_namespace(made: Made) -> None:
    ns = made.namespace
    made.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": dict(NAMESPACE_LABELS)}})
    made.undo.append(lambda: made.kube.delete("v1", "Namespace", ns))
    wait_for(f"ServiceAccount default in {ns}", lambda: made.kube.get("v1", "ServiceAccount", "default", ns))


def add_existing_service_account(made: Made) -> None:
    """The ServiceAccount serviceAccount.name names when the chart does not create one (the
    ServiceAccount admission plugin refuses pods whose account is missing)."""
    name = made.values["serviceAccount"]["name"]
    made.kube.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": made.namespace}})


def lustre_driver(rendered: Rendered) -> str:
    """The driver the chart's PersistentVolume names (the storage check's name without one)."""
    pvs = rendered.of_kind("PersistentVolume")
    return pvs[0]["spec"]["csi"]["driver"] if pvs else LUSTRE_DRIVER


def infra_options(values: dict[str, Any], namespace: str, cluster: str = "nemo-rl") -> InfraOptions:
    """The infra script's options that made the cluster these values were generated for."""
    groups = tuple(GroupSpec(g["name"], g["replicas"], g["provisioning"], g.get("reservationName", "")) for g in values["workerGroups"])
    topology = (values["kueue"].get("topology") or {}).get("mode", "none")
    return InfraOptions(
        gpu=values["accelerator"]["type"],
        project="testbed",
        region="us-central1",
        zone="us-central1-b",
        mode=values["gke"]["mode"],
        groups=groups,
        cluster=cluster,
        namespace=namespace,
        kueue=bool(values["kueue"]["enabled"]),
        kueue_queue=values["kueue"].get("queueName") or "gpu-queue",
        topology=topology,
        network_mode=values["network"]["mode"],
    )


def _selects(node: dict[str, Any], selector: dict[str, Any]) -> bool:
    labels = node["metadata"].get("labels") or {}
    return all(labels.get(k) == str(v) for k, v in selector.items())


def add_gpu_pools(made: Made) -> dict[str, list[str]]:
    """A simulated pool for each worker group that no node of the test bed can take (another GPU,
    provisioning or reservation, or an extra node selector of the values), as GKE adds nodes: the
    shape from testbed/nodes.py (with managed DRANET's labels for network.mode dranet), the group's
    own node selector among the labels. The names of the nodes added, per group."""
    o = infra_options(made.values, made.namespace, cluster=unique("pool"))
    dranet = made.values["network"]["mode"] == "dranet"
    existing = made.kube.list("v1", "Node")
    added: list[dict[str, Any]] = []
    pools: dict[str, list[str]] = {}
    for block, ((name, replicas, pod), group) in enumerate(zip(made.rendered.workers(), o.worker_groups, strict=True)):
        selector = pod.spec.get("nodeSelector") or {}
        if sum(_selects(n, selector) for n in existing) >= replicas:
            continue
        for node in bed_nodes.gpu_pool(o, group, first_block=block, dranet=dranet):
            node["metadata"]["labels"] |= {k: str(v) for k, v in selector.items()}
            added.append(node)
            pools.setdefault(name, []).append(node["metadata"]["name"])
    if added:
        for node in added:
            made.undo.append(lambda n=node["metadata"]["name"]: made.kube.delete("v1", "Node", n))
        add_nodes(made.kube, added)
    return pools


def node_daemonset(
    name: str, namespace: str, labels: dict[str, str], on_nodes: dict[str, Any], container: dict[str, str]
) -> dict[str, Any]:
    """A DaemonSet on the nodes one match expression selects, tolerating every taint. Its
    containers never run here (kwok reports them Ready)."""
    affinity = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [on_nodes]}]}}
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"affinity": affinity, "tolerations": [{"operator": "Exists"}], "containers": [container]},
            },
        },
    }


def installer_daemonset(namespace: str) -> dict[str, Any]:
    """Google's NCCL RDMA installer as its manifest names and labels it, placed on GPU nodes only."""
    return node_daemonset(
        INSTALLER,
        namespace,
        {INSTALLER_LABEL: INSTALLER},
        {"key": ACCELERATOR_LABEL, "operator": "Exists"},
        {"name": INSTALLER, "image": "us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib"},
    )


def installer_namespace(values: dict[str, Any]) -> str:
    return INSTALLERS[values["gke"]["mode"]][1]


def gpu_node_names(kube: Kube, node_label: str) -> list[str]:
    return [n["metadata"]["name"] for n in kube.list("v1", "Node", label_selector=f"{ACCELERATOR_LABEL}={node_label}")]


def installer_pods(kube: Kube, namespace: str) -> dict[str, dict[str, Any]]:
    """Node name -> the installer's pod on it."""
    pods = kube.list("v1", "Pod", namespace, label_selector=f"{INSTALLER_LABEL}={INSTALLER}")
    return {p["spec"].get("nodeName", ""): p for p in pods if not p["metadata"].get("deletionTimestamp")}


def _ready(pod: dict[str, Any] | None) -> bool:
    conditions = ((pod or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def add_rdma_installer(made: Made) -> None:
    ns = installer_namespace(made.values)
    if made.kube.get("v1", "Namespace", ns) is None:
        made.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        made.undo.append(lambda: delete(made.kube, "v1", "Namespace", ns, wait_gone=True))  # made again by the next test
        wait_for(f"ServiceAccount default in {ns}", lambda: made.kube.get("v1", "ServiceAccount", "default", ns))
    made.create(installer_daemonset(ns), wait_gone=True)
    label = made.values["accelerator"]["nodeLabel"]

    def ready_everywhere() -> bool:
        pods = installer_pods(made.kube, ns)
        return all(_ready(pods.get(n)) for n in gpu_node_names(made.kube, label))

    wait_for(f"DaemonSet {ns}/{INSTALLER} Ready on every GPU node", ready_everywhere, 120)


def kubelet_plugin(node_label: str) -> dict[str, Any]:
    """The DRA driver's kubelet plugin as its chart names it with the infra script's release name,
    placed on the machine's GPU nodes (GKE's values; its pods never run here, kwok reports them Ready)."""
    return node_daemonset(
        infra_dra.KUBELET_PLUGIN,
        infra_dra.NAMESPACE,
        {"app": infra_dra.KUBELET_PLUGIN},
        {"key": ACCELERATOR_LABEL, "operator": "In", "values": [node_label]},
        {"name": "compute-domains", "image": f"registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v{infra_dra.CHART_VERSION}"},
    )


def kubelet_plugin_ready(kube: Kube, nodes: int) -> bool:
    ds = kube.get("apps/v1", "DaemonSet", infra_dra.KUBELET_PLUGIN, infra_dra.NAMESPACE) or {}
    s = ds.get("status") or {}
    return s.get("desiredNumberScheduled") == nodes and s.get("numberReady") == nodes


def add_dra_driver(made: Made) -> None:
    """The driver's namespace and kubelet plugin, until the plugin is ready on every GPU node and the
    bed's DRA stand-in has published each one's ComputeDomain slice (doctor's dra-driver check reads both)."""
    ns = infra_dra.NAMESPACE
    if made.kube.get("v1", "Namespace", ns) is None:
        made.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}, wait_gone=True)
        wait_for(f"ServiceAccount default in {ns}", lambda: made.kube.get("v1", "ServiceAccount", "default", ns))
    label = made.values["accelerator"]["nodeLabel"]
    made.create(kubelet_plugin(label), wait_gone=True)
    gpu = gpu_node_names(made.kube, label)
    plugin = f"DaemonSet {ns}/{infra_dra.KUBELET_PLUGIN}"
    wait_for(f"{plugin} ready on {len(gpu)} GPU node(s)", lambda: kubelet_plugin_ready(made.kube, len(gpu)), 120)

    def published() -> bool:
        slices = made.kube.list("resource.k8s.io/v1", "ResourceSlice")
        on = {s["spec"].get("nodeName") for s in slices if s["spec"].get("driver") == infra_dra.COMPUTE_DOMAIN_DRIVER}
        return set(gpu) <= on

    wait_for(f"ResourceSlices of {infra_dra.COMPUTE_DOMAIN_DRIVER} on every GPU node", published, 60)


def token_secret(made: Made, keys: list[str]) -> dict[str, Any]:
    name = made.values["secrets"]["existingSecret"]
    meta = {"name": name, "namespace": made.namespace}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque", "data": dict.fromkeys(keys, MADE_UP_TOKEN)}


def token_keys(values: dict[str, Any]) -> list[str]:
    s = values["secrets"]
    return [k for k in (s["hfTokenKey"], s["wandbApiKeyKey"]) if k]


def add_token_secret(made: Made) -> None:
    made.kube.apply(token_secret(made, token_keys(made.values)))


def add_kueue(made: Made) -> None:
    """The queue infra.sh configures, until Kueue reports the LocalQueue active."""
    docs = infra_kueue.manifests(infra_options(made.values, made.namespace))
    for doc in docs:
        if doc["kind"] == "LocalQueue":
            made.kube.apply(doc)
        else:
            made.create(doc, wait_gone=True)  # cluster-wide: gone before another test makes them again
    lq = next(d for d in docs if d["kind"] == "LocalQueue")
    wait_for(f"LocalQueue {made.namespace}/{lq['metadata']['name']} active", lambda: local_queue_active(made.kube, made.namespace, lq), 60)


def local_queue_active(kube: Kube, namespace: str, lq: dict[str, Any]) -> bool:
    got = kube.get(KUEUE, "LocalQueue", lq["metadata"]["name"], namespace) or {}
    return any(c["type"] == "Active" and c["status"] == "True" for c in (got.get("status") or {}).get("conditions") or [])


def add_existing_claim(made: Made) -> None:
    """A Lustre PersistentVolume and the claim storage.existingClaim names, bound by Kubernetes."""
    claim, ns = made.values["storage"]["existingClaim"], made.namespace
    pv = f"{ns}-{claim}"
    made.create(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv},
            "spec": {
                "capacity": {"storage": "9000Gi"},
                "accessModes": ["ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "csi": {"driver": lustre_driver(made.rendered), "volumeHandle": f"testbed/us-central1-b/{pv}"},
                "claimRef": {"namespace": ns, "name": claim},
            },
        }
    )
    made.kube.apply(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": ns},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": pv,
                "resources": {"requests": {"storage": "9000Gi"}},
            },
        }
    )

    def bound() -> bool:
        pvc = made.kube.get("v1", "PersistentVolumeClaim", claim, ns) or {}
        return (pvc.get("status") or {}).get("phase") == "Bound"

    wait_for(f"claim {ns}/{claim} Bound", bound, 60)


def networks_of_another_release(made: Made, release: str = "other", namespace: str = "research") -> list[dict[str, Any]]:
    """The Network and GKENetworkParamSet objects `helm install` of another release made from the
    same network plan (network.createObjects true there), with the ownership metadata Helm adds."""
    values = copy.deepcopy(made.values)
    values["network"]["createObjects"] = True
    path = Path(made.cluster.kubeconfig).parent / f"{unique('other-values')}.yaml"
    path.write_text(yaml.safe_dump(values))
    other = render(configurations([path])[0], release, namespace)
    out = []
    for rendered in other.objects:
        if rendered.get("kind") in ("Network", "GKENetworkParamSet"):
            obj = copy.deepcopy(rendered)
            obj["metadata"].setdefault("annotations", {}).update(
                {"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": namespace}
            )
            obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "Helm"
            out.append(obj)
    return out


def add_networks_of_another_release(made: Made, change: Callable[[dict[str, Any]], None] | None = None) -> None:
    for obj in networks_of_another_release(made):
        if change is not None:
            change(obj)
        made.create(obj)


@contextlib.contextmanager
def installed_release(made: Made, values: Path, sets: Sequence[str] = ()) -> Iterator[Release]:
    """The release installed with the pinned Helm 4; then uninstalled, with what uninstall keeps
    cluster-wide (the docs' clean-up): the next test's release makes them again."""
    release = Release(helm_mod.pinned(helm_mod.PINS[0]), made.cluster, "nemo-rl", made.namespace)
    try:
        release.install([values], sets)
        yield release
    finally:
        release.uninstall(check=False)
        remove_cluster_scoped(made.kube, release.name)


# --- the ways a cluster is broken: each changes a healthy one, and undoes what it changed in it -----


def kuberay_crd(version: str) -> dict[str, Any]:
    """The RayCluster CRD as the test bed installed it for this KubeRay version (from its module)."""
    path = Path(module_dir(components.kuberay(version))) / "config" / "crd" / "bases" / "ray.io_rayclusters.yaml"
    return yaml.load(path.read_text(), Loader=yaml.CSafeLoader)


def _restore_crd(made: Made) -> None:
    crd = kuberay_crd(made.cluster.kuberay)
    made.kube.refresh()
    made.kube.apply(crd)
    wait_for(f"CRD {RAYCLUSTER_CRD} established again", lambda: crd_established(made.kube, RAYCLUSTER_CRD), 120)
    made.kube.refresh()


def without_kuberay(made: Made) -> None:
    made.undo.append(lambda: _restore_crd(made))
    delete(made.kube, "apiextensions.k8s.io/v1", "CustomResourceDefinition", RAYCLUSTER_CRD, wait_gone=True)


def with_an_older_raycluster_crd(made: Made) -> None:
    """The test bed's RayCluster CRD without headGroupSpec.headService, which the chart renders."""
    crd = kuberay_crd(made.cluster.kuberay)
    for version in crd["spec"]["versions"]:
        head = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"].get("headGroupSpec")
        if head:
            del head["properties"]["headService"]
    made.undo.append(lambda: _restore_crd(made))
    made.kube.apply(crd)

    def served_without() -> bool:
        got = made.kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", RAYCLUSTER_CRD) or {}
        v1 = next(v for v in got["spec"]["versions"] if v["name"] == "v1")
        return "headService" not in v1["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["headGroupSpec"]["properties"]

    wait_for("the older schema served", served_without, 60)


def without_the_rdma_installer(made: Made) -> None:
    delete(made.kube, "apps/v1", "DaemonSet", INSTALLER, installer_namespace(made.values), wait_gone=True)


def with_the_rdma_installer_kept_off_a_gpu_node(made: Made) -> None:
    """The installer's affinity excludes one GPU node: the DaemonSet controller removes its pod."""
    ns = installer_namespace(made.values)
    node = sorted(gpu_node_names(made.kube, made.values["accelerator"]["nodeLabel"]))[0]
    ds = installer_daemonset(ns)
    terms = ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    terms["nodeSelectorTerms"][0]["matchExpressions"].append({"key": "kubernetes.io/hostname", "operator": "NotIn", "values": [node]})
    made.kube.apply(ds)
    wait_for(f"no installer pod on {node}", lambda: node not in installer_pods(made.kube, ns), 120)


def with_networks_of_another_release(made: Made) -> None:
    add_networks_of_another_release(made)


def with_existing_networks_on_another_subnet(made: Made) -> None:
    """The network objects another release made, rdma-1's on another subnet than the values'."""
    rdma1 = made.values["network"]["rdma"][1]["name"]

    def other_subnet(obj: dict[str, Any]) -> None:
        if obj["kind"] == "GKENetworkParamSet" and obj["metadata"]["name"] == rdma1:
            obj["spec"]["vpcSubnet"] = "someone-elses-subnet"

    add_networks_of_another_release(made, other_subnet)


def with_an_existing_network_missing(made: Made) -> None:
    """Another release's network objects, without rdma-3's GKENetworkParamSet."""
    name = made.values["network"]["rdma"][3]["name"]
    made.kube.delete(NETWORKING, "GKENetworkParamSet", name)


def without_the_lustre_driver(made: Made) -> None:
    made.kube.delete("storage.k8s.io/v1", "CSIDriver", lustre_driver(made.rendered))


def without_the_token_secret(made: Made) -> None:
    made.kube.delete("v1", "Secret", made.values["secrets"]["existingSecret"], made.namespace)


def with_a_token_key_missing(made: Made) -> None:
    name = made.values["secrets"]["existingSecret"]
    made.kube.delete("v1", "Secret", name, made.namespace)
    made.kube.apply(token_secret(made, [k for k in token_keys(made.values) if k != made.values["secrets"]["wandbApiKeyKey"]]))


def without_the_local_queue(made: Made) -> None:
    made.kube.delete(KUEUE, "LocalQueue", made.values["kueue"]["queueName"], made.namespace)


def _cluster_queue(made: Made) -> dict[str, Any]:
    """The ClusterQueue infra.sh configures for these values."""
    return next(d for d in infra_kueue.manifests(infra_options(made.values, made.namespace)) if d["kind"] == "ClusterQueue")


def _condition(kube: Kube, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    got = kube.get(KUEUE, kind, name, namespace) or {}
    return next((c for c in (got.get("status") or {}).get("conditions") or [] if c["type"] == "Active"), {})


def without_the_cluster_queue(made: Made) -> None:
    """The LocalQueue's ClusterQueue deleted, until Kueue reports the LocalQueue inactive for it."""
    delete(made.kube, KUEUE, "ClusterQueue", infra_kueue.CLUSTER_QUEUE, wait_gone=True)
    queue = made.values["kueue"]["queueName"]
    wait_for(
        "the LocalQueue inactive",
        lambda: _condition(made.kube, "LocalQueue", queue, made.namespace).get("reason") == "ClusterQueueDoesNotExist",
        60,
    )


def with_a_cluster_queue_over_a_missing_flavor(made: Made) -> None:
    """The ClusterQueue's GPU flavor renamed to one that does not exist, until Kueue reports it inactive."""
    cq = _cluster_queue(made)
    cq["spec"]["resourceGroups"][0]["flavors"][-1]["name"] = "no-such-flavor"
    made.kube.apply(cq)
    name = cq["metadata"]["name"]
    wait_for("the ClusterQueue inactive", lambda: _condition(made.kube, "ClusterQueue", name).get("status") == "False", 60)


def with_a_cluster_queue_too_small(made: Made) -> None:
    """The ClusterQueue's nominal nvidia.com/gpu quota one node's worth."""
    cq = _cluster_queue(made)
    per_node = str(requests(made.rendered.workers()[0][2].spec)["nvidia.com/gpu"])
    for flavor in cq["spec"]["resourceGroups"][0]["flavors"]:
        for r in flavor["resources"]:
            if r["name"] == "nvidia.com/gpu" and r["nominalQuota"] != "0":
                r["nominalQuota"] = per_node
    made.kube.apply(cq)


def with_baseline_pod_security(made: Made) -> None:
    labels = dict(NAMESPACE_LABELS) | {"pod-security.kubernetes.io/enforce": "baseline"}
    made.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": made.namespace, "labels": labels}})


def with_a_gpu_quota_too_small(made: Made) -> None:
    """A ResourceQuota for one worker's GPUs, once the quota controller has reported its use."""
    per_node = int(requests(made.rendered.workers()[0][2].spec)["nvidia.com/gpu"])
    hard = {"requests.nvidia.com/gpu": str(per_node)}
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu-quota", "namespace": made.namespace}}
    made.kube.apply(quota | {"spec": {"hard": hard}})

    def reported() -> bool:
        got = made.kube.get("v1", "ResourceQuota", "gpu-quota", made.namespace) or {}
        return "requests.nvidia.com/gpu" in ((got.get("status") or {}).get("used") or {})

    wait_for("the quota's use reported", reported, 60)


def with_restricted_pod_security(made: Made) -> None:
    labels = dict(NAMESPACE_LABELS) | {"pod-security.kubernetes.io/enforce": "restricted"}
    made.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": made.namespace, "labels": labels}})


def _quota(made: Made, name: str, hard: dict[str, str]) -> None:
    """A ResourceQuota, once the quota controller has reported its use (the admission plugin
    refuses against `used`)."""
    meta = {"name": name, "namespace": made.namespace}
    made.kube.apply({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": meta, "spec": {"hard": hard}})

    def reported() -> bool:
        got = made.kube.get("v1", "ResourceQuota", name, made.namespace) or {}
        return set(hard) <= set((got.get("status") or {}).get("used") or {})

    wait_for(f"ResourceQuota {name}'s use reported", reported, 60)


def with_a_memory_quota_below_a_worker(made: Made) -> None:
    """Room for less memory than one GPU worker requests (the tutorial's: 2500Gi)."""
    _quota(made, "memory-quota", {"requests.memory": "1000Gi"})


def with_a_cpu_limit_quota(made: Made) -> None:
    """A quota on limits.cpu: the quota admission plugin then refuses every container without a CPU
    limit (the Jobs' set only a memory limit)."""
    _quota(made, "cpu-limits", {"limits.cpu": "10000"})


def with_a_limit_range_below_the_workers(made: Made) -> None:
    """A LimitRange whose largest container memory is below the workers' limit (2740Gi)."""
    limits = [{"type": "Container", "max": {"memory": "1000Gi"}}]
    meta = {"name": "max", "namespace": made.namespace}
    made.kube.apply({"apiVersion": "v1", "kind": "LimitRange", "metadata": meta, "spec": {"limits": limits}})


def with_a_policy_against_host_paths(made: Made) -> None:
    """A policy engine's rule in the namespace, as an in-tree ValidatingAdmissionPolicy (CEL): no pod
    with a hostPath volume."""
    name = unique("no-host-path")
    api = "admissionregistration.k8s.io/v1"
    rules = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]
    made.create(
        {
            "apiVersion": api,
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": rules},
                "validations": [
                    {
                        "expression": "!has(object.spec.volumes) || object.spec.volumes.all(v, !has(v.hostPath))",
                        "message": "no hostPath volumes in this namespace",
                    }
                ],
            },
        }
    )
    selector = {"matchLabels": {"kubernetes.io/metadata.name": made.namespace}}
    binding = {"policyName": name, "validationActions": ["Deny"], "matchResources": {"namespaceSelector": selector}}
    made.create({"apiVersion": api, "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name}, "spec": binding})
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": made.namespace}}
    probe["spec"] = {"containers": [{"name": "c", "image": "x"}], "volumes": [{"name": "h", "hostPath": {"path": "/tmp"}}]}

    def enforced() -> bool:  # the policy's informer has it: a dry-run pod with a hostPath is denied
        try:
            made.kube.resource("v1", "Pod").create(body=probe, namespace=made.namespace, dry_run="All")
        except ApiException as e:  # the refusal is what is waited for
            return "no hostPath volumes" in str(e)
        return False

    wait_for("the ValidatingAdmissionPolicy enforced", enforced, 60)


def with_kuberay_installed_by_its_chart(made: Made, image: str) -> None:
    """The operator's Deployment as KubeRay's Helm chart names and labels it, with no replica: the
    test bed's operator runs as a process."""
    labels = {"app.kubernetes.io/name": "kuberay-operator"}
    ns = "kuberay-system"
    made.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    made.undo.append(lambda: delete(made.kube, "v1", "Namespace", ns, wait_gone=True))
    template = {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "kuberay-operator", "image": image}]}}
    spec = {"replicas": 0, "selector": {"matchLabels": labels}, "template": template}
    meta = {"name": "kuberay-operator", "namespace": ns, "labels": labels}
    made.kube.apply({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": spec})


# --- users with limited rights --------------------------------------------------------------------


def user_kubeconfig(made: Made, bed: Testbed, folder: Path, rules: list[dict[str, Any]], cluster_rules: list[dict[str, Any]]) -> Path:
    """A kubeconfig of a ServiceAccount in the release's namespace holding a Role with `rules` there
    and a ClusterRole with `cluster_rules`, its token from the TokenRequest API."""
    kube, ns = made.kube, made.namespace
    name = unique("doctor-user")
    kube.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns}})
    subject = [{"kind": "ServiceAccount", "name": name, "namespace": ns}]
    rbac = "rbac.authorization.k8s.io/v1"
    if rules:
        kube.apply({"apiVersion": rbac, "kind": "Role", "metadata": {"name": name, "namespace": ns}, "rules": rules})
        ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}
        binding = {"name": name, "namespace": ns}
        kube.apply({"apiVersion": rbac, "kind": "RoleBinding", "metadata": binding, "roleRef": ref, "subjects": subject})
    if cluster_rules:
        made.create({"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": name}, "rules": cluster_rules})
        ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}
        made.create({"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": {"name": name}, "roleRef": ref, "subjects": subject})
    token = kube.token(name, ns)
    context = Context(name, made.cluster.server, Path(bed.ca), token=token)
    return write_kubeconfig(folder / f"{name}.kubeconfig", [context])
