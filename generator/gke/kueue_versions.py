"""How many worker groups a RayCluster may have under Kueue, by Kueue version: the one table that
`validate`, the chart's template guard (generated from it by scripts/sync.sh) and `doctor` read.

A Kueue Workload holds at most N PodSets and the RayCluster integration takes one for the head, so
a RayCluster may have N - 1 worker groups. Sources, kubernetes-sigs/kueue:
- <= 0.17: 8 PodSets ("Because a Kueue workload can have a maximum of 8 PodSets, the maximum number
  of workerGroupSpecs is 7", site/content/en/docs/tasks/run/rayclusters.md and rayjobs.md);
- 0.18: 10 PodSets (PR #11388 "feat: increase Workload PodSet limit to 10": "RayCluster, RayJob,
  and RayService integrations now allow up to 9 worker groups");
- >= 0.19: 18 PodSets (PR #12819 "Increase Workload PodSet limit to 18").
A Kueue version this table does not know, or none given (`kueue.version` empty), gets the lowest
limit: it holds under every version.
"""

from __future__ import annotations

import re

# (the first Kueue version, as (major, minor), with this limit; the worker groups allowed), newest first.
LIMITS: tuple[tuple[tuple[int, int], int], ...] = (
    ((0, 19), 17),
    ((0, 18), 9),
)
DEFAULT_LIMIT = 7  # Kueue <= 0.17, and a version not given
VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?$")
VERSION_PATTERN = r"^(v?[0-9]+\.[0-9]+(\.[0-9]+)?)?$"  # the values schema's pattern of kueue.version ("" allowed)


def parse(version: str) -> tuple[int, int]:
    """(major, minor) of v0.18.2 / 0.18.2 / 0.18; ValueError for anything else."""
    m = VERSION.fullmatch(version.strip())
    if not m:
        raise ValueError(f"{version!r} is not a Kueue version such as v0.18.2")
    return int(m.group(1)), int(m.group(2))


def max_worker_groups(version: str) -> int:
    """The worker groups a RayCluster may have under this Kueue version ("" : the lowest limit)."""
    if not version:
        return DEFAULT_LIMIT
    found = parse(version)
    for first, limit in LIMITS:
        if found >= first:
            return limit
    return DEFAULT_LIMIT


def template() -> str:
    """The chart's named template `nemo-rl-gke.kueueMaxWorkerGroups` (generated from LIMITS by
    scripts/sync.sh into charts/nemo-rl-gke/templates/_kueue_limits.tpl): the same limit, in Helm."""
    lines = [
        "{{/* Generated from generator/gke/kueue_versions.py by scripts/sync.sh: do not edit.",
        "The worker groups a RayCluster may have under Kueue .Values.kueue.version (empty: the lowest limit). */}}",
        '{{- define "nemo-rl-gke.kueueMaxWorkerGroups" -}}',
        '{{- $v := .Values.kueue.version | default "" -}}',
        "{{- if not $v -}}",
        f"{DEFAULT_LIMIT}",
    ]
    for (major, minor), limit in LIMITS:
        lines += [f'{{{{- else if semverCompare ">={major}.{minor}.0-0" $v -}}}}', f"{limit}"]
    lines += ["{{- else -}}", f"{DEFAULT_LIMIT}", "{{- end -}}", "{{- end -}}"]
    return "\n".join(lines) + "\n"
