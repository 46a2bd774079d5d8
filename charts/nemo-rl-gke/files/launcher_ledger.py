"""The GPU-time ledger: what the launcher saw of the GPU nodes' time, logged when it ends.

Three spans, each in hours and GPU-node-hours (the GPU worker nodes of the values times the
span): from the first GPU worker ready (the earliest start of a Ray node with GPUs) to the first
training step, the run (first step to its end), and from its end until KubeRay reported the GPU
workers gone. The cluster autoscaler removes the nodes some minutes after their pods are gone;
the launcher cannot see nodes, so that tail is named, not measured.

The first training step is the first step header NeMo RL prints, "===...=== Step N/M ===...==="
(25 '=' each side), as launcher_progress.step_header reads it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from launcher_progress import step_header


@dataclass
class Ledger:
    gpu_nodes: int
    billed: bool = True  # False in a rehearsal: no GPU node exists, so none stays billed
    gpus_ready_at: float | None = None  # epoch seconds
    first_step_at: float | None = None
    ended_at: float | None = None
    released_at: float | None = None

    def saw_gpu_nodes(self, start_times: list[float]) -> None:
        """Start times (epoch seconds) of the GPU nodes alive now; the earliest is kept."""
        if start_times:
            first = min(start_times)
            self.gpus_ready_at = first if self.gpus_ready_at is None else min(self.gpus_ready_at, first)

    def saw_line(self, line: str) -> None:
        if self.first_step_at is None and step_header(line) is not None:
            self.first_step_at = time.time()

    def run_ended(self) -> None:
        self.ended_at = time.time()

    def gpus_released(self) -> None:
        self.released_at = time.time()

    def gpu_node_hours(self) -> float | None:
        """GPU-node-hours from the GPU workers ready (else the first step) to the end of the run."""
        start = self.gpus_ready_at if self.gpus_ready_at is not None else self.first_step_at
        if start is None or self.ended_at is None:
            return None
        return max(0.0, self.ended_at - start) / 3600 * self.gpu_nodes

    def _span(self, what: str, start: float | None, end: float | None) -> str:
        if start is None or end is None:
            return f"{what}: not seen"
        hours = max(0.0, end - start) / 3600
        return f"{what}: {hours:.2f} h ({hours * self.gpu_nodes:.2f} GPU-node-hours)"

    def summary(self) -> str:
        parts = [
            self._span("GPU workers ready to first training step", self.gpus_ready_at, self.first_step_at),
            self._span("first step to end of run", self.first_step_at, self.ended_at),
            self._span("end of run to GPU workers gone", self.ended_at, self.released_at),
        ]
        if self.released_at is not None:
            tail = "; the cluster autoscaler removes the idle nodes some minutes later"
        elif self.billed:
            tail = "; the GPU workers were not released: their nodes stay billed until `helm uninstall`"
        else:
            tail = ""
        return f"GPU time ({self.gpu_nodes} GPU nodes): " + "; ".join(parts) + tail
