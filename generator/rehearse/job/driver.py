"""Stand-in for NeMo RL's GRPO driver: asks Ray for resources the way the configured release does,
then simulates training by writing checkpoints. `python -m generator rehearse` submits it as the
Ray job's entrypoint through the chart's launcher:

    cd <checkout> && python -m generator.rehearse.job.driver PLAN.json

Standard library + ray (it runs as a Ray job, like NeMo RL) and the two standard-library modules
job/nemo_rl.py and rehearse/checkpoints.py. The plan (written by
generator/rehearse/run.py) carries the run's settings, the values keys to name in errors, and the
scaled-down waits. The order and shapes of the requests follow NeMo RL:
  1. the math environment: 1 MathEnvironment actor creating `env.math.num_workers` verifier actors
     (plain @ray.remote actors: Ray's default is 1 CPU to be scheduled, 0 while running);
  2. grpo.setup's checks of the generation placement;
  3. per virtual cluster: the totals check against ray.cluster_resources() (retried 6 times with
     waits of 2**i s), then one PACK placement group per node, ready within 180 s;
  4. per worker group: a STRICT_SPREAD group of {CPU: 1} on every alive node to build
     virtualenvs, waited for without a timeout (v0.7.0 leaves out nodes with 0 CPUs);
  5. training: resume from the highest step_N in the checkpoint folder, write tmp_step_N and
     rename it to step_N; each step prints NeMo RL's step header and step time, so the launcher
     prints its progress line per step.
Results are appended as one JSON line per attempt to the plan's result file.
Exit status: 0 every request placed and training finished; 1 otherwise.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from generator.rehearse.checkpoints import latest_step, save
from generator.rehearse.job.nemo_rl import Failure, shape, step_header, step_timing, virtual_clusters

NODE_LABEL = "nemo-rl-gke/pod"


def say(message: str) -> None:
    print(f"[stand-in] {message}", flush=True)


class Cluster:
    """The Ray cluster as the stand-in sees it, plus what its own placement groups hold."""

    def __init__(self, ray: Any) -> None:
        self.ray = ray
        self.held: dict[str, float] = {}  # node id -> CPUs held by this run's placement groups

    def nodes(self) -> list[dict[str, Any]]:
        return [n for n in self.ray.nodes() if n.get("Alive")]

    def name(self, node_id: str) -> str:
        for n in self.ray.nodes():
            if n["NodeID"] == node_id:
                return (n.get("Labels") or {}).get(NODE_LABEL) or node_id[:8]
        return node_id[:8]

    @staticmethod
    def label(n: dict[str, Any]) -> str:
        return (n.get("Labels") or {}).get(NODE_LABEL) or n["NodeID"][:8]

    def summary(self) -> str:
        parts = []
        for n in sorted(self.nodes(), key=self.label):
            r = n.get("Resources", {})
            parts.append(f"{self.label(n)} {r.get('CPU', 0):g} CPU/{r.get('GPU', 0):g} GPU")
        return ", ".join(parts)

    def free_cpus(self, n: dict[str, Any]) -> float:
        return n.get("Resources", {}).get("CPU", 0) - self.held.get(n["NodeID"], 0)

    def cpu_outside_groups(self) -> str | None:
        """A node with a Ray CPU this run's placement groups do not hold, where a plain actor (1 CPU
        to be scheduled) can start; None when there is none."""
        return next((self.label(n) for n in self.nodes() if self.free_cpus(n) >= 1), None)


# --- NeMo RL's requests ------------------------------------------------------------------------


class StandIn:
    def __init__(self, plan: dict[str, Any]) -> None:
        import ray

        self.ray = ray
        self.plan = plan
        self.keys: dict[str, str] = plan["keys"]
        self.t: dict[str, float] = plan["timing"]
        self.cluster = Cluster(ray)
        self.gpu_groups: list[Any] = []

    # 1. environments -------------------------------------------------------------------------
    def start_environment(self) -> Any:
        ray = self.ray

        @ray.remote
        class HFVerifyWorker:
            def ping(self) -> bool:
                return True

        @ray.remote
        class MathEnvironment:
            def __init__(self, num_workers: int) -> None:
                self.workers = [HFVerifyWorker.remote() for _ in range(num_workers)]

            def ready(self) -> int:
                ray.get([w.ping.remote() for w in self.workers])
                return len(self.workers)

        n = int(self.plan["math_workers"])
        say(
            f"math environment: 1 MathEnvironment + {n} HFVerifyWorker actors (Ray's actor default: 1 CPU to be scheduled, 0 while running)"
        )
        return MathEnvironment.remote(n)

    def environment_ready(self, env: Any) -> None:
        done = self.started([env.ready.remote()], "the math environment's actors", self.cluster.cpu_outside_groups)
        if done is None:
            raise Failure(
                "the math environment's actors were not scheduled",
                f"after {self.t['actor_wait_s']:g} s no node had a free CPU for them; NeMo RL would hang at the first reward computation",
                self.keys["head_cpu"],
                "give the head a few Ray CPUs for the environment actors",
            )
        say(f"math environment: {done[0] + 1} actors running: placed")

    def started(self, refs: list[Any], what: str, schedulable: Callable[[], str | None]) -> list[Any] | None:
        """The results of `refs` once the actors behind them run; None when, for actor_wait_s,
        `schedulable()` found no node for them (NeMo RL would wait forever). While it names one,
        the wait is only the machine's speed at starting Ray's worker processes (several per
        actor, slow on a loaded machine), allowed up to start_cap_s."""
        began = time.monotonic()
        while True:
            ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=1.0)
            if len(ready) == len(refs):
                return self.ray.get(refs)
            waited = time.monotonic() - began
            node = schedulable()
            if node is None and waited >= self.t["actor_wait_s"]:
                return None
            if node is not None and waited >= self.t["start_cap_s"]:
                raise Failure(
                    f"{what} did not start",
                    f"{waited:.0f} s although {node} has room for them: this machine starts Ray's worker processes too slowly "
                    "or they fail to start (see the Ray logs); your values are not at fault",
                    "",
                    "",
                )

    # 3. virtual clusters -----------------------------------------------------------------------
    def create_cluster(self, name: str, bundles_per_node: list[int], cpus_per_bundle: int) -> list[Any]:
        retries = int(self.t["retries"])
        last: Failure | None = None
        for i in range(retries):
            try:
                return self._create_cluster_once(name, bundles_per_node, cpus_per_bundle)
            except Failure as e:
                if not e.nemo_rl.startswith("Not enough"):
                    raise
                last = e
                wait = self.t["retry_base_s"] * 2**i
                print(e.nemo_rl, flush=True)
                print(f"Retrying placement group creation... {i + 1}/{retries}. Next retry in {2**i} seconds.", flush=True)
                say(f"(rehearsal: waiting {wait:g} s instead of {2**i} s)")
                time.sleep(wait)
        assert last is not None
        raise Failure(
            f"ResourceInsufficientError: Maximum number of retries reached ({retries}). Cluster resources may be insufficient or "
            "cluster itself is highly unstable. Please check your cluster configuration and your cluster logs.",
            last.nemo_rl + " " + last.explanation,
            last.key,
            last.hint,
        )

    def _create_cluster_once(self, name: str, bundles_per_node: list[int], cpus_per_bundle: int) -> list[Any]:
        from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group

        ray, p, k = self.ray, self.plan, self.keys
        res = ray.cluster_resources()
        have_gpus, have_cpus = int(res.get("GPU", 0)), int(res.get("CPU", 0))
        want_gpus = sum(bundles_per_node)
        want_cpus = want_gpus * cpus_per_bundle
        say(
            f"{name}: {len(bundles_per_node)} node(s) x {shape({'CPU': cpus_per_bundle, 'GPU': 1})} x {bundles_per_node[0]}; "
            f"totals check: {want_gpus} GPUs, {want_cpus} CPUs requested; ray.cluster_resources(): {have_gpus} GPUs, {have_cpus} CPUs"
        )
        if want_gpus > have_gpus:
            raise Failure(
                f"Not enough GPUs available. Requested {want_gpus} GPUs, but only {have_gpus} are available in the cluster.",
                f"(cluster.num_nodes {p['num_nodes']} x cluster.gpus_per_node {p['gpus_per_node']})",
                f"{k['num_nodes']} or {k['replicas']}",
                self._node_count_hint(),
            )
        if want_cpus > have_cpus:
            raise Failure(
                f"Not enough CPUs available. Requested {want_cpus} CPUs, but only {have_cpus} are available in the cluster.",
                f"({want_gpus} GPU bundles x {cpus_per_bundle} CPUs each)",
                k["worker_cpu"],
                f"give each GPU node at least {cpus_per_bundle * max(bundles_per_node) + 1} Ray CPUs "
                f"({cpus_per_bundle} per GPU for the bundles + 1 for the venv reservation)",
            )
        groups = []
        for idx, count in enumerate(bundles_per_node):
            if count > 0:
                bundles = [{"CPU": cpus_per_bundle, "GPU": 1} for _ in range(count)]
                groups.append(placement_group(bundles=bundles, strategy="PACK", name=f"{name}-node{idx}"))
        try:
            ray.get([g.ready() for g in groups], timeout=self.t["pg_timeout_s"])
        except (TimeoutError, ray.exceptions.GetTimeoutError):
            explanation, key, hint = self._why_not_placed(groups, cpus_per_bundle)
            for g in groups:
                remove_placement_group(g)
            raise Failure(
                "TimeoutError: Timed out waiting for placement groups to be ready. The cluster may not have enough resources "
                "to satisfy the requested configuration, or the resources may be busy with other tasks.",
                f"(rehearsal: waited {self.t['pg_timeout_s']:g} s instead of 180 s) {explanation}",
                key,
                hint,
            ) from None
        for g in groups:
            table = placement_group_table(g)
            where = sorted({self.cluster.name(nid) for nid in table["bundles_to_node_id"].values()})
            for nid in table["bundles_to_node_id"].values():
                self.cluster.held[nid] = self.cluster.held.get(nid, 0) + cpus_per_bundle
            bundle = shape({"CPU": cpus_per_bundle, "GPU": 1})
            say(f"  placement group {table['name']}: {len(g.bundle_specs)} x {bundle} PACK -> placed on {', '.join(where)}")
        self.gpu_groups += groups
        return groups

    def _why_not_placed(self, groups: list[Any], cpus_per_bundle: int) -> tuple[str, str, str]:
        from ray.util.placement_group import placement_group_table

        p, k = self.plan, self.keys
        pending = [placement_group_table(g) for g in groups]
        pending = [t for t in pending if t["state"] != "CREATED"]
        names = ", ".join(t["name"] for t in pending) or "?"
        need_gpus = sum(int(b.get("GPU", 0)) for g in self.gpu_groups for b in g.bundle_specs) + sum(
            int(b.get("GPU", 0)) for g in groups for b in g.bundle_specs
        )
        nodes = self.cluster.nodes()
        have_gpus = sum(n.get("Resources", {}).get("GPU", 0) for n in nodes)
        gpu_nodes = [n for n in nodes if n.get("Resources", {}).get("GPU", 0) > 0]
        if need_gpus > have_gpus:
            return (
                f"{names} not placed: this run's clusters need {need_gpus} GPUs (cluster.num_nodes {p['num_nodes']} x "
                f"{p['gpus_per_node']}) but the Ray cluster has {have_gpus:g} on {len(gpu_nodes)} GPU node(s)",
                f"{k['num_nodes']} or {k['replicas']}",
                self._node_count_hint(),
            )
        biggest = max((len(g.bundle_specs) for g in groups), default=0)
        need_cpus = biggest * cpus_per_bundle
        if gpu_nodes and max(n["Resources"].get("CPU", 0) for n in gpu_nodes) < need_cpus:
            top = max(n["Resources"].get("CPU", 0) for n in gpu_nodes)
            return (
                f"{names} not placed: one node's group needs {biggest} x {cpus_per_bundle} = {need_cpus} CPUs next to its GPUs, "
                f"the GPU nodes have {top:g} Ray CPUs each",
                k["worker_cpu"],
                f"give each GPU node at least {need_cpus + 1} Ray CPUs ({need_cpus} for the bundles + 1 for the venv reservation)",
            )
        return (f"{names} not placed: the resources are held by other work on the cluster", k["replicas"], "check what else runs there")

    def _node_count_hint(self) -> str:
        gpu_nodes = sum(1 for n in self.cluster.nodes() if n.get("Resources", {}).get("GPU", 0) > 0)
        wanted = int(self.plan["num_nodes"])
        if wanted > gpu_nodes:
            return f"set cluster.num_nodes to {gpu_nodes} (the GPU worker nodes), or add {wanted - gpu_nodes} worker replica(s)"
        return "make cluster.num_nodes x cluster.gpus_per_node match the GPU worker nodes"

    # 4. worker groups: virtualenv reservation ----------------------------------------------------
    def reserve_venvs(self, worker_group: str) -> None:
        from ray.util.placement_group import placement_group, remove_placement_group

        ray, t = self.ray, self.t
        skips = bool(self.plan["venv_reservation_skips_cpuless_nodes"])
        alive = self.cluster.nodes()
        nodes = [n for n in alive if not skips or n.get("Resources", {}).get("CPU", 0) > 0]
        which = "every alive Ray node with CPUs" if skips else "every alive Ray node, head included"
        pg = placement_group(bundles=[{"CPU": 1} for _ in nodes], strategy="STRICT_SPREAD")
        try:
            ray.get(pg.ready(), timeout=t["venv_wait_s"])
        except (TimeoutError, ray.exceptions.GetTimeoutError):
            remove_placement_group(pg)
            blocked = [n for n in nodes if self.cluster.free_cpus(n) < 1]
            described = ", ".join(
                f"{self.cluster.label(n)} (0 Ray CPUs)"
                if n.get("Resources", {}).get("CPU", 0) == 0
                else f"{self.cluster.label(n)} ({self.cluster.free_cpus(n):g} of {n['Resources']['CPU']:g} Ray CPUs free)"
                for n in blocked
            )
            heads = [n for n in blocked if "node:__internal_head__" in n.get("Resources", {})]
            if heads and heads[0].get("Resources", {}).get("CPU", 0) == 0:
                key = self.keys["head_cpu"]
                hint = f"set it to at least 1 (or use NeMo RL v0.7.0, {self.keys['image_tag']}: it leaves nodes without CPUs out)"
            else:
                key = self.keys["worker_cpu"]
                per_node = max((self.cluster.held.get(n["NodeID"], 0) for n in blocked), default=0)
                hint = f"give each GPU node at least {per_node + 1:g} Ray CPUs (the placement groups take {per_node:g})"
            raise Failure(
                f"create_local_venv_on_each_node({worker_group}): STRICT_SPREAD placement group of {len(nodes)} x {{CPU: 1}} "
                "never becomes ready; ray.get(pg.ready()) has no timeout, so NeMo RL "
                f"{self.plan['release']} waits here forever",
                f"(rehearsal: gave up after {t['venv_wait_s']:g} s) no free CPU on {described or 'some node'}",
                key,
                hint,
            ) from None
        remove_placement_group(pg)
        say(f"venv reservation for {worker_group}: STRICT_SPREAD {len(nodes)} x {{CPU: 1}} on {which} -> placed (then released)")

    # 5. training -----------------------------------------------------------------------------------
    def train(self) -> int | None:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        ray, p = self.ray, self.plan
        ckpt = p["checkpoint_dir"]
        drill = p.get("drill") or {}
        last = latest_step(ckpt)
        if last is not None:
            with open(os.path.join(ckpt, f"step_{last}", "training_info.json"), encoding="utf-8") as f:
                info = json.load(f)
            say(f"resuming from step_{last} in {ckpt} (training_info.json: step {info['step']})")
        else:
            say(f"no step_N in {ckpt}: starting at step 1")
        start = last or 0
        workers: list[tuple[str, Any]] = []
        if drill:
            # One training-worker stand-in per GPU node: losing a node kills one, as in NeMo RL.
            @ray.remote(num_cpus=0)
            class TrainWorker:
                def step(self, n: int) -> int:
                    return n

            for g in self.gpu_groups:
                strategy = PlacementGroupSchedulingStrategy(placement_group=g, placement_group_bundle_index=0)
                w = TrainWorker.options(scheduling_strategy=strategy).remote()
                workers.append((self.cluster.name(_bundle_node(g, 0)), w))
            self.started([w.step.remote(0) for _, w in workers], "the training workers", lambda: "their placement group")
            say(f"training workers running on {', '.join(n for n, _ in workers)}")
        for step in range(start + 1, int(p["steps"]) + 1):
            print(step_header(step, int(p["steps"])), flush=True)
            began = time.monotonic()
            self._step(workers, step)
            print(step_timing(time.monotonic() - began), flush=True)
            if p["checkpointing"]:
                save(ckpt, step, attempt_id())
                say(f"step {step}/{p['steps']}: checkpoint written: {os.path.join(ckpt, f'step_{step}')}")
            else:
                say(f"step {step}/{p['steps']} (checkpointing.enabled is false: nothing saved)")
            if drill and step == drill["pause_after_step"]:
                say("training goes on; the next checkpoint is not due yet (drill: waiting for the node loss)")
                deadline = time.monotonic() + drill["pause_max_s"]
                while time.monotonic() < deadline:
                    self._step(workers, step + 1)
                    time.sleep(0.1)
                raise Failure("drill: no node was lost", f"no worker died within {drill['pause_max_s']} s", "", "")
        return last

    def _step(self, workers: list[tuple[str, Any]], step: int) -> None:
        ray = self.ray
        time.sleep(self.t["step_s"])
        for name, w in workers:
            try:
                ray.get(w.step.remote(step), timeout=60)
            except ray.exceptions.RayError as e:
                first = str(e).strip().splitlines()
                print(f"ray.exceptions.{type(e).__name__}: {first[0] if first else ''}", flush=True)
                say(f"the training worker on {name} died (its node is gone): the run fails, as NeMo RL's would")
                raise SystemExit(1) from None


def _bundle_node(group: Any, index: int) -> str:
    from ray.util.placement_group import placement_group_table

    return placement_group_table(group)["bundles_to_node_id"][index]


def attempt_id() -> str:
    """The Ray job's submission id (the launcher's <id> or <id>-retryN)."""
    try:
        config = json.loads(os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR", "{}"))
        return str((config.get("metadata") or {}).get("job_submission_id", ""))
    except ValueError:
        return ""


def record(plan: dict[str, Any], result: dict[str, Any]) -> None:
    result["attempt"] = attempt_id()
    with open(plan["result_file"], "a", encoding="utf-8") as f:
        f.write(json.dumps(result) + "\n")


def run(plan: dict[str, Any]) -> int:
    import ray

    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    ray.init(logging_level=logging.WARNING, log_to_driver=False)
    s = StandIn(plan)
    say(f"NeMo RL {plan['release']} resource requests; Ray cluster: {s.cluster.summary()}")
    resumed: int | None = None
    try:
        env = s.start_environment()
        clusters = virtual_clusters(plan)
        for name, per_node, cpus in clusters:
            s.create_cluster(name, per_node, cpus)
        if plan["colocated"]:
            s.reserve_venvs("VllmGenerationWorker")
            s.reserve_venvs("DTensorPolicyWorker")
        else:
            s.reserve_venvs("VllmGenerationWorker (grpo_inference_cluster)")
            s.reserve_venvs("DTensorPolicyWorker (grpo_train_cluster)")
        s.environment_ready(env)
        say("every request was placed")
        resumed = s.train()
    except Failure as e:
        print(e.nemo_rl, flush=True)
        say(f"FAILED: {e.explanation}")
        record(plan, {"ok": False, "error": e.nemo_rl, "explanation": e.explanation, "key": e.key, "hint": e.hint})
        return 1
    except SystemExit:
        record(plan, {"ok": False, "error": "a training worker died", "node_lost": True, "key": "", "hint": ""})
        raise
    except Exception as e:
        record(plan, {"ok": False, "error": f"the stand-in crashed: {type(e).__name__}: {e}", "key": "", "hint": ""})
        raise
    say(f"training finished at step {plan['steps']}")
    record(plan, {"ok": True, "resumed_from": resumed})
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m generator.rehearse.job.driver PLAN.json", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        plan = json.load(f)
    return run(plan)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
