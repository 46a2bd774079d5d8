"""Names KubeRay and Kueue accept."""

from __future__ import annotations

from collections.abc import Iterator

from generator.core.names import RAYCLUSTER_MAX, RAYCLUSTER_NAME
from generator.gke import kueue_versions
from generator.validate.findings import Finding, error
from generator.validate.rules.context import Context


def check(ctx: Context) -> Iterator[Finding]:
    v = ctx.values
    name = v.get("fullnameOverride") or ctx.release_name
    key = "fullnameOverride" if v.get("fullnameOverride") else "(release name)"
    if len(name) > RAYCLUSTER_MAX:
        yield error(key, f"RayCluster name {name!r} is {len(name)} characters; KubeRay allows {RAYCLUSTER_MAX}", "use a shorter name")
    elif not RAYCLUSTER_NAME.fullmatch(name):
        yield error(
            key, f"RayCluster name {name!r} is not a DNS-1035 label", "use lowercase letters, digits and '-', starting with a letter"
        )
    seen: dict[str, int] = {}
    for i, g in enumerate(v["workerGroups"]):
        if g["name"] in seen:
            yield error(
                f"workerGroups[{i}].name",
                f"{g['name']!r} is also the name of workerGroups[{seen[g['name']]}]",
                "group names must be unique",
            )
        seen.setdefault(g["name"], i)
        if g["provisioning"] == "reservation" and not g.get("reservationName"):
            yield error(
                f"workerGroups[{i}].reservationName",
                "provisioning is reservation but no reservation is named",
                "set the Compute Engine reservation's name",
            )
        if g["provisioning"] != "reservation" and g.get("reservationName"):
            yield error(
                f"workerGroups[{i}].reservationName",
                f"set, but provisioning is {g['provisioning']}",
                "set provisioning: reservation or clear it",
            )
    kueue = v.get("kueue", {})
    if kueue.get("enabled"):
        if not kueue.get("queueName"):
            yield error("kueue.queueName", "Kueue is enabled but no LocalQueue is named", "set the LocalQueue's name")
        version = kueue.get("version", "")
        try:
            limit = kueue_versions.max_worker_groups(version)
        except ValueError as e:
            yield error("kueue.version", str(e), "write the cluster's Kueue version, such as v0.18.2, or leave it empty")
            return
        if len(v["workerGroups"]) > limit:
            under = f"Kueue {version}" if version else f"Kueue with kueue.version not set (the lowest limit, {limit})"
            yield error(
                "workerGroups",
                f"{len(v['workerGroups'])} worker groups; under {under} a RayCluster holds the head + at most {limit} groups",
                "merge groups, disable Kueue, or set kueue.version to the cluster's newer Kueue",
            )
    elif kueue.get("queueName"):
        yield error(
            "kueue.enabled",
            f"a queue ({kueue['queueName']}) is named but Kueue is not enabled",
            "set kueue.enabled: true or clear the name",
        )
