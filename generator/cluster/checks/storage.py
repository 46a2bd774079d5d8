"""The shared volume: the Lustre CSI driver is registered (the chart's static PersistentVolume names
it), and the volume's name is free; or the existing claim (storage.existingClaim) is there, bound
and ReadWriteMany.

The driver registers the CSIDriver object lustre.csi.storage.gke.io (the name the chart's
PersistentVolume gives in csi.driver). infra.sh enables it as it creates the cluster (Standard: the
LustreCsiDriver add-on; Autopilot: --enable-lustre-csi-driver) and reaches the instance on Lustre's
own port 988: no --enable-legacy-lustre-port, which GKE marks deprecated from node version
1.33.2-gke.4655000 (generator/gke/versions.py, LUSTRE_PORT_988; generator/infra/steps.py).
"""

from __future__ import annotations

from generator.cluster.checks.context import Context
from generator.cluster.report import Result, failed, passed
from generator.gke.versions import LUSTRE_PORT_988

NAME = "storage"
DRIVER = "lustre.csi.storage.gke.io"
# How infra.sh turns the driver on, per gke.mode, as an update of an existing cluster.
ENABLE_DRIVER = {
    "standard": "--update-addons=LustreCsiDriver=ENABLED",
    "autopilot": "--enable-lustre-csi-driver",
}


def enable_driver(mode: str) -> str:
    """The fix: the flag infra.sh creates the cluster with, on Lustre's own port (no legacy port)."""
    flag = ENABLE_DRIVER.get(mode, ENABLE_DRIVER["standard"])
    return (
        f"gcloud container clusters update CLUSTER --location LOCATION {flag} (as infra.sh creates the cluster; "
        f"with GKE {LUSTRE_PORT_988.version} or newer the driver reaches Lustre on its own port 988, no legacy port)"
    )


def _existing_claim(ctx: Context, claim: str) -> Result:
    pvc = ctx.kube.get(f"/api/v1/namespaces/{ctx.namespace}/persistentvolumeclaims/{claim}")
    if pvc is None:
        return failed(
            NAME, f"storage.existingClaim {claim} not found in namespace {ctx.namespace}", "create the claim first, or empty existingClaim"
        )
    phase = (pvc.get("status") or {}).get("phase")
    modes = (pvc.get("spec") or {}).get("accessModes") or []
    if "ReadWriteMany" not in modes:
        return failed(
            NAME, f"claim {claim} is {', '.join(modes) or 'without access modes'}, not ReadWriteMany", "use a ReadWriteMany claim"
        )
    if phase != "Bound":
        return failed(NAME, f"claim {claim} is {phase or 'not bound'}", f"kubectl -n {ctx.namespace} describe pvc {claim}")
    return passed(NAME, f"claim {claim} is Bound and ReadWriteMany")


def check(ctx: Context) -> Result:
    claim = ctx.value("storage.existingClaim", "")
    if claim:
        return _existing_claim(ctx, claim)
    if ctx.kube.get(f"/apis/storage.k8s.io/v1/csidrivers/{DRIVER}") is None:
        return failed(
            NAME,
            f"the Lustre CSI driver is not registered (no CSIDriver {DRIVER}): the workers' volume never mounts",
            enable_driver(str(ctx.value("gke.mode", "standard"))),
        )
    for pv in ctx.rendered.of_kind("PersistentVolume"):
        if who := ctx.taken(f"/api/v1/persistentvolumes/{pv['metadata']['name']}"):
            return failed(
                NAME,
                f"PersistentVolume {pv['metadata']['name']} exists ({who}): helm install would refuse it",
                "install with the release name and namespace that made it, or set storage.existingClaim to its claim",
            )
    return passed(NAME, f"CSIDriver {DRIVER} is registered; the chart's PersistentVolume is free to create")
