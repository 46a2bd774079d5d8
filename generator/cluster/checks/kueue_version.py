"""With kueue.enabled: the cluster's Kueue version admits the release's worker groups, and
kueue.version (what the chart's guard and `validate` assume) is not newer than it.

The version is the tag of the image Kueue's controller runs: the Deployment
kueue-system/kueue-controller-manager of Kueue's release manifests (registry.k8s.io/kueue/kueue:vX.Y.Z),
the one the infra script applies and waits for (generator/infra/kueue.py). The limits:
generator/gke/kueue_versions.py.
"""

from __future__ import annotations

import re

from generator.cluster.checks.context import Context
from generator.cluster.report import Result, failed, passed, warned
from generator.gke import kueue_versions

NAME = "kueue-version"
DEPLOYMENT = "/apis/apps/v1/namespaces/kueue-system/deployments/kueue-controller-manager"
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
    return passed(NAME, f"the cluster runs Kueue {found}: up to {limit} worker groups, the release has {groups}")
