"""`ray start` parameters (head.rayStartParams, worker.rayStartParams) as KubeRay passes them and
Ray parses them (generator/gke/ray_start.py: KubeRay's pod.go and Ray's click command), and the
ones that start Ray but break the run: the head's dashboard off (the probes and the launcher call
it), an object store below Ray's floor, a key the chart or KubeRay already sets."""

from __future__ import annotations

from collections.abc import Iterator

from generator.gke import ray_start
from generator.validate.findings import Finding, error, warning
from generator.validate.rules.context import Context


def _params(prefix: str, params: dict[str, str], head: bool) -> Iterator[Finding]:
    for key, raw in sorted(params.items()):
        value, where = str(raw), f"{prefix}.rayStartParams.{key}"
        if head and key in ray_start.CHART_SETS_HEAD:
            yield error(
                where, "the chart sets it to 0.0.0.0 (the probes, the launcher and helm test reach the dashboard there)", "remove it"
            )
            continue
        if key in ray_start.KUBERAY_FORCES:
            yield warning(where, f"KubeRay always passes --{key}; this value is ignored", "remove it")
            continue
        if (why := ray_start.problem(key, value)) is not None:
            yield error(where, f"{why}; ray start stops or misreads the line and the pod never joins the cluster", "see `ray start --help`")
            continue
        if value.lower() == "false" and ray_start.OPTIONS.get(key) != "flag" and key not in ray_start.KEEPS_BOOLEAN_VALUE:
            yield warning(where, f"KubeRay drops a false value: --{key} is not passed at all", "give a value or remove it")
        if head and key == "include-dashboard" and value.strip().lower() in ray_start.CLICK_FALSE:
            yield error(
                where, "the head's dashboard off: the launcher submits the run through its Jobs API and the probes call it", "remove it"
            )
        if key == "object-store-memory" and value.strip().isdigit() and int(value) < ray_start.OBJECT_STORE_MINIMUM_BYTES:
            yield error(
                where,
                f"{value} bytes is below Ray's minimum object store of {ray_start.OBJECT_STORE_MINIMUM_BYTES} (75 MiB);"
                " ray start refuses it",
                "give bytes, at least 78643200, or remove it",
            )


def check(ctx: Context) -> Iterator[Finding]:
    yield from _params("head", ctx.values.get("head", {}).get("rayStartParams") or {}, head=True)
    yield from _params("worker", ctx.values.get("worker", {}).get("rayStartParams") or {}, head=False)
