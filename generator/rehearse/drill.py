"""The preemption drill: once the run has written a checkpoint, a Spot reclaim takes one GPU
worker node away; KubeRay recreates the pod (a node with the same resources) a little later. The
checkpoint folder is listed and hashed before and after, to show nothing was lost or rewritten."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from generator.rehearse.checkpoints import snapshot
from generator.rehearse.cluster import LocalCluster

PAUSE_AFTER_STEP = 2  # the stand-in writes step_1 and step_2, then trains on until the node loss
PAUSED_LINE = "[stand-in] training goes on"  # the stand-in's line once it is past that checkpoint
RECREATE_DELAY_S = 2.0


@dataclass
class Drill:
    """Runs in the main thread (Ray's Node registers signal handlers when a node is added)."""

    cluster: LocalCluster
    checkpoint_dir: Path
    say: Callable[[str], None]
    pause_after_step: int = PAUSE_AFTER_STEP
    delay_s: float = RECREATE_DELAY_S
    before: dict[str, tuple[str, int]] = field(default_factory=dict)
    victim: str = ""
    error: str = ""

    def preempt(self) -> None:
        marker = self.checkpoint_dir / f"step_{self.pause_after_step}"
        if not marker.is_dir():
            self.error = f"{marker} is missing although the stand-in reported it"
            return
        self.before = snapshot(self.checkpoint_dir)
        workers = [n.spec for n in self.cluster.nodes if not n.spec.is_head and n.spec.gpus > 0]
        if not workers:
            self.error = "no GPU worker node to reclaim"
            return
        spec = workers[-1]
        self.victim = spec.name
        self.say(
            f"drill: Spot reclaim: step_{self.pause_after_step} is on the shared volume ({len(self.before)} files); "
            f"removing Ray node {spec.name} ({spec.gpus} GPUs) while the run trains on"
        )
        self.cluster.remove(spec.name)
        time.sleep(self.delay_s)
        self.say(
            f"drill: KubeRay recreates the pod after {self.delay_s:g} s: a new node like {spec.name} ({spec.cpus} CPUs, {spec.gpus} GPUs)"
        )
        self.cluster.add(spec)
