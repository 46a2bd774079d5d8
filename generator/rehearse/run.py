"""`python -m generator rehearse`: render the chart, build a local Ray cluster shaped like the
rendered RayCluster, run the chart's launcher against it with the stand-in driver as the run, and
report whether NeMo RL's resource requests would be placed (and, with the drill, whether a
preempted run resumes from its checkpoint)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from generator.core.files import InputError, load_values
from generator.core.paths import ROOT
from generator.helm.runner import DEFAULT_RELEASE, HelmError, HelmMissing, default_helm
from generator.rehearse.cluster import OBJECT_STORE_BYTES, LocalCluster
from generator.rehearse.drill import PAUSE_AFTER_STEP, PAUSED_LINE, Drill
from generator.rehearse.launcher import RUN_LIMIT_S, Launcher, make_spec
from generator.rehearse.plan import RunConfigError, Settings, settings, values_keys
from generator.rehearse.report import STAND_IN_STEPS, Outcome, Output, report, report_start_failure
from generator.rehearse.topology import NodeSpec, Rendered, parse_rendered
from generator.render.manifests import parse_documents
from generator.values.layers import helm_failure, layers, merge
from generator.values.merge import as_helm_sees_it

DRIVER = "generator.rehearse.job.driver"  # run from the checkout: `python -m generator.rehearse.job.driver PLAN`
# NeMo RL's waits, scaled down: 6 retries of 1, 2, 4... s -> 0.01, 0.02, 0.04... s; placement
# groups 180 s -> 5 s; the venv reservation (no timeout in NeMo RL) -> 3 s; actors no node has room
# for (NeMo RL waits forever) -> 60 s; actors that have room but whose processes start slowly (a loaded
# machine, not the values) -> up to 600 s.
TIMING = {
    "retries": 6,
    "retry_base_s": 0.01,
    "pg_timeout_s": 5.0,
    "venv_wait_s": 3.0,
    "actor_wait_s": 60.0,
    "start_cap_s": 600.0,
    "step_s": 0.1,
}


@dataclass(frozen=True)
class Request:
    values: Path
    release: str = DEFAULT_RELEASE
    drill: str | None = None
    max_nodes: int = 16
    more: tuple[Path, ...] = ()  # -f MORE, in order, as helm install takes them
    sets: tuple[tuple[str, str], ...] = ()  # (--set/--set-string/--set-file/--set-json, "key=value")

    @property
    def name(self) -> str:
        """How messages name the configuration: the file, or the file and its layers (never a --set value)."""
        return layers([self.values, *self.more], self.sets, True).name


def render(req: Request) -> tuple[dict[str, Any], Rendered, str]:
    spec = layers([req.values, *req.more], req.sets, True)
    if req.more or req.sets:
        values = merge(spec)  # the merged values, as helm install computes them
    else:
        values = load_values(req.values)
        if not isinstance(values, dict):
            raise InputError(f"{req.values}: not a values file (a YAML mapping)")
    try:
        helm = default_helm()
        text = helm.template(list(spec.files), release=req.release, extra=[w for pair in spec.sets for w in pair])
    except HelmMissing as e:
        raise InputError(str(e)) from None
    except HelmError as e:
        raise InputError(f"{spec.name}: helm template failed: {helm_failure(spec, str(e))}") from None
    try:
        rendered = parse_rendered(parse_documents(text))
    except InputError as e:
        raise InputError(f"{spec.name}: {e}") from None
    return values, rendered, helm.version


def _gib(n: int | None) -> str:
    return "auto" if n is None else f"{n / 2**30:g} GiB"


def describe_nodes(nodes: list[NodeSpec]) -> list[str]:
    width = max(len(n.name) for n in nodes)
    return [
        f"  {n.name:<{width}} {('auto' if n.cpus is None else n.cpus)!s:>4} CPUs {n.gpus:>2} GPUs {_gib(n.memory_bytes):>10}"
        f"   Ray CPUs from {n.cpu_key}"
        for n in nodes
    ]


def describe_settings(s: Settings) -> str:
    if s.colocated:
        gen = f"generation colocated with training ({s.backend})"
    elif s.num_nodes == 1:
        gen = f"generation on {s.generation_gpus_per_node} of the node's GPUs ({s.backend})"
    else:
        gen = f"generation on {s.generation_nodes} dedicated node(s) ({s.backend})"
    return f"cluster.num_nodes {s.num_nodes} x {s.gpus_per_node} GPUs, {gen}, {s.math_workers} math verifier workers"


def make_plan(s: Settings, keys: dict[str, str], checkpoint_dir: Path, result_file: Path, drill: bool) -> dict[str, Any]:
    return {
        "release": s.release,
        "venv_reservation_skips_cpuless_nodes": s.venv_reservation_skips_cpuless_nodes,
        "num_nodes": s.num_nodes,
        "gpus_per_node": s.gpus_per_node,
        "colocated": s.colocated,
        "generation_nodes": s.generation_nodes,
        "generation_gpus_per_node": s.generation_gpus_per_node,
        "backend": s.backend,
        "math_workers": s.math_workers,
        "steps": STAND_IN_STEPS,
        "checkpointing": s.checkpointing,
        "checkpoint_dir": str(checkpoint_dir),
        "result_file": str(result_file),
        "keys": keys,
        "timing": TIMING,
        "drill": {"pause_after_step": PAUSE_AFTER_STEP, "pause_max_s": 120} if drill else None,
    }


def read_results(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError):
        return []


def _short_tmp() -> str | None:
    # Ray's socket paths must stay under 108 bytes: prefer /tmp over a long $TMPDIR.
    return "/tmp" if os.path.isdir("/tmp") and os.access("/tmp", os.W_OK) else None  # noqa: S108


def rehearse(req: Request, *, cluster: LocalCluster | None = None, write: Callable[[str], None] | None = None) -> int:
    """Exit status: 0 everything placed (and the drill passed), 1 not; InputError for bad input.

    `cluster`: a running LocalCluster of the same shape to use instead of starting one (tests,
    benchmarks). The launcher never submits one run spec twice on a Ray cluster, so each values
    file rehearsed on a shared cluster must describe a different run."""
    out = Output(write)
    values, rendered, helm_version = render(req)
    workers = rendered.workers
    if len(workers) > req.max_nodes:
        raise InputError(
            f"{req.name}: the RayCluster has {len(workers)} worker nodes; rehearse starts one local Ray node per pod and "
            f"stops at --max-nodes {req.max_nodes} (about 250 MB of memory each): raise --max-nodes or rehearse a smaller copy"
        )
    tag = rendered.image_tag
    head, first_worker = rendered.nodes[0], (workers[0] if workers else rendered.nodes[0])
    keys = values_keys(as_helm_sees_it(values), head.cpu_key, first_worker.cpu_key)
    try:
        import ray
    except ImportError:
        raise InputError(
            "rehearse needs Ray, which this Python lacks: run scripts/setup.sh (without --no-rehearse), "
            "or scripts/bootstrap.sh rehearse, then use .venv/bin/python"
        ) from None
    out.note(
        f"{req.name}: RayCluster {rendered.cluster_name}, NeMo RL image {tag} (Ray {rendered.ray_version} in the image, "
        f"{ray.__version__} here), rendered with Helm {helm_version}"
    )
    try:
        s = settings(tag, rendered.launch_spec["entrypoint"])
    except RunConfigError as e:
        out.note(f"FAIL: NeMo RL stops on the config before asking Ray for anything: {e}")
        out.note("change grpo.overrides: run `python -m generator validate` on the file for details")
        return 1
    out.note(f"run settings ({s.recipe_source} + overrides): {describe_settings(s)}")
    drill = req.drill == "preempt"
    if drill and not s.checkpointing:
        out.note("FAIL: checkpointing.enabled is false: a preempted run would start again from step 0")
        out.note("change grpo.overrides[checkpointing.enabled]: set it to true")
        return 1
    store = OBJECT_STORE_BYTES // 2**20
    out.note(f"local Ray cluster, one node per pod (CPUs, GPUs and memory declared, not real; object store {store} MiB each):")
    for line in describe_nodes(rendered.nodes):
        out.note(line)

    workdir = Path(tempfile.mkdtemp(prefix="rh-", dir=_short_tmp()))
    own = cluster is None
    drill_run: Drill | None = None
    launcher: Launcher | None = None
    try:
        started = time.monotonic()
        if cluster is None:
            cluster = LocalCluster(workdir)  # assigned first: Ctrl-C during start still cleans up
            try:
                cluster.start(rendered.nodes)
            except Exception as e:  # Ray's own: a node that did not register in time, a GCS that did not start
                return report_start_failure(out, e)
            out.note(f"{len(rendered.nodes)} Ray nodes up in {time.monotonic() - started:.1f} s; dashboard {cluster.dashboard_url}")
        elif cluster.shape() != sorted(n.shape() for n in rendered.nodes):
            raise ValueError("the given local cluster does not have the rendered RayCluster's shape")
        else:
            out.note(f"reusing the local Ray cluster at {cluster.dashboard_url}")
        rendered_ckpt = rendered.launch_spec.get("checkpoint_dir") or "/checkpoints"
        ckpt = workdir / "volume" / rendered_ckpt.lstrip("/")
        ckpt.mkdir(parents=True, exist_ok=True)
        results = workdir / "results.jsonl"
        plan_path = workdir / "plan.json"
        plan_path.write_text(json.dumps(make_plan(s, keys, ckpt, results, drill), indent=2), encoding="utf-8")
        entrypoint = f"cd {shlex.quote(str(ROOT))} && {shlex.quote(sys.executable)} -m {DRIVER} {shlex.quote(str(plan_path))}"
        spec, notes = make_spec(rendered, cluster.dashboard_url, entrypoint, ckpt, drill)
        if "max_num_steps" in spec:  # the stand-in's run is STAND_IN_STEPS long: fewer reads as a deadline stop
            spec["max_num_steps"] = STAND_IN_STEPS
        spec_path = workdir / "launch.json"
        spec_path.write_text(json.dumps(spec, indent=2), encoding="utf-8")
        out.note(
            "launcher spec: the chart's launch.json with address, entrypoint (the stand-in driver), checkpoint_dir "
            f"({ckpt}), wait_for_files ([]) and max_num_steps ({STAND_IN_STEPS}, the stand-in's) replaced, timeouts shortened"
            + "".join(f"; {n}" for n in notes)
        )
        launcher = Launcher(spec_path, cluster, out)
        if drill:
            drill_run = Drill(cluster, ckpt, out.note)
            if launcher.wait_for_line(PAUSED_LINE, timeout=RUN_LIMIT_S):
                drill_run.preempt()
            else:
                drill_run.error = f"the stand-in never reported step_{drill_run.pause_after_step}"
        rc = launcher.wait()
        seconds = time.monotonic() - started
        outcome = Outcome(rc, launcher.lines, read_results(results), ckpt, seconds, tuple(cluster.head_failures()))
        return report(out, outcome, drill_run)
    finally:
        if launcher is not None:
            launcher.stop()
        if own and cluster is not None:
            left = cluster.shutdown()
            if left:
                out.note(f"warning: {len(left)} Ray process(es) of the rehearsal survived SIGKILL: {left}")
        shutil.rmtree(workdir, ignore_errors=True)
