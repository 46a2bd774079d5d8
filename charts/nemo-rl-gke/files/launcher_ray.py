"""The launcher's side of the Ray cluster: the head's health and version, the alive nodes and their
GPUs (and a watch for a GPU node lost while an attempt runs), and the Jobs API with retries while
the head is briefly unreachable, including following a run's logs to its end."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from launcher_ledger import Ledger
from launcher_log import LaunchFailed, log
from launcher_policy import ACTIVE, TERMINAL, backoff_s
from launcher_spec import Spec, attempt_id, attempt_number


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


class Runs:
    """The Ray Jobs API, with retries while the head is briefly unreachable."""

    def __init__(self, spec: Spec) -> None:
        from ray.job_submission import JobSubmissionClient

        self.spec = spec
        self.client = retry(lambda: JobSubmissionClient(spec.address), spec)

    def call(self, fn: Any) -> Any:
        return retry(fn, self.spec)

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


def retry(fn: Any, spec: Spec) -> Any:
    """fn(), tried again while the head is not ready, with an exponential back-off (backoff_s:
    poll_interval_s doubled per try, at most 30 s) until the head's timeout."""
    deadline = time.monotonic() + spec.timeout("head_s")
    tries = 0
    while True:
        try:
            return fn()
        except (ConnectionError, OSError) as e:
            if time.monotonic() >= deadline:
                raise LaunchFailed(f"Ray head at {spec.address} unreachable: {e}") from None
        except Exception as e:
            # requests' ConnectionError derives from OSError; other errors that say the head is
            # not ready are retried too; anything else propagates.
            if not any(t in str(e).lower() for t in TRANSIENT) or time.monotonic() >= deadline:
                raise
            log(f"Ray head not ready ({str(e).splitlines()[0][:120]}); retrying")
        tries += 1
        time.sleep(backoff_s(tries, spec.poll_interval_s, deadline - time.monotonic()))


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
