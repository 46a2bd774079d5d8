"""The launcher against the test bed: the chart installed with a pinned Helm, the launcher run as
a local process with a token of its real ServiceAccount (TokenRequest) in a service-account
folder, the test bed's CA and the cluster's API port in KUBERNETES_SERVICE_*, as the kubelet gives
them to the launcher pod; the Ray side is a small local Ray cluster whose GPU nodes follow the
RayCluster's worker pods in the test bed (`RayBridge`); Kueue's queue objects as the infra script
applies them, and what Kueue reports of them."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from bed_helpers import CHART, RAY, Release, namespace, remove_cluster_scoped, unique

from generator.helm.runner import Helm
from generator.infra import kueue as infra_kueue
from generator.rehearse.cluster import LocalCluster
from generator.rehearse.topology import NodeSpec
from generator.values.build import Options, build
from testbed.bed import Cluster, Testbed, default_infra
from testbed.kube import Kube, wait_for
from tests.launcher.launcher_harness import ClusterHead, start_launcher

KUEUE = "kueue.x-k8s.io/v1beta2"
QUEUE = "gpu-queue"
GPU_GROUP = "gpu"
GPUS_PER_NODE = 8  # the test bed's GPU pool: H200, 8 GPUs a node (testbed.bed.default_infra)
HEAD = NodeSpec("head", "head", 2, 0, None)
LAUNCHER_FIELD_MANAGER = "nemo-rl-gke-launcher"


def values_file(folder: Path, name: str = "values", **options: Any) -> Path:
    """The generator's values for a 2-node H200 release (the test bed's GPU pool), with options."""
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(build(Options(gpu="h200", nodes=2, **options)), sort_keys=False))
    return path


class LauncherRelease(Release):
    """A release of the chart, upgraded with the extra flags a user may add (`--force-conflicts`,
    `--server-side=false`)."""

    def upgrade_with(self, values: Sequence[Path], flags: Sequence[str] = (), check: bool = True) -> subprocess.CompletedProcess[str]:
        args = ["upgrade", self.name, str(CHART)]
        for v in values:
            args += ["-f", str(v)]
        return self._run([*args, *flags], check)


@dataclass
class Installed:
    """One release on one cluster of the test bed, with what the launcher needs to reach it."""

    bed: Testbed
    cluster: Cluster
    kube: Kube
    release: LauncherRelease
    values: Path

    @property
    def name(self) -> str:
        return self.release.name

    @property
    def namespace(self) -> str:
        return self.release.namespace

    def raycluster(self) -> dict[str, Any]:
        rc = self.kube.get(RAY, "RayCluster", self.name, self.namespace)
        assert rc is not None, f"RayCluster {self.namespace}/{self.name} is gone"
        return rc

    def pods(self, node_type: str = "") -> list[dict[str, Any]]:
        selector = f"ray.io/cluster={self.name}" + (f",ray.io/node-type={node_type}" if node_type else "")
        return self.kube.list("v1", "Pod", self.namespace, label_selector=selector)

    def launch_spec(self) -> dict[str, Any]:
        """The launch spec of the release's current launcher Job (its ConfigMap, as installed)."""
        maps = self.kube.list("v1", "ConfigMap", self.namespace, label_selector=f"app.kubernetes.io/instance={self.name}")
        found = [json.loads(m["data"]["launch.json"]) for m in maps if "launch.json" in (m.get("data") or {})]
        assert len(found) == 1, f"expected one launch spec in the release, found {len(found)}"
        return found[0]

    def service_account(self, folder: Path) -> Path:
        """The folder the kubelet mounts into the launcher pod: a token of the release's launcher
        ServiceAccount from the TokenRequest API, the cluster's CA and the namespace."""
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "token").write_text(self.kube.token(f"{self.name}-launcher", self.namespace))
        shutil.copyfile(self.bed.ca, folder / "ca.crt")
        (folder / "namespace").write_text(self.namespace)
        return folder

    def pod_environment(self) -> dict[str, str]:
        """What Kubernetes puts in every pod's environment for its API server (here on loopback)."""
        return {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(self.cluster.port)}

    def managed_fields(self, manager: str) -> list[dict[str, Any]]:
        """The RayCluster's managedFields entries of one field manager (the server's record)."""
        return [m for m in self.raycluster()["metadata"].get("managedFields") or [] if m.get("manager") == manager]

    def uninstall(self) -> None:
        self.release.uninstall(check=False)
        remove_cluster_scoped(self.kube, self.name)


def install(
    bed: Testbed,
    kuberay: str,
    helm: Helm,
    folder: Path,
    *,
    ns: str = "",
    values: Path | None = None,
    sets: Sequence[str] = (),
    name: str = "",
) -> Installed:
    """The chart installed into a namespace labelled as the infra script labels it."""
    cluster = bed.cluster(kuberay)
    kube = cluster.kube()
    ns = ns or namespace(kube, unique("launcher"))
    release = LauncherRelease(helm, cluster, name or unique("rl"), ns)
    values = values or values_file(folder)
    installed = Installed(bed, cluster, kube, release, values)
    try:
        release.install([values], sets)
    except BaseException:
        installed.uninstall()  # what a failed install created, cluster-scoped objects included
        raise
    return installed


def remove_namespace(kube: Kube, ns: str) -> None:
    kube.delete("v1", "Namespace", ns)


# --- the run's spec, as the chart renders it, for a local launcher ---------------------------


def local_spec(installed: Installed, head: ClusterHead, folder: Path, run_id: str, **changes: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """The installed launch spec with what a local process needs changed: the local Ray head,
    the service-account folder, folders for checkpoints and the outcome, short waits; and the
    environment of the launcher pod (API server address) over the local Ray cluster's."""
    spec = installed.launch_spec()
    for key in ("address", "metadata", "wait_for_files", "config_verdict", "max_num_steps", "expected_interfaces", "ray_version"):
        spec.pop(key, None)  # the harness sets the address and metadata; nothing to wait for or compare here
    sa = installed.service_account(folder / "serviceaccount")
    spec["gpu_release"] = dict(spec["gpu_release"], service_account_dir=str(sa))
    (folder / "checkpoints").mkdir(exist_ok=True)
    spec |= {
        "submission_id": run_id,
        "checkpoint_dir": str(folder / "checkpoints"),
        "outcome_dir": str(folder / "volume-launcher"),
        "outcome_volume_dir": "/data/nemo-rl/run/launcher",
        "timeouts": {"gpus_s": 120, "head_s": 60, "release_s": 120},
    }
    return spec | changes, head.env() | installed.pod_environment()


# --- the Ray side ------------------------------------------------------------------------------


@dataclass
class RayBridge:
    """One local Ray GPU node for each worker pod of the RayCluster that is Running in the test
    bed, added when the pod runs and removed when it is gone: kwok runs no containers, so no
    `ray start` runs in the pods. The head pod is played by the local cluster's head throughout
    (it is never removed, also while KubeRay has deleted the head pod). Ray starts and stops
    nodes from the main thread only, so `sync` is called there, between looks at the launcher."""

    ray: LocalCluster
    installed: Installed
    played: dict[str, str] = field(default_factory=dict)  # pod name -> Ray node name
    history: list[str] = field(default_factory=list)  # "+pod" / "-pod", in order

    def running_workers(self) -> list[str]:
        pods = self.installed.pods("worker")
        return sorted(
            p["metadata"]["name"]
            for p in pods
            if (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        )

    def sync(self) -> None:
        running = self.running_workers()
        for pod in [p for p in self.played if p not in running]:
            self.ray.remove(self.played.pop(pod))
            self.history.append(f"-{pod}")
        for pod in [p for p in running if p not in self.played]:
            self.ray.add(NodeSpec(pod, GPU_GROUP, 1, GPUS_PER_NODE, None))
            self.played[pod] = pod
            self.history.append(f"+{pod}")

    def wait_for_workers(self, count: int, timeout_s: float = 180) -> list[str]:
        """Sync until `count` worker pods are played (0: until none is)."""

        def done() -> list[str] | bool:
            self.sync()
            return sorted(self.played) if len(self.played) == count else False

        return wait_for(f"{count} worker pods of {self.installed.name} Running and played by Ray nodes", done, timeout_s, 0.3) or []

    def close(self) -> None:
        """Remove every node this bridge added (the next test starts with the head alone)."""
        for pod in list(self.played):
            self.ray.remove(self.played.pop(pod))

    def gpu_nodes(self) -> list[str]:
        return [n.spec.name for n in self.ray.nodes if n.spec.gpus > 0]


def run_launcher(
    bridge: RayBridge,
    folder: Path,
    spec: dict[str, Any],
    env: dict[str, str],
    timeout_s: float = 300,
) -> tuple[int, str]:
    """The launcher as a local process to its end, the bridge following the test bed meanwhile;
    (exit status, output)."""
    head = ClusterHead(bridge.ray)
    proc = start_launcher(head, folder, env=env, **spec)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        bridge.sync()
        time.sleep(0.3)
    if proc.poll() is None:
        proc.kill()
    proc.wait(30)
    reader.join(30)
    bridge.sync()
    for line in lines:  # what the launcher did to the cluster, for `pytest -s`
        if any(w in line for w in ("GPU workers gone", "cluster ready:", "resumed", "restored", "suspended R", "scaled")):
            print(line.rstrip(), flush=True)
    return proc.returncode, "".join(lines)


# --- Kueue ------------------------------------------------------------------------------------


def apply_queues(kube: Kube, ns: str) -> list[dict[str, Any]]:
    """The Kueue objects the infra script applies for the test bed's cluster (`--kueue`), with
    the LocalQueue in `ns`."""
    docs = infra_kueue.manifests(dataclasses.replace(default_infra(), kueue=True, kueue_queue=QUEUE, namespace=ns))
    kube.apply_all(docs)
    return docs


def workloads(kube: Kube, ns: str, owner: str) -> list[dict[str, Any]]:
    found = kube.list(KUEUE, "Workload", ns)
    return [w for w in found if any(o["name"] == owner for o in w["metadata"].get("ownerReferences") or [])]


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def admitted(wl: dict[str, Any]) -> bool:
    return condition(wl, "Admitted").get("status") == "True" and not wl["metadata"].get("deletionTimestamp")


def pod_set_counts(wl: dict[str, Any]) -> dict[str, int]:
    return {p["name"]: p["count"] for p in wl["spec"]["podSets"]}


def gpu_usage(kube: Kube) -> int:
    """The GPUs the ClusterQueue has admitted (its status, every flavor)."""
    cq = kube.get(KUEUE, "ClusterQueue", infra_kueue.CLUSTER_QUEUE) or {}
    usage = (cq.get("status") or {}).get("flavorsUsage") or []
    return sum(int(r["total"]) for f in usage for r in f["resources"] if r["name"] == "nvidia.com/gpu")


def one_admitted(kube: Kube, ns: str, owner: str, gpu_workers: int | None = None) -> dict[str, Any] | None:
    """The one admitted Workload of a RayCluster (with that many GPU workers, when given)."""
    wls = [w for w in workloads(kube, ns, owner) if admitted(w)]
    if len(wls) != 1 or (gpu_workers is not None and pod_set_counts(wls[0]).get(GPU_GROUP) != gpu_workers):
        return None
    return wls[0]
