"""What a preemption costs (Spot runs that keep no checkpoint are errors), and risky but legal
choices (warnings; errors with --strict)."""

from __future__ import annotations

from collections.abc import Iterator

from generator.validate.findings import Finding, error, warning
from generator.validate.rules.context import Context

STEPS, PERIOD = "grpo.max_num_steps", "checkpointing.save_period"


def _whole(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _changed_of_period_and_steps(ctx: Context) -> str:
    """Which of the two the user most likely changed: the one added in grpo.extraOverrides, else
    the run's length (the generator writes it), unless only the period is overridden."""
    for key in (PERIOD, STEPS):
        if ctx.where(key).startswith("grpo.extraOverrides"):
            return key
    return PERIOD if ctx.get(PERIOD) is not None and ctx.get(STEPS) is None else STEPS


def _spot_checkpoints(ctx: Context, group: int) -> Iterator[Finding]:
    """On Spot, GKE takes a node back at any time: the launcher resubmits the run, which resumes
    from its newest checkpoint. NeMo RL saves when (step + 1) % save_period == 0 and at the last step."""
    where = f"Spot workerGroups[{group}]"
    if ctx.setting("checkpointing.enabled") is False:
        yield error(
            ctx.where("checkpointing.enabled"),
            f"checkpointing is off with {where}: every resubmission after a preemption starts again at step 0",
            "set checkpointing.enabled=true, or use on-demand or reservation provisioning",
        )
        return
    steps, period = _whole(ctx.setting(STEPS)), _whole(ctx.setting(PERIOD))
    if steps is None or period is None or steps < 2 or period < steps:
        return
    yield error(
        ctx.where(_changed_of_period_and_steps(ctx)),
        f"{PERIOD} {period} with {STEPS} {steps} on {where}: NeMo RL saves every {period} steps and at the last,"
        " so no checkpoint exists before the run ends and every resubmission after a preemption starts again at step 0",
        f"set {PERIOD} below {steps} (e.g. {PERIOD}={max(1, steps // 2)})",
    )


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
    topology = (v.get("kueue") or {}).get("topology") or {}
    if topology.get("mode", "none") != "none" and not v["kueue"].get("enabled"):
        yield warning(
            "kueue.topology.mode",
            f"{topology['mode']} placement is Kueue's topology-aware scheduling, but kueue.enabled is false: ignored",
            "set kueue.enabled: true and kueue.queueName, or kueue.topology.mode: none",
        )
    for i, g in enumerate(v["workerGroups"]):
        if g.get("reservationProject") and g["provisioning"] != "reservation":
            yield warning(
                f"workerGroups[{i}].reservationProject",
                f"ignored: the group's provisioning is {g['provisioning']}, not reservation",
                "clear it or set provisioning: reservation",
            )
    spot = [i for i, g in enumerate(v["workerGroups"]) if g["provisioning"] == "spot"]
    launcher = v.get("launcher", {})
    if spot and v["grpo"].get("enabled", True) and (not launcher.get("follow", True) or launcher.get("maxRestarts", 0) == 0):
        yield warning(
            "launcher.maxRestarts" if launcher.get("follow", True) else "launcher.follow",
            f"workerGroups[{spot[0]}] is Spot but a preempted run is not resubmitted",
            "set launcher.follow: true and launcher.maxRestarts >= 1",
        )
    if spot and v["grpo"].get("enabled", True):
        yield from _spot_checkpoints(ctx, spot[0])
