"""Risky but legal choices: shown as warnings (errors with --strict)."""

from __future__ import annotations

from collections.abc import Iterator

from generator.validate.findings import Finding, warning
from generator.validate.rules.context import Context


def check(ctx: Context) -> Iterator[Finding]:
    v = ctx.values
    if v["image"].get("pullPolicy") == "Always":
        yield warning(
            "image.pullPolicy", "Always re-pulls the ~30 GB NeMo RL image on every pod start", "use IfNotPresent with a pinned tag"
        )
    if (v["worker"].get("securityContext") or {}).get("privileged"):
        yield warning(
            "worker.securityContext.privileged", "GPU workers run privileged; RDMA does not need it", "remove it unless debugging the NICs"
        )
    spot = [i for i, g in enumerate(v["workerGroups"]) if g["provisioning"] == "spot"]
    launcher = v.get("launcher", {})
    if spot and v["grpo"].get("enabled", True) and (not launcher.get("follow", True) or launcher.get("maxRestarts", 0) == 0):
        yield warning(
            "launcher.maxRestarts" if launcher.get("follow", True) else "launcher.follow",
            f"workerGroups[{spot[0]}] is Spot but a preempted run is not resubmitted",
            "set launcher.follow: true and launcher.maxRestarts >= 1",
        )
