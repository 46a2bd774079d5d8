"""The launcher's spec (launch.json, rendered by the chart): its keys, their JSON types and what
each value must satisfy, read into a `Spec`; a bad spec is one line naming its key (exit 2). And
the ids of a run's attempts: attempt n > 1 of submission id S is S-retry<n-1>."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import launcher_outcome
import launcher_workers

MAX_SPEC_BYTES = 1 << 20


ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


UNBOUNDED_S = 10**7  # the longest wait a spec may ask for


class SpecError(Exception):
    """The spec file is missing, unreadable or malformed (exit 2)."""


@dataclass
class Spec:
    address: str
    submission_id: str
    entrypoint: str
    expected_gpus: int
    expected_nodes: int = 0
    checkpoint_dir: str = ""
    wait_for_files: list[str] = field(default_factory=list)
    follow: bool = False
    max_restarts: int = 0
    previous_runs: str = "wait"
    timeouts: dict[str, float] = field(default_factory=dict)
    poll_interval_s: float = 10.0
    metadata: dict[str, str] = field(default_factory=dict)
    expected_interfaces: list[str] = field(default_factory=list)
    ray_version: str = ""
    max_num_steps: int = 0  # grpo.max_num_steps of the run; 0: unknown (a SUCCEEDED run is done)
    gpu_release: dict[str, Any] = field(default_factory=dict)  # see launcher_workers.Workers; {}: never
    outcome_dir: str = ""  # where the run's outcome is kept (the launcher's writable folder); "": nowhere
    outcome_volume_dir: str = ""  # the same folder as the shared volume shows it to other pods
    config_verdict: str = ""  # the preparation Job's verdict on this run (config_check.py); "": none to wait for
    rehearsal: bool = False  # run by `python -m generator rehearse` on a local Ray: no GPU node exists, none is billed

    def workers(self) -> launcher_workers.Workers | None:
        if not self.gpu_release:
            return None
        g = self.gpu_release
        return launcher_workers.Workers(g["raycluster"], g["namespace"], dict(g["groups"]), g["kueue"], g["service_account_dir"])

    def outcome_where(self) -> str:
        return launcher_outcome.path_of(self.outcome_volume_dir or self.outcome_dir, self.submission_id)

    def timeout(self, name: str, default: float = UNBOUNDED_S) -> float:
        """The wait `name` in seconds. The chart's values hold the bounded ones (launcher.timeouts);
        a spec that names none waits as long as any spec may ask."""
        return float(self.timeouts.get(name, default))


def _ok(key: str, value: Any) -> str:
    return ""


def _url(key: str, value: str) -> str:
    return "" if re.fullmatch(r"^https?://[^\s/]+(:\d+)?/?$", value) else f"{key}: {value!r} is not an http(s)://host:port URL"


def _run_id(key: str, value: str) -> str:
    return "" if ID_PATTERN.fullmatch(value) else f"{key}: use 1-100 letters, digits, '.', '_' or '-'"


def _one_line(key: str, value: str) -> str:
    return "" if value.strip() and "\n" not in value and len(value) <= 100_000 else f"{key}: must be one non-empty line"


def _count(key: str, value: int) -> str:
    return "" if 0 <= value <= 100_000 else f"{key}: {value} is out of range 0-100000"


def _steps(key: str, value: int) -> str:
    return "" if 0 <= value <= 10**9 else f"{key}: {value} is out of range 0-1000000000"


def _previous_runs(key: str, value: str) -> str:
    return "" if value in ("wait", "stop") else f"{key}: must be 'wait' or 'stop'"


def _strings(key: str, value: list[Any]) -> str:
    return "" if all(isinstance(i, str) and i and "\n" not in i for i in value) else f"{key}: must be a list of non-empty strings"


def _absolute_files(key: str, value: list[Any]) -> str:
    if why := _strings(key, value):
        return why
    return next((f"{key}: {f!r} is not an absolute path" for f in value if not f.startswith("/")), "")


def _checkpoint_dir(key: str, value: str) -> str:
    if value and (not value.startswith("/") or ".." in value.split("/") or "\n" in value):
        return f"{key}: {value!r} must be an absolute path on the shared volume, without '..'"
    return ""


def _timeouts(key: str, value: dict[Any, Any]) -> str:
    for k, v in value.items():
        if k not in TIMEOUT_KEYS:
            return f"{key}.{k}: unknown (allowed: {', '.join(TIMEOUT_KEYS)})"
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= UNBOUNDED_S:
            return f"{key}.{k}: must be a number of seconds between 0 and {UNBOUNDED_S}"
    return ""


def _poll(key: str, value: float) -> str:
    return "" if 0.01 <= value <= 3600 else f"{key}: must be between 0.01 and 3600"


def _gpu_release(key: str, value: dict[Any, Any]) -> str:
    shape = {"raycluster": str, "namespace": str, "groups": dict, "kueue": bool, "service_account_dir": str}
    if not value:
        return ""
    if set(value) != set(shape):
        return f"{key}: needs exactly the keys {', '.join(shape)}"
    for k, t in shape.items():
        if not isinstance(value[k], t) or (t is str and not value[k]):
            return f"{key}.{k}: expected a non-empty {t.__name__}"
    if not value["service_account_dir"].startswith("/"):
        return f"{key}.service_account_dir: must be an absolute path"
    groups = value["groups"]
    replicas_ok = all(isinstance(n, str) and isinstance(r, int) and not isinstance(r, bool) and 0 < r <= 1000 for n, r in groups.items())
    if not groups or not replicas_ok:
        return f"{key}.groups: must map worker group names to replicas (1-1000)"
    return ""


def _absolute_dir(key: str, value: str) -> str:
    if value and (not value.startswith("/") or ".." in value.split("/") or "\n" in value):
        return f"{key}: {value!r} must be an absolute path without '..'"
    return ""


def _string_map(key: str, value: dict[Any, Any]) -> str:
    return "" if all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()) else f"{key}: keys and values must be strings"


@dataclass(frozen=True)
class Key:
    """One key of the spec: its JSON types, whether it must be there, and what else its value
    must satisfy (`check` returns why it does not, "" when it does)."""

    types: tuple[type, ...]
    required: bool = False
    check: Callable[[str, Any], str] = _ok


SPEC_KEYS: dict[str, Key] = {
    "address": Key((str,), True, _url),
    "submission_id": Key((str,), True, _run_id),
    "entrypoint": Key((str,), True, _one_line),
    "expected_gpus": Key((int,), True, _count),
    "expected_nodes": Key((int,), check=_count),
    "checkpoint_dir": Key((str,), check=_checkpoint_dir),
    "wait_for_files": Key((list,), check=_absolute_files),
    "follow": Key((bool,)),
    "max_restarts": Key((int,), check=_count),
    "previous_runs": Key((str,), check=_previous_runs),
    "timeouts": Key((dict,), check=_timeouts),
    "poll_interval_s": Key((int, float), check=_poll),
    "metadata": Key((dict,), check=_string_map),
    "expected_interfaces": Key((list,), check=_strings),
    "ray_version": Key((str,)),
    "max_num_steps": Key((int,), check=_steps),
    "gpu_release": Key((dict,), check=_gpu_release),
    "outcome_dir": Key((str,), check=_absolute_dir),
    "outcome_volume_dir": Key((str,), check=_absolute_dir),
    "config_verdict": Key((str,), check=_absolute_dir),
    "rehearsal": Key((bool,)),
}


TIMEOUT_KEYS = ("files_s", "head_s", "gpus_s", "previous_s", "running_s", "release_s")


RELEASE_WAIT_S = 600  # how long the launcher waits to see the GPU workers gone, unless timeouts.release_s


def _shape_error(k: str, key: Key, data: dict[str, Any]) -> str:
    """Why the key is missing or of the wrong JSON type ("" when it is fine)."""
    if k not in data:
        return f"{k}: required key is missing" if key.required else ""
    value = data[k]
    if isinstance(value, bool) and bool not in key.types:
        return f"{k}: expected {key.types[0].__name__}, got a boolean"
    if not isinstance(value, key.types):
        return f"{k}: expected {key.types[0].__name__}, got {type(value).__name__}"
    return ""


def parse_spec(data: Any) -> Spec:
    """Check every key and type, then every value, as SPEC_KEYS says; a bad spec is reported as
    one line naming the key."""
    if not isinstance(data, dict):
        raise SpecError("spec must be a JSON object")
    unknown = sorted(set(data) - set(SPEC_KEYS))
    if unknown:
        raise SpecError(f"unknown key {unknown[0]!r} (allowed: {', '.join(SPEC_KEYS)})")
    for k, key in SPEC_KEYS.items():
        if why := _shape_error(k, key, data):
            raise SpecError(why)
    for k, key in SPEC_KEYS.items():
        if k in data and (why := key.check(k, data[k])):
            raise SpecError(why)
    return Spec(**data)


def load_spec(path: str) -> Spec:
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_SPEC_BYTES + 1)
    except OSError as e:
        raise SpecError(f"{path}: cannot read: {e.strerror}") from None
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError(f"{path}: larger than {MAX_SPEC_BYTES} bytes")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise SpecError(f"{path}: not valid JSON: {e}") from None
    return parse_spec(data)


def attempt_id(base: str, n: int) -> str:
    return base if n == 1 else f"{base}-retry{n - 1}"


def attempt_number(base: str, submission_id: str | None) -> int | None:
    if submission_id == base:
        return 1
    if submission_id and submission_id.startswith(f"{base}-retry"):
        tail = submission_id[len(base) + len("-retry") :]
        if tail.isdigit():
            return int(tail) + 1
    return None
