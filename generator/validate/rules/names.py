"""Names KubeRay and Kueue accept."""

from __future__ import annotations

from collections.abc import Iterator

from generator.core.names import RAYCLUSTER_MAX, RAYCLUSTER_NAME
from generator.validate.findings import Finding, error
from generator.validate.rules.context import Context

KUEUE_MAX_GROUPS = 7


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
        if len(v["workerGroups"]) > KUEUE_MAX_GROUPS:
            yield error(
                "workerGroups",
                f"{len(v['workerGroups'])} worker groups; a Kueue workload holds the head + at most {KUEUE_MAX_GROUPS} groups",
                "merge groups or disable Kueue",
            )
    elif kueue.get("queueName"):
        yield error(
            "kueue.enabled",
            f"a queue ({kueue['queueName']}) is named but Kueue is not enabled",
            "set kueue.enabled: true or clear the name",
        )
