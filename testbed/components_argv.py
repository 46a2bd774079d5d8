"""The command line of each test bed process: everything binds to 127.0.0.1, every client reaches
the API server with a certificate of the test bed's CA, leader election is off (one replica each).

Prior art read for the flags: controller-runtime's envtest (API server and etcd) and kwokctl's
binary runtime (every component). The admission plugins are Kubernetes' defaults (PodSecurity,
ServiceAccount, LimitRanger, ResourceQuota, the webhooks, ...) plus the two GKE enables that change
what pods and nodes get: ExtendedResourceToleration (a pod asking for `nvidia.com/gpu` tolerates
the GPU taint, as GKE's GPU documentation says) and NodeRestriction.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SERVICE_CIDR = "10.96.0.0/16"  # data only: nothing dials a Service address
# Pod addresses on loopback: should anything dial a simulated pod (the API server's pod proxy, an
# operator), the packet stays on this machine and is refused. Kubernetes refuses loopback addresses
# in Endpoints and EndpointSlices, so a Service of simulated pods has no endpoints and the API
# server's service proxy answers 503 without dialing anything.
POD_CIDR = "127.16.0.1/16"
ISSUER = "https://kubernetes.default.svc.cluster.local"


@dataclass(frozen=True)
class Pki:
    ca: Path
    apiserver_cert: Path
    apiserver_key: Path
    sa_pub: Path
    sa_key: Path
    serving_cert: Path  # for kwok's and Kueue's own servers
    serving_key: Path


def etcd(binary: Path, data: Path, client_port: int, peer_port: int) -> list[str]:
    return [
        str(binary),
        "--name=testbed",
        f"--data-dir={data}",
        f"--listen-client-urls=http://127.0.0.1:{client_port}",
        f"--advertise-client-urls=http://127.0.0.1:{client_port}",
        f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
        f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
        f"--initial-cluster=testbed=http://127.0.0.1:{peer_port}",
        "--listen-metrics-urls=",
        "--unsafe-no-fsync",  # a throwaway store: durability buys nothing and costs disk flushes
        "--quota-backend-bytes=2147483648",
        "--log-level=warn",
    ]


def apiserver(binary: Path, pki: Pki, port: int, etcd_port: int, prefix: str) -> list[str]:
    return [
        str(binary),
        f"--etcd-servers=http://127.0.0.1:{etcd_port}",
        f"--etcd-prefix={prefix}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={port}",
        f"--tls-cert-file={pki.apiserver_cert}",
        f"--tls-private-key-file={pki.apiserver_key}",
        f"--client-ca-file={pki.ca}",
        f"--service-account-issuer={ISSUER}",
        f"--service-account-key-file={pki.sa_pub}",
        f"--service-account-signing-key-file={pki.sa_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction,ExtendedResourceToleration",
        "--allow-privileged=true",
        # A loopback address is not a valid Endpoints address: without this the API server
        # complains every 10 s while reconciling the `kubernetes` Service.
        "--endpoint-reconciler-type=none",
        "--profiling=false",
        "--v=0",
    ]


def controller_manager(binary: Path, kubeconfig: Path, pki: Pki, port: int, cert_dir: Path) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={cert_dir}",
        # Each controller acts as its own service account, with the RBAC the API server bootstraps.
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki.sa_key}",
        f"--root-ca-file={pki.ca}",
        "--cluster-name=testbed",
        # The PersistentVolume binder looks at unbound claims every 15 s by default; a claim bound
        # a second after install keeps the tests from waiting on a timer.
        "--pvclaimbinder-sync-period=1s",
        "--v=0",
    ]


def scheduler(binary: Path, kubeconfig: Path, port: int, cert_dir: Path) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={cert_dir}",
        "--v=0",
    ]


def kwok(binary: Path, kubeconfig: Path, stages: Path, pki: Pki, port: int, *, annotation: tuple[str, str]) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--config={stages}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={annotation[0]}={annotation[1]}",
        # The simulated nodes' address: whatever the API server sends to a "kubelet" stays on loopback.
        "--node-ip=127.0.0.1",
        f"--node-port={port}",
        f"--server-address=127.0.0.1:{port}",
        f"--tls-cert-file={pki.serving_cert}",
        f"--tls-private-key-file={pki.serving_key}",
        "--node-lease-duration-seconds=40",
        f"--cidr={POD_CIDR}",
    ]


def kuberay(binary: Path, kubeconfig: Path, metrics_port: int, probe_port: int) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        "--enable-leader-election=false",
        f"--metrics-addr=127.0.0.1:{metrics_port}",
        f"--health-probe-bind-address=127.0.0.1:{probe_port}",
        "--log-stdout-encoder=console",
    ]


def kueue(binary: Path, config: Path) -> list[str]:
    return [str(binary), f"--config={config}", "--zap-log-level=1"]
