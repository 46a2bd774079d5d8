"""GPU-node-hours billed while no training runs, per example, before and after GPU pools from zero
and GPU workers released at the run's end (issue 15).

    .venv/bin/python benchmarks/gpu_idle.py        # the markdown tables in the README

A model, not a measurement: GKE cannot run here. Every duration is an assumption stated in
ASSUMPTIONS (with where it comes from); the node counts and provisioning types are read from the
examples themselves (examples/<run>-h200.yaml). A test keeps the README's table equal to what this
prints.

Three phases of each GPU node's life carry no training:
- before the install: the node exists, nothing asks for it;
- start-up: from the node's start to the first GRPO step (image, Ray, NeMo RL, vLLM);
- after the end: from the run's end until the node is gone.
Reservation nodes are billed whether they are used or not (the reservation is charged until it is
deleted), so neither version changes what they cost; they are counted apart.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
RUNS = ("quickstart", "tutorial", "scale-out")


@dataclass(frozen=True)
class Minutes:
    value: float
    why: str


ASSUMPTIONS: dict[str, Minutes] = {
    # Before: `infra` created a fixed-size GPU pool at its step 6, then the bucket, Workload
    # Identity and Managed Lustre; the user then wrote values, created the token Secret, validated
    # and installed.
    "rest_of_infra": Minutes(2, "bucket and Workload Identity binding after the GPU pool (step 7-8)"),
    "lustre_create": Minutes(30, "Managed Lustre instance creation: 'tens of minutes' (issue 15); not published by Google"),
    "user_steps": Minutes(15, "values file, token Secret, validate, helm install"),
    # Both versions: the node comes up and the run starts.
    "node_up": Minutes(4, "cluster autoscaler request to schedulable node on GCE: 3-4 min (cluster-autoscaler FAQ)"),
    "image": Minutes(200 / 60, "30 GB NeMo RL image at 150 MB/s, first start on a node (docs/development.md)"),
    "ray_start": Minutes(10, "Ray, NeMo RL workers, model load from Lustre and vLLM start before step 1"),
    # After the end.
    "noticed": Minutes(8 * 60, "before: a run that ends unattended (at night) until someone runs helm uninstall"),
    "release": Minutes(1, "after: the launcher suspends the RayCluster; KubeRay deletes the pods (< 1 min in the tests)"),
    "scale_down": Minutes(10, "after: a node unneeded for more than 10 minutes is removed (cluster-autoscaler FAQ, linked by GKE)"),
}


def minutes(*names: str) -> float:
    return sum(ASSUMPTIONS[n].value for n in names)


# Per node, by version and phase: which assumptions add up.
PHASES: dict[str, dict[str, tuple[str, ...]]] = {
    "before": {
        "before install": ("node_up", "rest_of_infra", "lustre_create", "user_steps"),
        "start-up": ("image", "ray_start"),
        "after the end": ("noticed",),
    },
    "after": {
        "before install": (),
        "start-up": ("node_up", "image", "ray_start"),
        "after the end": ("release", "scale_down"),
    },
}


@dataclass(frozen=True)
class Example:
    name: str
    released: int  # GPU nodes of Spot, on-demand or flex-start groups
    reserved: int  # GPU nodes from a reservation


def example(run: str) -> Example:
    values = yaml.safe_load((ROOT / "examples" / f"{run}-h200.yaml").read_text(encoding="utf-8"))
    groups = values["workerGroups"]
    reserved = sum(g["replicas"] for g in groups if g["provisioning"] == "reservation")
    return Example(run, sum(g["replicas"] for g in groups) - reserved, reserved)


def node_hours(version: str, nodes: int) -> dict[str, float]:
    return {phase: nodes * minutes(*names) / 60 for phase, names in PHASES[version].items()}


def table() -> str:
    head = "| Example | GPU nodes | Before: idle GPU-node-hours (before install + start-up + after the end) | After | Saved |"
    rows = [head, "|---|---|---|---|---:|"]
    for run in RUNS:
        ex = example(run)
        before, after = node_hours("before", ex.released), node_hours("after", ex.released)
        nodes = f"{ex.released}" + (f" (+{ex.reserved} reserved, billed either way)" if ex.reserved else "")
        rows.append(f"| {run} | {nodes} | {_sum(before)} | {_sum(after)} | {sum(before.values()) - sum(after.values()):.1f} |")
    return "\n".join(rows) + "\n"


def _sum(hours: dict[str, float]) -> str:
    parts = " + ".join(f"{h:.1f}" for h in hours.values())
    return f"{sum(hours.values()):.1f} ({parts})"


def assumptions() -> str:
    return "\n".join(f"- `{k}`: {m.value:.3g} min: {m.why}" for k, m in ASSUMPTIONS.items()) + "\n"


# --- Where vLLM runs: the tutorial's run in three layouts ---------------------------------------
#
# The order of NeMo RL's loops (nemo_rl/algorithms/grpo.py at v0.5.0-v0.7.0): `grpo_train` generates,
# then computes logprobs, then trains, one after the other; `async_grpo_train` generates the next
# step's samples on the generation GPUs while the training GPUs train. A step is W node-minutes of
# work (the seed's step time on one node per phase), a share `gen` of it generation. Every phase is
# assumed to scale linearly with its GPUs. Then, on N nodes (n for vLLM where it has its own):
# - split, synchronous (the seed, n = N/2): a step takes gen*W/n + (1-gen)*W/(N-n); each node idles
#   while the other phase runs: with n = N/2 exactly half the billed GPU time, whatever `gen` is;
# - colocated, synchronous (NeMo RL's recipe): both phases on all N nodes, W/N plus the switch
#   between them (vLLM to sleep, the training state back, weights refit), SWITCH minutes each step;
# - split, asynchronous: the phases overlap, a step takes the longer, max(gen*W/n, (1-gen)*W/(N-n)).


@dataclass(frozen=True)
class Layout:
    name: str
    step_minutes: float
    busy_node_minutes: float  # work done per step
    nodes: int

    @property
    def idle(self) -> float:
        """Share of the billed GPU time in which the GPUs do no work, per step."""
        return 1 - self.busy_node_minutes / (self.nodes * self.step_minutes)


LAYOUT_ASSUMPTIONS: dict[str, Minutes] = {
    "step_work": Minutes(4, "one step of the tutorial's run with a node per phase: the README's assumed 3-5 minutes, midpoint"),
    "switch": Minutes(0.5, "colocated, per step: vLLM sleep and wake, training state off and on the GPUs, in-node refit (not measured)"),
}
GENERATION_SHARES = (0.5, 0.7)  # generation's share of a step's work (not measured here: a range)


def tutorial_run() -> tuple[int, int]:
    """(GPU nodes, steps) of examples/tutorial-h200.yaml."""
    values = yaml.safe_load((ROOT / "examples" / "tutorial-h200.yaml").read_text(encoding="utf-8"))
    nodes = sum(g["replicas"] for g in values["workerGroups"])
    steps = next(int(a.split("=", 1)[1]) for a in values["grpo"]["overrides"] if a.startswith("grpo.max_num_steps="))
    return nodes, steps


def layouts(nodes: int, gen: float, work: float | None = None, switch: float | None = None) -> list[Layout]:
    w = LAYOUT_ASSUMPTIONS["step_work"].value if work is None else work
    s = LAYOUT_ASSUMPTIONS["switch"].value if switch is None else switch
    n = max(1, nodes // 2)
    g, t = gen * w / n, (1 - gen) * w / (nodes - n)
    return [
        Layout(f"split {n}+{nodes - n}, synchronous (the seed)", g + t, w, nodes),
        Layout(f"colocated on {nodes} (NeMo RL's recipe, the default)", w / nodes + s, w, nodes),
        Layout(f"split {n}+{nodes - n}, asynchronous (`--async`)", max(g, t), w, nodes),
    ]


def layouts_table() -> str:
    """Per layout: step time, idle share of the billed GPU time and GPU-node-hours of the run, each
    as 'at the first generation share / at the second'."""
    nodes, steps = tutorial_run()
    shares = " / ".join(f"{g:.0%}" for g in GENERATION_SHARES)
    rows = [
        f"| Layout ({nodes} nodes; generation {shares} of a step's work) | Step, minutes | GPU time idle | GPU-node-hours, {steps} steps |",
        "|---|---|---|---|",
    ]
    by_share = [layouts(nodes, g) for g in GENERATION_SHARES]
    for i, first in enumerate(by_share[0]):
        cells = (
            " / ".join(f"{ls[i].step_minutes:.1f}" for ls in by_share),
            " / ".join(f"{ls[i].idle:.0%}" for ls in by_share),
            " / ".join(f"{ls[i].step_minutes * nodes * steps / 60:.0f}" for ls in by_share),
        )
        rows.append(f"| {first.name} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def main() -> int:
    sys.stdout.write(table() + "\nAssumptions (minutes per GPU node):\n" + assumptions())
    nodes, steps = tutorial_run()
    sys.stdout.write(f"\nThe tutorial's run ({nodes} nodes, {steps} steps) by where vLLM runs:\n" + layouts_table())
    sys.stdout.write("Assumptions:\n" + "\n".join(f"- `{k}`: {m.value:.3g} min: {m.why}" for k, m in LAYOUT_ASSUMPTIONS.items()) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
