"""The run's checkpoints on the shared volume: the newest complete step folder, and the training
step a checkpoint holds (NeMo RL's own record of it)."""

from __future__ import annotations

import json
import os
import re

from launcher_log import log

STEP_DIR = re.compile(r"^step_(\d+)$")


def checkpoint_step(checkpoint_dir: str, step: int | None) -> int | None:
    """The training step the checkpoint step_<step> holds: NeMo RL's own record of it when it can be
    read, else the folder's number. NeMo RL (nemo_rl/algorithms/grpo.py at v0.5.0, v0.6.0, v0.7.0)
    names the folder after `total_steps + 1` and writes the same number as "total_steps" into the
    folder's training_info.json (nemo_rl/utils/checkpoint.py, init_tmp_checkpoint)."""
    if step is None:
        return None
    try:
        with open(os.path.join(checkpoint_dir, f"step_{step}", "training_info.json"), "rb") as f:
            recorded = json.loads(f.read(1 << 20)).get("total_steps")
    except (OSError, ValueError, AttributeError):
        return step
    return recorded if isinstance(recorded, int) and not isinstance(recorded, bool) and recorded >= 0 else step


def latest_step(checkpoint_dir: str) -> int | None:
    """The newest complete step_N folder (NeMo RL writes tmp_step_N first and renames it)."""
    try:
        names = os.listdir(checkpoint_dir)
    except FileNotFoundError:
        return None
    except OSError as e:
        log(f"cannot read {checkpoint_dir} ({e.strerror or e}); NeMo RL resumes from it if it can read it")
        return None
    steps = [int(m.group(1)) for n in names if (m := STEP_DIR.fullmatch(n)) and os.path.isdir(os.path.join(checkpoint_dir, n))]
    return max(steps) if steps else None
