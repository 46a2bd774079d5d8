"""Checkpoint folders as NeMo RL's CheckpointManager writes them (tmp_step_N renamed to step_N;
resume from the highest step_N), and a listing with content hashes to show none was lost or
rewritten. Standard library plus the chart's launcher (the stand-in driver uses it inside the Ray job)."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from generator.render.chart_programs import load

# The newest complete step_N, exactly as the launcher reports where a resubmission resumes.
latest_step = load("launcher_checkpoints").latest_step


def save(checkpoint_dir: str, step: int, attempt: str) -> None:
    """NeMo RL's CheckpointManager: write tmp_step_N, then rename it to step_N."""
    tmp = os.path.join(checkpoint_dir, f"tmp_step_{step}")
    os.makedirs(os.path.join(tmp, "policy", "weights"), exist_ok=True)
    with open(os.path.join(tmp, "training_info.json"), "w", encoding="utf-8") as f:
        json.dump({"step": step, "written_by": attempt, "time": time.time()}, f)
    with open(os.path.join(tmp, "train_dataloader.pt"), "wb") as f:
        f.write(f"dataloader position after step {step}\n".encode())
    with open(os.path.join(tmp, "policy", "weights", "model.safetensors"), "wb") as f:
        f.write(os.urandom(256))
    os.rename(tmp, os.path.join(checkpoint_dir, f"step_{step}"))


def snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    """relative path -> (sha256, mtime_ns) of every file under folder."""
    out: dict[str, tuple[str, int]] = {}
    for root, _dirs, files in os.walk(folder):
        for name in files:
            path = Path(root) / name
            out[str(path.relative_to(folder))] = (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
    return out


def compare(before: dict[str, tuple[str, int]], after: dict[str, tuple[str, int]]) -> tuple[list[str], list[str], list[str]]:
    """(lost, changed, added) relative paths."""
    lost = sorted(p for p in before if p not in after)
    changed = sorted(p for p in before if p in after and after[p] != before[p])
    added = sorted(p for p in after if p not in before)
    return lost, changed, added
