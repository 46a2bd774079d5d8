"""One test bed: one etcd, and one cluster per KubeRay version (each its own kube-apiserver under
its own etcd prefix, kube-controller-manager, kube-scheduler, kwok, the KubeRay operator of that
version with its own CRDs, Kueue, NVIDIA's DRA driver's ComputeDomain CRD and the DRA stand-in
(testbed/dra_stand_in.py: DeviceClasses, ResourceSlices, the channel claim templates)), with the
simulated GKE nodes of an infra configuration.

Two API servers, not one, because a CRD is cluster-wide: each operator version gets the CRDs of
its own release, as on a real cluster.

`up` starts everything and records it in `<state>/testbed.json` (and the processes in
`processes.json`); `down` stops every recorded process by PID and deletes the state folder;
`load` reads the record back. Any failure during `up` stops what was started before it is raised.
"""

from __future__ import annotations

import base64
import json
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from generator.core.paths import ROOT
from generator.gke.profiles import DEFAULT_ACCELERATOR, profile
from generator.gke.provisioning import example_reservation, machine_default
from generator.infra.options import InfraOptions
from testbed import components, components_argv, dra_stand_in, kueue_setup, nodes, pki
from testbed.build import build, module_dir
from testbed.kube import Kube, api_client, crd_established, wait_for
from testbed.kubeconfig import Context
from testbed.kubeconfig import write as write_kubeconfig
from testbed.processes import Supervisor, free_port, http_ok, tls_to, tls_unverified

RECORD = "testbed.json"
GKE_NETWORKING_CRDS = ROOT / "vendor" / "gke-networking-api"
DRA_DRIVER_CRDS = ROOT / "vendor" / "dra-driver-nvidia-gpu"
START_TIMEOUT_S = 180  # per process, on a loaded two-core machine


def default_infra(gpu: str = DEFAULT_ACCELERATOR, nodes_per_pool: int = 2) -> InfraOptions:
    """The Standard cluster `python -m generator infra --gpu GPU` builds: a pool of 2 nodes of the
    machine's default provisioning (Spot; for a machine offered by reservation only, the reservation
    the repository's generated files name)."""
    p = profile(gpu)
    prov = machine_default(p)
    reservation = example_reservation(p) if prov == "reservation" else ""
    return InfraOptions(
        gpu=gpu,
        project="testbed",
        region="us-central1",
        zone="us-central1-b",
        nodes=nodes_per_pool,
        provisioning=prov,
        reservation=reservation,
    )


@dataclass
class Cluster:
    """One API server and what runs against it."""

    kuberay: str  # the operator's version
    port: int
    kubeconfig: str  # the admin's, this cluster only

    @property
    def name(self) -> str:
        return f"testbed-kuberay-{self.kuberay}"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def kube(self) -> Kube:
        return Kube(api_client(Path(self.kubeconfig)))


@dataclass
class Testbed:
    state: str
    ca: str
    kubeconfig: str  # every cluster as a context, the newest KubeRay's current
    clusters: list[Cluster]
    kubernetes: str
    timings: dict[str, float] = field(default_factory=dict)

    def cluster(self, kuberay: str | None = None) -> Cluster:
        if kuberay is None:
            return self.clusters[-1]
        for c in self.clusters:
            if c.kuberay == kuberay:
                return c
        raise KeyError(f"no cluster with KubeRay {kuberay} in this test bed")


def load(state: Path) -> Testbed | None:
    path = state / RECORD
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    data["clusters"] = [Cluster(**c) for c in data["clusters"]]
    return Testbed(**data)


def down(state: Path) -> list[str]:
    """Stop every process of the test bed in `state` and delete its data; what was running."""
    if not state.exists():
        return []
    stopped = Supervisor(state).stop_all()
    shutil.rmtree(state, ignore_errors=True)
    return stopped


def _stage_file(kwok_dir: Path, out: Path) -> Path:
    """kwok's own stage files, from its module: nodes become Ready and keep their leases; pods
    become Running and Ready, Job pods complete, deleted pods go."""
    stage = kwok_dir / "kustomize" / "stage"
    files = [
        stage / "node" / "fast" / "node-initialize.yaml",
        stage / "node" / "heartbeat-with-lease" / "node-heartbeat-with-lease.yaml",
        stage / "pod" / "fast" / "pod-ready.yaml",
        stage / "pod" / "fast" / "pod-complete.yaml",
        stage / "pod" / "fast" / "pod-delete.yaml",
    ]
    out.write_text("\n---\n".join(f.read_text() for f in files))
    return out


def _crds(folder: Path) -> list[dict[str, Any]]:
    out = []
    for f in sorted(folder.glob("*.yaml")):
        # libyaml's loader: the CRDs are megabytes of YAML, seconds for the pure-Python one
        out += [d for d in yaml.load_all(f.read_text(), Loader=yaml.CSafeLoader) if d and d.get("kind") == "CustomResourceDefinition"]
    return out


class _Starter:
    """Brings one test bed up, phase by phase across its clusters, timing each phase."""

    def __init__(
        self, state: Path, kuberay: Sequence[components.Component], detached: bool, log: Callable[[str], None], dranet: bool = False
    ) -> None:
        self.state = state
        self.dranet = dranet
        self.operators = list(kuberay)
        self.log = log
        self.sup = Supervisor(state, detached=detached)
        self.timings: dict[str, float] = {}
        self._t = time.monotonic()

    def phase(self, name: str) -> None:
        now = time.monotonic()
        self.timings[name] = round(now - self._t, 2)
        self._t = now

    def run(self, infra: InfraOptions) -> Testbed:
        st = self.state
        certs = st / "pki"
        ca = pki.Authority(certs)
        api_pair = ca.serving("apiserver")
        sa = pki.service_account_key(certs)
        serving = ca.serving("serving")
        keys = components_argv.Pki(ca.ca, api_pair.cert, api_pair.key, sa.cert, sa.key, serving.cert, serving.key)
        admin = ca.client("admin", "testbed-admin", ("system:masters",))
        kcm = ca.client("kube-controller-manager", "system:kube-controller-manager")
        sched = ca.client("kube-scheduler", "system:kube-scheduler")
        self.phase("credentials")

        etcd_port, peer = free_port(), free_port()
        etcd_bin = components.ETCD.path("etcd")
        self.sup.start("etcd", components_argv.etcd(etcd_bin, st / "etcd", etcd_port, peer))
        self.sup.wait("etcd", http_ok(f"http://127.0.0.1:{etcd_port}/health"), START_TIMEOUT_S)
        self.phase("etcd")

        cp = components.CONTROL_PLANE
        clusters: list[Cluster] = []
        for op in self.operators:
            port = free_port()
            folder = st / op.version
            folder.mkdir(parents=True, exist_ok=True)
            admin_context = Context("admin", f"https://127.0.0.1:{port}", ca.ca, admin.cert, admin.key)
            kc = write_kubeconfig(folder / "admin.kubeconfig", [admin_context])
            cluster = Cluster(op.version, port, str(kc))
            clusters.append(cluster)
            argv = components_argv.apiserver(cp.path("kube-apiserver"), keys, port, etcd_port, f"/registry-{op.version}")
            self.sup.start(f"kube-apiserver-{op.version}", argv)
        admin_tls = tls_to(ca.ca, admin.cert, admin.key)
        for c in clusters:
            self.sup.wait(f"kube-apiserver-{c.kuberay}", http_ok(f"{c.server}/readyz", admin_tls), START_TIMEOUT_S)
        self.phase("kube-apiserver")

        kwok_dir = Path(module_dir(components.KWOK))
        stages = _stage_file(kwok_dir, st / "kwok-stages.yaml")
        for c in clusters:
            folder = st / c.kuberay
            kcm_kc = write_kubeconfig(folder / "kcm.kubeconfig", [Context("kcm", c.server, ca.ca, kcm.cert, kcm.key)])
            sched_kc = write_kubeconfig(folder / "scheduler.kubeconfig", [Context("scheduler", c.server, ca.ca, sched.cert, sched.key)])
            ports = {name: free_port() for name in ("kcm", "scheduler", "kwok")}
            self.sup.start(
                f"kube-controller-manager-{c.kuberay}",
                components_argv.controller_manager(cp.path("kube-controller-manager"), kcm_kc, keys, ports["kcm"], folder / "kcm-certs"),
            )
            self.sup.start(
                f"kube-scheduler-{c.kuberay}",
                components_argv.scheduler(cp.path("kube-scheduler"), sched_kc, ports["scheduler"], folder / "scheduler-certs"),
            )
            self.sup.start(
                f"kwok-{c.kuberay}",
                components_argv.kwok(
                    components.KWOK.path("kwok"), Path(c.kubeconfig), stages, keys, ports["kwok"], annotation=nodes.KWOK_ANNOTATION
                ),
            )
            for name, url, ctx in (
                ("kube-controller-manager", f"https://127.0.0.1:{ports['kcm']}/healthz", tls_unverified()),
                ("kube-scheduler", f"https://127.0.0.1:{ports['scheduler']}/healthz", tls_unverified()),
                ("kwok", f"https://127.0.0.1:{ports['kwok']}/healthz", tls_unverified()),
            ):
                self.sup.wait(f"{name}-{c.kuberay}", http_ok(url, ctx), START_TIMEOUT_S)
        self.phase("controllers")

        kueue_dir = Path(module_dir(components.KUEUE))
        gke_crds = _crds(_newest(GKE_NETWORKING_CRDS)) + _crds(_newest(DRA_DRIVER_CRDS))
        kueue_crds = _crds(kueue_dir / "config" / "components" / "crd" / "bases")
        webhook_manifests = (kueue_dir / "config" / "components" / "webhook" / "manifests.yaml").read_text()
        ca_bundle = base64.b64encode(ca.ca_pem).decode()
        crd_sets = [_crds(Path(module_dir(op)) / "config" / "crd" / "bases") + kueue_crds + gke_crds for op in self.operators]
        # One thread per cluster: each API server digests its megabytes of CRDs on its own.
        with ThreadPoolExecutor(max_workers=len(clusters)) as pool:
            list(pool.map(_install_crds, clusters, crd_sets))
        waits = []
        for c, op in zip(clusters, self.operators, strict=True):
            kube = c.kube()
            folder = st / c.kuberay
            ports = {name: free_port() for name in ("ray-metrics", "ray-probe", "kueue-webhook", "kueue-health")}
            self.sup.start(
                f"kuberay-{c.kuberay}",
                components_argv.kuberay(op.path("ray-operator"), Path(c.kubeconfig), ports["ray-metrics"], ports["ray-probe"]),
            )
            cert_dir = folder / "kueue-certs"
            kueue_setup.install_certs(serving.cert, serving.key, cert_dir)
            cfg = folder / "kueue.yaml"
            cfg.write_text(yaml.safe_dump(kueue_setup.config(ports["kueue-webhook"], ports["kueue-health"], cert_dir)))
            hooks = kueue_setup.webhook_configurations(webhook_manifests, ports["kueue-webhook"], ca_bundle, c.kuberay.replace(".", "-"))
            kube.apply_all(hooks)
            env = {"KUBECONFIG": c.kubeconfig, "PATH": "/usr/bin:/bin"}
            self.sup.start(f"kueue-{c.kuberay}", components_argv.kueue(components.KUEUE.path("kueue"), cfg), env=env)
            dra_stand_in.install(kube)
            ready = folder / "dra-stand-in.ready"
            argv = [sys.executable, "-m", "testbed.dra_stand_in", f"--kubeconfig={c.kubeconfig}", f"--ready={ready}"]
            self.sup.start(f"dra-stand-in-{c.kuberay}", argv, cwd=ROOT)
            self.sup.wait(f"dra-stand-in-{c.kuberay}", ready.exists, START_TIMEOUT_S)
            waits += [
                (f"kuberay-{c.kuberay}", f"http://127.0.0.1:{ports['ray-probe']}/readyz"),
                (f"kueue-{c.kuberay}", f"http://127.0.0.1:{ports['kueue-health']}/readyz"),
            ]
        self.phase("crds")
        for name, url in waits:
            took = self.sup.wait(name, http_ok(url), START_TIMEOUT_S)
            self.log(f"    {name} ready after {took:.1f} s more")
        self.phase("operators")

        for c in clusters:
            kube = c.kube()
            # The controller-manager's service-account controller makes `default` in every namespace;
            # until it has, pods are refused.
            wait_for("the default ServiceAccount", lambda k=kube: k.get("v1", "ServiceAccount", "default", "default"))
            add_nodes(kube, nodes.cluster_nodes(infra, dranet=self.dranet))
        self.phase("nodes")

        contexts = [Context(c.name, c.server, ca.ca, admin.cert, admin.key) for c in clusters]
        kubeconfig = write_kubeconfig(st / "kubeconfig", contexts, current=contexts[-1].name)
        bed = Testbed(str(st), str(ca.ca), str(kubeconfig), clusters, components.CONTROL_PLANE.version, self.timings)
        record = asdict(bed)
        (st / RECORD).write_text(json.dumps(record, indent=1))
        return bed


def _newest(folder: Path) -> Path:
    """The newest version's folder of a vendored project."""
    return folder / sorted(p.name for p in folder.iterdir() if p.is_dir())[-1]


def _install_crds(cluster: Cluster, crds: list[dict[str, Any]]) -> None:
    kube = cluster.kube()
    kube.apply_all(crds)
    for crd in crds:
        name = crd["metadata"]["name"]
        wait_for(f"CRD {name} established", lambda n=name: crd_established(kube, n))
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}})


def add_nodes(kube: Kube, objs: list[dict[str, Any]], timeout_s: float = 120) -> None:
    """Create simulated nodes and wait until kwok reports each Ready."""
    for obj in objs:
        kube.apply(obj)
    for obj in objs:
        name = obj["metadata"]["name"]
        wait_for(f"node {name} Ready", lambda n=name: node_ready(kube, n), timeout_s)


def node_ready(kube: Kube, name: str) -> bool:
    node = kube.get("v1", "Node", name) or {}
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions") or [])


def up(
    state: Path,
    infra: InfraOptions | None = None,
    kuberay: Sequence[str] = (),
    detached: bool = False,
    log: Callable[[str], None] = print,
    *,
    dranet: bool = False,
) -> Testbed:
    """Build what is missing, then start a test bed in `state` (which must not hold a running one);
    `dranet`: its GPU pools made with managed DRANET."""
    if load(state) is not None or Supervisor(state).records():
        down(state)
    state.mkdir(parents=True, exist_ok=True)
    operators = [components.kuberay(v) for v in kuberay] if kuberay else list(components.KUBERAY)
    start = time.monotonic()
    build([components.ETCD, components.CONTROL_PLANE, components.KWOK, *operators, components.KUEUE], log=log)
    built = time.monotonic() - start
    starter = _Starter(state, operators, detached, log, dranet)
    try:
        bed = starter.run(infra or default_infra())
    except BaseException:
        starter.sup.stop_all()
        raise
    bed.timings = {"build": round(built, 2), **bed.timings}
    (state / RECORD).write_text(json.dumps(asdict(bed), indent=1))
    return bed
