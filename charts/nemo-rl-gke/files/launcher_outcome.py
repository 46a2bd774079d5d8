"""The run's outcome, kept on the shared volume so that it outlives the Ray head.

A Ray head that restarts forgets its jobs (the chart runs Ray without GCS fault tolerance), so a
new launcher would submit a finished run again. The launcher therefore writes the run's final
state (succeeded, stopped, failed for good) into the run's folder on the shared volume, one file
per run spec (named by its submission id), and reads it before any submission.

The file is written atomically (atomic_file): a reader sees the old file or the new one, never
half of one. The launcher mounts only this folder
read-write; checkpoints stay read-only to it.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, fields
from typing import Any

import atomic_file

STATES = ("succeeded", "stopped", "failed")
MAX_BYTES = 1 << 16


@dataclass(frozen=True)
class Outcome:
    submission_id: str
    state: str  # one of STATES
    reason: str  # completed, epochs-ended, stopped-by-user, out-of-restarts, stalled
    attempt: int  # the last attempt's number
    job_id: str  # the last attempt's Ray submission id
    ray_status: str  # its Ray status (SUCCEEDED, FAILED, STOPPED)
    step: int | None  # the newest checkpoint step when it ended (None: unknown or none)
    max_restarts: int  # launcher.maxRestarts when it ended
    message: str  # the launcher's last word on it
    recorded_at: str = ""  # UTC, ISO 8601


def path_of(folder: str, submission_id: str) -> str:
    return os.path.join(folder, f"{submission_id}.json")


def read(folder: str, submission_id: str) -> tuple[Outcome | None, str]:
    """(the recorded outcome, "") or (None, why it could not be read; "" when there is none)."""
    path = path_of(folder, submission_id)
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(MAX_BYTES))
    except FileNotFoundError:
        return None, ""
    except (OSError, ValueError) as e:
        return None, f"cannot read {path}: {getattr(e, 'strerror', None) or e}"
    names = {f.name for f in fields(Outcome)}
    if not isinstance(data, dict) or data.get("submission_id") != submission_id or data.get("state") not in STATES:
        return None, f"{path} is not an outcome of run {submission_id}"
    try:
        return Outcome(**{k: v for k, v in data.items() if k in names}), ""
    except TypeError as e:
        return None, f"{path} is incomplete ({e})"


def write(folder: str, outcome: Outcome) -> str:
    """Write the outcome atomically (atomic_file); returns the file's path."""
    data: dict[str, Any] = asdict(outcome) | {"recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    path = path_of(folder, outcome.submission_id)
    atomic_file.write_lines(path, [json.dumps(data, indent=2, sort_keys=True)])
    return path
