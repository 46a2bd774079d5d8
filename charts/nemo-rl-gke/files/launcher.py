#!/usr/bin/env python3
"""Launch the NeMo RL GRPO run on the release's Ray cluster, once, and keep it going.

    python launcher.py SPEC.json           submit (or find) the run; follow it if asked
    python launcher.py --check SPEC.json   `helm test`: nodes, GPUs and RDMA interfaces

Runs in the NeMo RL image (standard library + ray). SPEC.json is rendered by the chart:
  address          Ray dashboard URL, e.g. http://nemo-rl-head-svc.default.svc.cluster.local:8265
  submission_id    deterministic id derived from the run spec; attempt n > 1 is <id>-retry<n-1>
  entrypoint       the NeMo RL command (holds no secret: tokens reach the driver through the
                   head pod's environment, from a Kubernetes Secret)
  expected_gpus    GPUs the cluster must report before submitting
  ... and optional keys, see SPEC_KEYS.
Its sibling modules (launcher_*.py, in the same ConfigMap) keep the run's outcome on the shared
volume, release the GPU workers through the Kubernetes API when the run has ended, keep the
GPU-time ledger, and turn NeMo RL's log into one progress line per training step.
Exit status: 0 run running (or finished) as asked; 3 the run failed for good, was stopped, or a
wait timed out; 2 bad spec. The Job fails at once on 2 and 3 (podFailurePolicy): a new pod would
wait the whole timeout again or repeat the same verdict. Anything else (1: an unexpected error,
137: OOM-killed) is retried by the Job.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shlex
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import config_check
import launcher_outcome
import launcher_workers
from launcher_kube import KubeApi, KubeError
from launcher_ledger import Ledger
from launcher_progress import Progress

TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}
ACTIVE = {"PENDING", "RUNNING"}
MAX_SPEC_BYTES = 1 << 20
ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
STEP_DIR = re.compile(r"^step_(\d+)$")
UNBOUNDED_S = 10**7  # the longest wait a spec may ask for
INTERFACES_TAG = "NEMO_RL_GKE_INTERFACES "


class SpecError(Exception):
    """The spec file is missing, unreadable or malformed (exit 2)."""


EXIT_FINAL = 3
STALLED_LIMIT = 2  # failed attempts in a row without a new checkpoint before giving up


class LaunchFailed(Exception):
    """A wait expired or the run failed (exit 3)."""


class GpusTimedOut(LaunchFailed):
    """The GPUs did not all come: the workers that did are released (nothing will use them)."""


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


def log(message: str) -> None:
    print(f"[launcher {time.strftime('%Y-%m-%dT%H:%M:%S')}] {message}", flush=True)


def _wait(what: str, timeout: float, poll: float, probe: Any, hint: str) -> Any:
    """Call probe() until it returns a truthy value; LaunchFailed after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last_note = 0.0
    while True:
        result = probe()
        if result:
            return result
        now = time.monotonic()
        if now >= deadline:
            raise LaunchFailed(f"timed out after {timeout:.0f}s waiting for {what}; {hint}")
        if now - last_note >= 60:
            log(f"waiting for {what} ...")
            last_note = now
        time.sleep(min(poll, max(0.0, deadline - now)))


# --- cluster probes -------------------------------------------------------------------------


def head_healthy(address: str) -> bool:
    try:
        with urllib.request.urlopen(f"{address.rstrip('/')}/api/gcs_healthz", timeout=5) as r:  # noqa: S310 - http(s) checked in parse_spec
            return r.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def head_ray_version(address: str) -> str:
    """The Ray version the head runs, from the Jobs API ("" when it does not say)."""
    try:
        with urllib.request.urlopen(f"{address.rstrip('/')}/api/version", timeout=10) as r:  # noqa: S310 - http(s) checked in parse_spec
            return str(json.loads(r.read(1 << 16)).get("ray_version") or "")
    except (urllib.error.URLError, OSError, ValueError, AttributeError):
        return ""


def version_mismatch(spec: Spec) -> str:
    """Why the head cannot run this spec's image ("" when it can or cannot tell).

    KubeRay does not replace running Ray pods when the RayCluster's template changes: after a
    `helm upgrade` to another image, the head and workers still run the old one, and a run of the
    new release's code would fail there, attempt after attempt."""
    if not spec.ray_version:
        return ""
    running = ""
    for _ in range(3):
        if running := head_ray_version(spec.address):
            break
        time.sleep(spec.poll_interval_s)
    else:
        log("could not read the Ray head's version (GET /api/version); not compared with the image's")
    if not running or running == spec.ray_version:
        return ""
    return (
        f"the Ray head runs Ray {running}, but this release's image has Ray {spec.ray_version}: the Ray pods "
        "still run the previous image (KubeRay does not replace running pods); `helm uninstall` and install "
        "again to change the image (the volume and its checkpoints are kept)"
    )


def alive_nodes(address: str) -> list[dict[str, Any]]:
    from ray.util.state import list_nodes

    nodes = list_nodes(address=address, filters=[("state", "=", "ALIVE")], detail=True, raise_on_missing_output=False)
    out = []
    for n in nodes:
        d = n if isinstance(n, dict) else n.__dict__
        out.append(
            {
                "node_id": d.get("node_id"),
                "is_head": bool(d.get("is_head_node")),
                "resources": d.get("resources_total") or {},
                "start_s": (d.get("start_time_ms") or 0) / 1000 or None,
            }
        )
    return out


def gpu_node_starts(nodes: list[dict[str, Any]]) -> list[float]:
    """When each alive GPU node started (epoch seconds), where Ray says."""
    return [n["start_s"] for n in nodes if float(n["resources"].get("GPU", 0)) > 0 and n.get("start_s")]


def cluster_gpus(address: str, ledger: Ledger | None = None) -> tuple[int, float]:
    try:
        nodes = alive_nodes(address)
    except Exception as e:  # the head may restart: report and poll again
        log(f"cannot list Ray nodes yet ({type(e).__name__}: {e})")
        return 0, 0.0
    if ledger is not None:
        ledger.saw_gpu_nodes(gpu_node_starts(nodes))
    return len(nodes), sum(float(n["resources"].get("GPU", 0)) for n in nodes)


class GpuWatch:
    """Whether the cluster lost a GPU node while an attempt ran: a GPU node seen at the start is no
    longer alive, or the alive GPUs fell below the spec's count (what a reclaimed Spot node or an
    evicted worker pod looks like from Ray). Looked at on every status poll and once at the end; a
    look that cannot list the nodes (the head restarting) proves nothing and is skipped."""

    def __init__(self, spec: Spec, ledger: Ledger | None = None) -> None:
        self.spec = spec
        self.ledger = ledger
        self.start: set[str] = set()
        self.lost = ""
        self.look(first=True)

    def look(self, first: bool = False) -> None:
        if self.lost:
            return
        try:
            nodes = alive_nodes(self.spec.address)
        except Exception:  # the head may restart; the next look tells
            return
        gpu_nodes = {str(n["node_id"]) for n in nodes if float(n["resources"].get("GPU", 0)) > 0}
        gpus = sum(float(n["resources"].get("GPU", 0)) for n in nodes)
        if first:
            self.start = gpu_nodes
            if self.ledger is not None:
                self.ledger.saw_gpu_nodes(gpu_node_starts(nodes))
            return
        if gone := sorted(self.start - gpu_nodes):
            self.lost = f"GPU node {gone[0][:12]} is gone"
        elif gpus < self.spec.expected_gpus:
            self.lost = f"{gpus:g} GPUs alive, {self.spec.expected_gpus} expected"


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


# --- the run --------------------------------------------------------------------------------


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


class Runs:
    """The Ray Jobs API, with retries while the head is briefly unreachable."""

    def __init__(self, spec: Spec) -> None:
        from ray.job_submission import JobSubmissionClient

        self.spec = spec
        self.client = _retry(lambda: JobSubmissionClient(spec.address), spec)

    def call(self, fn: Any) -> Any:
        return _retry(fn, self.spec)

    def attempts(self) -> list[tuple[int, Any]]:
        jobs = self.call(self.client.list_jobs)
        found = [(n, j) for j in jobs if (n := attempt_number(self.spec.submission_id, j.submission_id))]
        return sorted(found, key=lambda t: t[0])

    def others_active(self) -> list[Any]:
        release = self.spec.metadata.get("nemo-rl-gke.release")
        if not release:
            return []
        jobs = self.call(self.client.list_jobs)
        return [
            j
            for j in jobs
            if (j.metadata or {}).get("nemo-rl-gke.release") == release
            and attempt_number(self.spec.submission_id, j.submission_id) is None
            and str(j.status) in ACTIVE
        ]

    def status(self, job_id: str) -> str:
        """The run's status; FAILED when the head no longer knows it: a restarted head pod loses
        its job history (the chart runs Ray without GCS fault tolerance), and the run died with it,
        so it counts as a failed attempt and is resubmitted while restarts are left."""
        try:
            return str(self.call(lambda: self.client.get_job_status(job_id)))
        except RuntimeError as e:
            if not _gone(e):
                raise
            log(f"{job_id} is gone from the Ray head: its pod restarted and lost the job history; the run ended with it")
            return "FAILED"

    def logs(self, job_id: str) -> str:
        try:
            return str(self.call(lambda: self.client.get_job_logs(job_id)))
        except RuntimeError as e:
            if not _gone(e):
                raise
            return ""

    def submit(self, n: int) -> str:
        job_id = attempt_id(self.spec.submission_id, n)
        try:
            self.call(
                lambda: self.client.submit_job(entrypoint=self.spec.entrypoint, submission_id=job_id, metadata=dict(self.spec.metadata))
            )
        except RuntimeError as e:
            if "already exists" not in str(e):
                raise
            log(f"{job_id} was submitted meanwhile; following it")
        return job_id


def _gone(e: Exception) -> bool:
    return "status code 404" in str(e) and "does not exist" in str(e)


# Answers of a head that is up but not ready yet: right after start its job agent may not have
# registered ("No available agent to submit job, please try again later", HTTP 500).
# Whole phrases: submission ids are hex hashes, so a bare "503" could match one in a real error.
TRANSIENT = ("connect", "no available agent", "try again later", "status code 502", "status code 503")


def _retry(fn: Any, spec: Spec) -> Any:
    deadline = time.monotonic() + spec.timeout("head_s")
    while True:
        try:
            return fn()
        except (ConnectionError, OSError) as e:
            if time.monotonic() >= deadline:
                raise LaunchFailed(f"Ray head at {spec.address} unreachable: {e}") from None
            time.sleep(spec.poll_interval_s)
        except Exception as e:
            # requests' ConnectionError derives from OSError; other errors that say the head is
            # not ready are retried too; anything else propagates.
            if not any(t in str(e).lower() for t in TRANSIENT) or time.monotonic() >= deadline:
                raise
            log(f"Ray head not ready ({str(e).splitlines()[0][:120]}); retrying")
            time.sleep(spec.poll_interval_s)


def follow_logs(
    runs: Runs, job_id: str, on_poll: Callable[[], None] = lambda: None, on_line: Callable[[str], None] = lambda _line: None
) -> str:
    """Stream the run's logs to stdout until it ends; the status is polled, the stream only
    feeds output (it may drop and reconnect, and ends a few seconds after the run). The whole log
    is fetched at the end only when no stream could finish: a long run's log can be larger than
    the launcher's memory."""
    lock = threading.Lock()
    printed = 0
    partial = ""  # the printed text's last line, until its newline comes
    ended = threading.Event()  # the run is over: a stream that ends now has sent everything
    complete = threading.Event()

    def emit(text: str, offset: int) -> None:
        # Streams restart from the beginning after a reconnect: print each byte once.
        nonlocal printed, partial
        with lock:
            if offset + len(text) > printed:
                new = text[max(0, printed - offset) :]
                sys.stdout.write(new)
                sys.stdout.flush()
                printed = offset + len(text)
                *lines, partial = (partial + new).split("\n")
                for line in lines:
                    on_line(line)

    async def tail() -> None:
        seen = 0
        async for chunk in runs.client.tail_job_logs(job_id):
            emit(chunk, seen)
            seen += len(chunk)

    def pump() -> None:
        tries_after_end = 0
        while tries_after_end < 3:  # then the whole log is fetched instead
            if ended.is_set():
                tries_after_end += 1
            try:
                asyncio.run(tail())
                if ended.is_set():
                    complete.set()
                    return
            except Exception as e:  # a dropped websocket is normal on long runs
                if not ended.is_set():
                    log(f"log stream dropped ({type(e).__name__}); reconnecting")
            ended.wait(runs.spec.poll_interval_s)

    stream = threading.Thread(target=pump, name="log-stream", daemon=True)
    stream.start()
    while (status := runs.status(job_id)) not in TERMINAL:
        on_poll()
        time.sleep(runs.spec.poll_interval_s)
    on_poll()
    ended.set()
    stream.join(timeout=60)
    if not complete.is_set():
        emit(runs.logs(job_id), 0)
    return status


def wait_until_started(runs: Runs, job_id: str) -> str:
    timeout = runs.spec.timeout("running_s", 3600)
    return _wait(
        f"{job_id} to start",
        timeout,
        runs.spec.poll_interval_s,
        lambda: s if (s := runs.status(job_id)) not in ("PENDING",) else None,
        "the job stayed PENDING; check `ray job status` on the head",
    )


def wait_for_files(spec: Spec) -> None:
    for path in spec.wait_for_files:
        _wait(
            f"{path} (written by the preparation Job)",
            spec.timeout("files_s"),
            spec.poll_interval_s,
            lambda p=path: os.path.exists(p),
            "check the preparation Job's logs (kubectl logs job/<release>-prepare-...)",
        )
        log(f"preparation complete: {path}")


def config_refusal(spec: Spec) -> str:
    """Wait for the preparation Job's verdict on this very run (NeMo RL's own config code, in the
    image); NeMo RL's refusal with the values key to change, or "" to go on."""
    if not spec.config_verdict:
        return ""
    _wait(
        f"{spec.config_verdict} (the run checked by its release in the image, by the preparation Job)",
        spec.timeout("files_s"),
        spec.poll_interval_s,
        lambda: os.path.exists(spec.config_verdict),
        "check the preparation Job's logs (kubectl logs job/<release>-prepare-...)",
    )
    verdict, problem = config_check.read_verdict(spec.config_verdict)
    if verdict is None or verdict.submission_id != spec.submission_id:
        log(f"{problem or 'the check verdict is for another run'}; going on without it")
        return ""
    if verdict.state == "refused":
        return verdict.message
    log(verdict.message)
    return ""


def release_unless_busy(spec: Spec, ledger: Ledger) -> None:
    """Release the GPU workers for a run that never starts, unless another run of this release
    still uses them (a changed run after `helm upgrade` while the previous one goes on)."""
    if spec.workers() is not None and head_healthy(spec.address) and (others := Runs(spec).others_active()):
        log(f"the GPU workers stay: {others[0].submission_id} of this release is still active")
        return
    release_workers(spec, ledger)


def wait_for_head(spec: Spec) -> None:
    _wait(
        f"the Ray head at {spec.address}",
        spec.timeout("head_s"),
        spec.poll_interval_s,
        lambda: head_healthy(spec.address),
        "is the head pod Running? kubectl get pods -l ray.io/node-type=head",
    )
    log("Ray head is healthy")
    if why := version_mismatch(spec):
        raise LaunchFailed(why)


def wait_for_gpus(spec: Spec, ledger: Ledger | None = None) -> None:
    def enough() -> tuple[int, float] | None:
        nodes, gpus = cluster_gpus(spec.address, ledger)
        return (nodes, gpus) if gpus >= spec.expected_gpus else None

    try:
        nodes, gpus = _wait(
            f"{spec.expected_gpus} GPUs in the Ray cluster",
            spec.timeout("gpus_s"),
            spec.poll_interval_s,
            enough,
            "GPU nodes may be unavailable (quota, Spot capacity, reservation) or the workers not Ready; a worker pod the "
            "API server refused (e.g. by the namespace's Pod Security level) shows as a FailedToCreateWorkerPod event: "
            "kubectl get events --field-selector reason=FailedToCreateWorkerPod",
        )
    except LaunchFailed as e:
        nodes, gpus = cluster_gpus(spec.address)
        raise GpusTimedOut(f"{e} (the cluster reports {gpus:g} GPUs on {nodes} nodes)") from None
    log(f"cluster ready: {gpus:g} GPUs on {nodes} nodes")


def settle_previous_runs(runs: Runs) -> None:
    others = runs.others_active()
    if not others:
        return
    ids = ", ".join(j.submission_id for j in others)
    if runs.spec.previous_runs == "stop":
        for j in others:
            log(f"stopping the previous run {j.submission_id} (previous_runs: stop)")
            runs.call(lambda j=j: runs.client.stop_job(j.submission_id))
    else:
        log(f"another run of this release is active ({ids}); waiting for it to end before submitting (previous_runs: wait)")
    _wait(
        f"previous run(s) {ids} to end",
        runs.spec.timeout("previous_s"),
        runs.spec.poll_interval_s,
        lambda: not runs.others_active(),
        "stop it with `ray job stop` or set launcher.previousRuns: stop",
    )


# --- the retry policy: what to do after each look at the run, without I/O --------------------

FOLLOW, WAIT_START, SUBMIT, STOP = "follow", "wait-start", "submit", "stop"


@dataclass(frozen=True)
class Seen:
    """What the launcher knows of the run when it decides."""

    attempt: int  # the newest attempt's number; 0: none yet
    status: str  # its Ray status; "" when there is none
    started: bool = False  # the status is the answer of a wait for the start (launcher.follow false)
    stalled: int = 0  # failed attempts in a row, before this one, that wrote no new checkpoint
    step_at_submit: int | None = None  # newest step (-1: none) when this launcher submitted it; None: it did not
    newest_step: int | None = None  # the newest step now (measured only when wants_progress)
    lost_gpu_node: bool = False  # a GPU node of the cluster went away while this attempt ran
    recorded: str = ""  # the outcome recorded on the shared volume: succeeded, stopped or failed
    recorded_reason: str = ""  # why (launcher_outcome.Outcome.reason)


@dataclass(frozen=True)
class Decision:
    action: str  # FOLLOW, WAIT_START, SUBMIT or STOP
    why: str = ""  # the line to log ("" for none)
    exit_code: int = 0  # STOP: the launcher's exit status
    stalled: int = 0  # the count of stalled failures to carry on
    after_failure: bool = False  # SUBMIT: a resubmission, which first waits for the GPUs
    final: str = ""  # STOP at the run's end: the outcome to record (succeeded, stopped, failed); "": none
    reason: str = ""  # with final: completed, stopped-by-user, out-of-restarts or stalled


# How to run a run again that has ended (its outcome is recorded, so the same run spec is never
# submitted twice): a changed run spec is a new run, which resumes from the newest checkpoint.
RUN_AGAIN = (
    "to go on, change the run (e.g. raise grpo.max_num_steps) and `helm upgrade`: the new run resumes from the "
    "newest checkpoint in the same folder"
)


def wants_progress(spec: Spec, seen: Seen) -> bool:
    """Whether `decide` needs the newest checkpoint step: after a failure of an attempt this
    launcher submitted, or after a success it followed (to tell a deadline stop from the end),
    when it follows the run and knows its checkpoint folder."""
    if not (spec.follow and spec.checkpoint_dir) or seen.started:
        return False
    if seen.status == "SUCCEEDED":
        return spec.max_num_steps > 0
    return seen.status == "FAILED" and seen.step_at_submit is not None


def decide(spec: Spec, seen: Seen) -> Decision:
    """Follow the run, wait for it to start, submit the next attempt, or stop (and why)."""
    job_id = attempt_id(spec.submission_id, seen.attempt)
    if seen.recorded:
        return _after_record(spec, seen, job_id)
    if seen.started and seen.status in ("RUNNING", "SUCCEEDED"):
        return Decision(STOP, f"{job_id} is {seen.status}; exiting (launcher.follow is false)")
    if seen.status in ACTIVE:
        return Decision(FOLLOW if spec.follow else WAIT_START, stalled=seen.stalled)
    if seen.status == "SUCCEEDED":
        return _after_success(spec, seen, job_id)
    if seen.status == "STOPPED":
        return Decision(
            STOP,
            f"{job_id} was stopped (`ray job stop`, or a newer release's launcher with previousRuns: stop); not resubmitting; {RUN_AGAIN}",
            EXIT_FINAL,
            final="" if seen.started else "stopped",
            reason="" if seen.started else "stopped-by-user",
        )
    if seen.status == "FAILED":
        return _after_failure(spec, seen, job_id)
    return Decision(SUBMIT, stalled=seen.stalled)


def _after_success(spec: Spec, seen: Seen, job_id: str) -> Decision:
    # NeMo RL with checkpointing.checkpoint_must_save_by saves and returns normally once the
    # deadline is near (nemo_rl/algorithms/grpo.py at v0.5.0, v0.6.0 and v0.7.0: "Timeout has been
    # reached, stopping training early"), so the job is SUCCEEDED short of grpo.max_num_steps.
    newest = seen.newest_step
    if not wants_progress(spec, seen) or newest is None or newest >= spec.max_num_steps:
        return Decision(STOP, f"run {spec.submission_id} succeeded", final="succeeded", reason="completed")
    n = seen.attempt
    short = f"{job_id} SUCCEEDED at step {newest} of {spec.max_num_steps} (grpo.max_num_steps): it stopped at its save deadline"
    if n >= 1 + spec.max_restarts:
        why = f"{short}; no restarts are left ({spec.max_restarts} allowed)"
        return Decision(STOP, why, EXIT_FINAL, final="failed", reason="out-of-restarts")
    return Decision(SUBMIT, f"{short}; resubmitting (restart {n} of {spec.max_restarts})", after_failure=True)


def _after_failure(spec: Spec, seen: Seen, job_id: str) -> Decision:
    # Failed attempts in a row that wrote no new step_N: a preemption costs at most the steps since
    # the last checkpoint, a failure that repeats costs a whole start-up on every GPU each time.
    if not spec.follow:
        return Decision(STOP, f"{job_id} FAILED; see `ray job logs {job_id}`", EXIT_FINAL)
    stalled, n, newest, at_submit = seen.stalled, seen.attempt, seen.newest_step, seen.step_at_submit
    out_of_restarts = n >= 1 + spec.max_restarts
    lost_node = ""
    if wants_progress(spec, seen) and at_submit is not None:
        if _step_rank(newest) > at_submit:
            stalled = 0
        elif seen.lost_gpu_node:
            # A preemption (a reclaimed Spot node) between two checkpoints is no repeating failure:
            # the count is kept as it was, neither raised nor reset.
            lost_node = "; the cluster lost a GPU node during it (a preemption): not counted toward the stall limit"
        else:
            stalled += 1
        if stalled >= STALLED_LIMIT and not out_of_restarts:
            return Decision(
                STOP,
                f"{job_id} FAILED, as did the attempt before it, without a new checkpoint in {spec.checkpoint_dir} "
                f"(newest: {'step_' + str(newest) if newest is not None else 'none'}): a failure that repeats, not a "
                f"preemption; not resubmitting. See `ray job logs {job_id}`",
                EXIT_FINAL,
                stalled,
                final="failed",
                reason="stalled",
            )
    if out_of_restarts:
        why = f"{job_id} FAILED{lost_node} and no restarts are left ({spec.max_restarts} allowed)"
        return Decision(STOP, why, EXIT_FINAL, stalled, final="failed", reason="out-of-restarts")
    return Decision(
        SUBMIT, f"{job_id} FAILED{lost_node}; resubmitting (restart {n} of {spec.max_restarts})", stalled=stalled, after_failure=True
    )


def _after_record(spec: Spec, seen: Seen, job_id: str) -> Decision:
    # The run ended under an earlier launcher (its outcome outlives the Ray head). Only a run that
    # ran out of restarts goes on, and only when launcher.maxRestarts now allows another attempt.
    n, where = seen.attempt, spec.outcome_where()
    ended = f"run {spec.submission_id} already ended: {seen.recorded} ({seen.recorded_reason}) at {job_id}, recorded in {where}"
    if seen.recorded == "succeeded":
        return Decision(STOP, f"{ended}; not submitting it again", final="succeeded", reason=seen.recorded_reason)
    if seen.recorded_reason == "out-of-restarts" and n < 1 + spec.max_restarts:
        why = f"{ended}; launcher.maxRestarts is now {spec.max_restarts}: resubmitting (restart {n} of {spec.max_restarts})"
        return Decision(SUBMIT, why, after_failure=True)
    return Decision(STOP, f"{ended}; not submitting it again; {RUN_AGAIN}", EXIT_FINAL, final=seen.recorded, reason=seen.recorded_reason)


# --- the run's I/O loop -------------------------------------------------------------------------


def launch(spec: Spec) -> int:
    log(f"run {spec.submission_id}: {spec.entrypoint}")
    ledger = Ledger(sum(spec.gpu_release.get("groups", {}).values()) or max(0, spec.expected_nodes - 1))
    progress = Progress(spec.max_num_steps)
    if refusal := config_refusal(spec):
        log(f"FAILED, nothing submitted: {refusal}")
        release_unless_busy(spec, ledger)
        return EXIT_FINAL
    wait_for_files(spec)
    record = read_outcome(spec)
    if record is not None and (first := decide(spec, record)).action == STOP:
        log(first.why)  # ended for good under an earlier launcher: no head, no GPUs needed
        return finish(spec, first, record, ledger, progress)
    try:
        resume_workers(spec)
        wait_for_head(spec)
        runs = Runs(spec)
        settle_previous_runs(runs)
        seen = current(runs, record)
        while True:
            if wants_progress(spec, seen):
                seen = replace(seen, newest_step=checkpoint_step(spec.checkpoint_dir, latest_step(spec.checkpoint_dir)))
            decision = decide(spec, seen)
            if decision.why:
                log(decision.why)
            if decision.action == STOP:
                return finish(spec, decision, seen, ledger, progress)
            seen = act(runs, seen, decision, ledger, progress)
    except GpusTimedOut as e:
        log(f"FAILED: {e}")
        release_workers(spec, ledger)  # the GPU workers that did come would idle until someone looked
        return EXIT_FINAL


def current(runs: Runs, record: Seen | None) -> Seen:
    """What the launcher sees at its start: the newest attempt the Ray head knows, or the outcome
    recorded on the volume when it is as new (a restarted head forgets its jobs)."""
    existing = runs.attempts()
    head = Seen(existing[-1][0], str(existing[-1][1].status)) if existing else Seen(0, "")
    if record is not None and record.attempt >= head.attempt:
        return record
    if head.status:
        log(f"found {attempt_id(runs.spec.submission_id, head.attempt)} ({head.status}); the same run spec is never submitted twice")
    return head


def act(runs: Runs, seen: Seen, decision: Decision, ledger: Ledger, progress: Progress) -> Seen:
    """Carry out a FOLLOW, WAIT_START or SUBMIT decision; what the launcher sees afterwards."""
    spec = runs.spec
    job_id = attempt_id(spec.submission_id, seen.attempt)
    if decision.action == FOLLOW:
        watch = GpuWatch(spec, ledger)
        status = follow_logs(runs, job_id, watch.look, lambda line: saw_line(line, ledger, progress))
        if step := progress.flush():
            log(step)
        ledger.run_ended()
        log(f"{job_id} ended: {status}" + (f" (the cluster lost a GPU node meanwhile: {watch.lost})" if watch.lost else ""))
        return replace(seen, status=status, started=False, stalled=decision.stalled, lost_gpu_node=bool(watch.lost))
    if decision.action == WAIT_START:
        return replace(seen, status=wait_until_started(runs, job_id), started=True, stalled=decision.stalled)
    wait_for_gpus(spec, ledger)
    n = seen.attempt + 1
    step = latest_step(spec.checkpoint_dir) if spec.checkpoint_dir else None
    where = f"resumes from step_{step} in {spec.checkpoint_dir}" if step is not None else "starts from step 0"
    job_id = runs.submit(n)
    log(f"attempt {n} submitted as {job_id}; {where}")
    status = runs.status(job_id)
    at_submit = _step_rank(checkpoint_step(spec.checkpoint_dir, step))
    return Seen(n, status if status in TERMINAL else "PENDING", stalled=decision.stalled, step_at_submit=at_submit)


# --- the run's end: its outcome on the volume, the GPU workers released, the ledger ----------


def read_outcome(spec: Spec) -> Seen | None:
    """The outcome an earlier launcher recorded, as what the launcher sees (None: none recorded)."""
    if not spec.outcome_dir:
        return None
    outcome, problem = launcher_outcome.read(spec.outcome_dir, spec.submission_id)
    if problem:
        log(f"{problem}; going by the Ray head's record alone")
    if outcome is None:
        return None
    return Seen(outcome.attempt, outcome.ray_status, recorded=outcome.state, recorded_reason=outcome.reason)


def saw_line(line: str, ledger: Ledger, progress: Progress) -> None:
    """One line of the run's log: the ledger's first step; a progress line when a step is done."""
    ledger.saw_line(line)
    if step := progress.saw_line(line):
        log(step)


def finish(spec: Spec, decision: Decision, seen: Seen, ledger: Ledger, progress: Progress) -> int:
    """Record a final outcome and release the GPU workers; log the progress summary and the
    ledger; the exit status."""
    if decision.final:
        if not seen.recorded:
            record_outcome(spec, decision, seen)
        release_workers(spec, ledger)
    if summary := progress.summary(ledger.gpu_node_hours()):
        log(summary)
    if ledger.ended_at is not None:
        log(ledger.summary())
    return decision.exit_code


def record_outcome(spec: Spec, decision: Decision, seen: Seen) -> None:
    if not spec.outcome_dir:
        return
    step = checkpoint_step(spec.checkpoint_dir, latest_step(spec.checkpoint_dir)) if spec.checkpoint_dir else None
    job_id = attempt_id(spec.submission_id, seen.attempt)
    outcome = launcher_outcome.Outcome(
        spec.submission_id, decision.final, decision.reason, seen.attempt, job_id, seen.status, step, spec.max_restarts, decision.why
    )
    try:
        launcher_outcome.write(spec.outcome_dir, outcome)
    except OSError as e:
        where = spec.outcome_where()
        log(f"could not record the outcome in {where} ({e.strerror or e}): after a Ray head restart a new launcher may submit it again")
        return
    log(f"outcome recorded in {spec.outcome_where()}: {decision.final} ({decision.reason}); no launcher submits this run spec again")


def release_workers(spec: Spec, ledger: Ledger) -> None:
    workers = spec.workers()
    if workers is None:
        log("the GPU workers stay up (launcher.releaseGpus is false): their nodes are billed until `helm uninstall`")
        return
    waited = spec.timeout("release_s", RELEASE_WAIT_S)
    try:
        api = KubeApi(workers.service_account_dir)
        done, patched = launcher_workers.release(workers, api)
        log(done)
        if not patched:
            return
        took = launcher_workers.wait_released(workers, api, waited, spec.poll_interval_s)
    except KubeError as e:
        log(f"could not release the GPU workers ({e}); they stay billed until `helm uninstall`")
        return
    if took is None:
        log(f"KubeRay did not report the GPU workers gone within {waited:.0f}s; see `kubectl describe raycluster {workers.raycluster}`")
        return
    ledger.gpus_released()
    log(f"GPU workers gone {took:.0f}s after the patch; the cluster autoscaler removes their nodes once unneeded")


def resume_workers(spec: Spec) -> None:
    """Bring back GPU workers an earlier run released: this run may need them."""
    workers = spec.workers()
    if workers is None:
        return
    try:
        if note := launcher_workers.resume(workers, KubeApi(workers.service_account_dir)):
            log(note)
    except KubeError as e:
        log(f"could not check the RayCluster's GPU workers ({e}); if an earlier run released them, this one waits for GPUs in vain")


def _step_rank(step: int | None) -> int:
    return -1 if step is None else step


# --- helm test ------------------------------------------------------------------------------

_PROBE = """
import json, os, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init()
@ray.remote(num_cpus=0)
def nics():
    return sorted(os.listdir('/sys/class/net'))
out = {}
for n in ray.nodes():
    if n['Alive'] and n['Resources'].get('GPU', 0) > 0:
        ref = nics.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n['NodeID'], soft=False)).remote()
        out[n['NodeManagerAddress'] + '/' + n['NodeID'][:8]] = ray.get(ref, timeout=120)
print('TAG' + json.dumps(out))
""".replace("TAG", INTERFACES_TAG)


def check(spec: Spec) -> int:
    """Compare what the Ray head reports with what the values asked for."""
    _wait(
        f"the Ray head at {spec.address}",
        spec.timeout("head_s", 600),
        spec.poll_interval_s,
        lambda: head_healthy(spec.address),
        "is the head pod Running? kubectl get pods -l ray.io/node-type=head",
    )
    nodes = _retry(lambda: alive_nodes(spec.address), spec)
    gpus = sum(float(n["resources"].get("GPU", 0)) for n in nodes)
    problems = [why] if (why := version_mismatch(spec)) else []
    if spec.expected_nodes and len(nodes) != spec.expected_nodes:
        problems.append(f"{len(nodes)} Ray nodes alive, expected {spec.expected_nodes} (head + GPU workers)")
    if gpus != spec.expected_gpus:
        problems.append(f"{gpus:g} GPUs in the cluster, expected {spec.expected_gpus}")
    print(f"nodes: {len(nodes)}, GPUs: {gpus:g}", flush=True)
    if spec.expected_interfaces:
        runs = Runs(spec)
        job_id = f"{spec.submission_id[:60]}-check-{int(time.time())}"
        runs.call(lambda: runs.client.submit_job(entrypoint=f"python -c {shlex.quote(_PROBE)}", submission_id=job_id))
        status = _wait("the interface probe", 600, spec.poll_interval_s, lambda: s if (s := runs.status(job_id)) in TERMINAL else None, "")
        logs = runs.call(lambda: runs.client.get_job_logs(job_id))
        line = next((ln for ln in logs.splitlines() if ln.startswith(INTERFACES_TAG)), None)
        if status != "SUCCEEDED" or line is None:
            problems.append(f"interface probe {job_id} ended {status}: {logs.strip()[-500:]}")
        else:
            per_node = json.loads(line[len(INTERFACES_TAG) :])
            if not per_node:
                problems.append("no GPU worker answered the interface probe")
            for node, names in sorted(per_node.items()):
                missing = [i for i in spec.expected_interfaces if i not in names]
                print(f"{node}: {' '.join(names)}", flush=True)
                if missing:
                    problems.append(f"GPU worker {node} lacks {', '.join(missing)} (RDMA NICs not attached?)")
    for p in problems:
        print(f"FAIL: {p}", flush=True)
    if not problems:
        print("ok: the Ray cluster matches the values", flush=True)
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Launch or check the NeMo RL run of a nemo-rl-gke release.")
    parser.add_argument("spec", help="the JSON spec rendered by the chart")
    parser.add_argument("--check", action="store_true", help="check the cluster against the spec (helm test)")
    args = parser.parse_args(argv)
    try:
        spec = load_spec(args.spec)
        return check(spec) if args.check else launch(spec)
    except SpecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except LaunchFailed as e:
        log(f"FAILED: {e}")
        return EXIT_FINAL
    except KeyboardInterrupt:
        log("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
