"""The run's lifecycle across the chart's pods: what one pod leaves for another, and what happens
when the run ends.

- launcher.releaseGpus suspends the RayCluster (with Kueue: scales its GPU groups to 0) when the
  launcher sees the run end; the launcher sees the end only while it follows the run
  (launcher.follow; values.yaml: "Needs follow: true"; charts/nemo-rl-gke/files/launcher.py follows
  the logs to the end, then releases). With follow false the launcher exits once the run is
  RUNNING, and the GPU nodes stay up, billed, until `helm uninstall`.
- prepare.runAsUser other than 0 makes the preparation Job write HF_HOME (the model, GSM8K and its
  marker) on the shared volume as that user and group, mode 0755 folders and 0644 files as written
  with the default umask; the Ray containers run as the image's root, and the chart drops ALL of
  their capabilities by default. Root without CAP_DAC_OVERRIDE is held to the files' mode bits
  (capabilities(7): "Bypass file read, write, and execute permission checks"), so the Ray
  containers cannot write what the Job made (values.yaml, prepare.runAsUser: "the Ray containers
  then need DAC_OVERRIDE ... (head/worker.securityContext.capabilities.add)"). GKE's Lustre CSI
  driver applies fsGroup to the volume's top folder only (values.yaml, launcher.runAsUser).
  DAC_OVERRIDE is in the container runtime's default set (Pod Security Standards, baseline
  "Capabilities"), so a container that drops neither it nor ALL keeps it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from generator.validate.findings import Finding, error, warning
from generator.validate.rules.context import Context

DAC_OVERRIDE = "DAC_OVERRIDE"


def may_override_file_modes(security: dict[str, Any]) -> bool:
    """Whether a root container with this securityContext holds CAP_DAC_OVERRIDE."""
    if security.get("privileged"):
        return True
    caps = security.get("capabilities") or {}
    added = set(caps.get("add") or [])
    if added & {DAC_OVERRIDE, "ALL"}:
        return True
    return not set(caps.get("drop") or []) & {DAC_OVERRIDE, "ALL"}


def _ray_security(values: dict[str, Any], part: str) -> dict[str, Any]:
    """The Ray container's securityContext; the chart's default drops ALL."""
    security = (values.get(part) or {}).get("securityContext")
    return security if isinstance(security, dict) else {"capabilities": {"drop": ["ALL"]}}


def check(ctx: Context) -> Iterator[Finding]:
    v = ctx.values
    if not (v.get("grpo") or {}).get("enabled", True):
        return  # no launcher, no preparation Job
    yield from _release_without_follow(v)
    yield from _prepare_user(v)


def _release_without_follow(v: dict[str, Any]) -> Iterator[Finding]:
    launcher = v.get("launcher") or {}
    if launcher.get("releaseGpus", True) and not launcher.get("follow", True):
        yield warning(
            "launcher.releaseGpus",
            "has no effect with launcher.follow false: the launcher exits once the run is RUNNING and never sees it end, "
            "so the GPU nodes stay up, billed, until helm uninstall",
            "set launcher.follow: true (or releaseGpus: false to say the GPUs are kept on purpose)",
        )


def _prepare_user(v: dict[str, Any]) -> Iterator[Finding]:
    prepare = v.get("prepare") or {}
    user = prepare.get("runAsUser", 0)
    if not prepare.get("enabled", True) or not isinstance(user, int) or user == 0:
        return
    lacking = [part for part in ("head", "worker") if not may_override_file_modes(_ray_security(v, part))]
    if lacking:
        keys = " and ".join(f"{part}.securityContext.capabilities.add" for part in lacking)
        yield error(
            "prepare.runAsUser",
            f"{user}: the preparation Job writes HF_HOME on the shared volume as user {user}, and the Ray containers "
            f"({', '.join(lacking)}) run as root without the DAC_OVERRIDE capability, so they cannot write "
            "the folders and files it made",
            f"add DAC_OVERRIDE to {keys}, or set prepare.runAsUser: 0",
        )
