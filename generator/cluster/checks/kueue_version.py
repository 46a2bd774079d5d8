"""With kueue.enabled: the cluster's Kueue version admits the release's worker groups, and
kueue.version (what the chart's guard and `validate` assume) is not newer than it.

The version is the tag of the image Kueue's controller runs: the Deployment
kueue-system/kueue-controller-manager of Kueue's release manifests (registry.k8s.io/kueue/kueue:vX.Y.Z),
the one the infra script applies and waits for (generator/infra/kueue.py). The limits:
generator/gke/kueue_versions.py.

With DRA claims (accelerator.computeDomain, network.mode dranet) under a Kueue that counts them
(>= 0.18, generator/gke/kueue_dra.py): Kueue's configuration (ConfigMap
kueue-system/kueue-manager-config of its release manifests) maps each DeviceClass the workers
claim, or Kueue holds the Workload (kubernetes-sigs/kueue v0.19.2 pkg/dra/claims.go).
"""

from __future__ import annotations

import re

import yaml

from generator.cluster.checks.context import Context
from generator.cluster.kube import Forbidden
from generator.cluster.report import Result, failed, passed, skipped, warned
from generator.gke import kueue_dra, kueue_versions

NAME = "kueue-version"
DEPLOYMENT = "/apis/apps/v1/namespaces/kueue-system/deployments/kueue-controller-manager"
CONFIG_MAP = f"/api/v1/namespaces/kueue-system/configmaps/{kueue_dra.CONFIG_MAP}"
TAG = re.compile(r":(v?\d+\.\d+\.\d+)(?:@sha256:[0-9a-f]+)?$")


def cluster_version(ctx: Context) -> tuple[str, str]:
    """(Kueue's version as its controller's image tag, the image); ("", why) when it cannot be read."""
    deployment = ctx.kube.get(DEPLOYMENT)
    if deployment is None:
        return "", "no Deployment kueue-system/kueue-controller-manager"
    containers = deployment["spec"]["template"]["spec"].get("containers") or []
    for c in containers:
        if m := TAG.search(str(c.get("image", ""))):
            return m.group(1), str(c["image"])
    return "", f"no versioned image among {', '.join(str(c.get('image')) for c in containers) or 'its containers'}"


def check(ctx: Context) -> Result:
    if not ctx.value("kueue.enabled", False):
        return passed(NAME, "not needed: kueue.enabled is false")
    groups = len(ctx.value("workerGroups", []) or [])
    declared = str(ctx.value("kueue.version", "") or "")
    assumed = kueue_versions.max_worker_groups(declared)
    found, image = cluster_version(ctx)
    if not found:
        what = f"Kueue's version not read ({image})"
        if groups > kueue_versions.DEFAULT_LIMIT:
            return warned(NAME, f"{what}: {groups} worker groups need Kueue >= 0.18, as kueue.version {declared} says; not confirmed")
        return passed(NAME, f"{what}; {groups} worker group(s) are within every Kueue version's limit")
    limit = kueue_versions.max_worker_groups(found)
    if groups > limit:
        return failed(
            NAME,
            f"the cluster runs Kueue {found} ({image}): a RayCluster with at most {limit} worker groups; the release has {groups}",
            "merge worker groups, or upgrade Kueue to a version that admits them and set kueue.version to it",
        )
    if assumed > limit:
        return warned(NAME, f"kueue.version {declared} allows {assumed} worker groups, the cluster's Kueue {found} only {limit}")
    unmapped = _unmapped_device_classes(ctx, found)
    if isinstance(unmapped, Result):
        return unmapped
    if unmapped:
        want = ", ".join(f"{m.resource}: [{m.device_class}]" for m in unmapped)
        return failed(
            NAME,
            f"the cluster runs Kueue {found}, which counts DRA claims against quota, and its configuration"
            f" ({kueue_dra.CONFIG_MAP}) maps no {', '.join(m.device_class for m in unmapped)}: Kueue holds the RayCluster",
            f"add resources.deviceClassMappings ({want}) to Kueue's configuration and restart it"
            " (python -m generator infra --kueue writes the step)",
        )
    return passed(NAME, f"the cluster runs Kueue {found}: up to {limit} worker groups, the release has {groups}")


def dra_needed(ctx: Context) -> list[kueue_dra.DeviceMapping]:
    """The DRA mappings the release's workers need (accelerator.computeDomain, network.mode dranet)."""
    return kueue_dra.needed(bool(ctx.value("accelerator.computeDomain", False)), str(ctx.value("network.mode", "")))


def _unmapped_device_classes(ctx: Context, version: str) -> list[kueue_dra.DeviceMapping] | Result:
    """The DRA mappings the release's workers need that Kueue's configuration lacks (none needed
    below 0.18: such Kueue does not count claims)."""
    needed = dra_needed(ctx)
    if not needed or not kueue_dra.counts_claims(kueue_versions.parse(version)):
        return []
    try:
        cm = ctx.kube.get(CONFIG_MAP)
    except Forbidden as e:
        return skipped(NAME, f"Kueue's configuration ({kueue_dra.CONFIG_MAP}: the DRA device classes it maps)", e.permission)
    if cm is None:
        return warned(NAME, f"Kueue {version}: no ConfigMap kueue-system/{kueue_dra.CONFIG_MAP} to read its DRA mappings from")
    try:
        config = yaml.safe_load(str((cm.get("data") or {}).get(kueue_dra.CONFIG_KEY, ""))) or {}
    except yaml.YAMLError:
        config = {}
    mapped = {str(c) for m in (config.get("resources") or {}).get("deviceClassMappings") or [] for c in m.get("deviceClassNames") or []}
    return [m for m in needed if m.device_class not in mapped]
