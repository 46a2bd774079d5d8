"""`python -m generator rehearse` on local Ray clusters that cannot place the run (a head without
CPUs, too few worker CPUs), and the Ray processes it starts: ended on Ctrl-C, on ports that
nothing else takes, beside another rehearsal."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from rehearse_harness import ROOT, cli, head_without_cpus, run_in, start_cluster, write

from generator.rehearse import cluster as cluster_module
from generator.rehearse.cluster import TAG_ENV, LocalCluster, free_port, tagged_pids
from generator.rehearse.interrupts import handled_by
from generator.rehearse.run import Request, rehearse
from generator.values.build import Options, build


@pytest.fixture(scope="class")
def cpuless_head(tmp_values: Path) -> Iterator[LocalCluster]:
    yield from start_cluster(write(tmp_values, "cpuless-head", head_without_cpus("v0.7.0")))


@pytest.mark.ray
class TestHeadWithoutCpus:
    def test_v050_blocks_the_venv_reservation(self, cpuless_head: LocalCluster, tmp_values: Path) -> None:
        rc, out = run_in(cpuless_head, write(tmp_values, "head0-v050", head_without_cpus("v0.5.0")))
        assert rc == 1, out
        assert "grpo_policy_cluster-node0: 8 x {CPU: 2, GPU: 1} PACK -> placed on gpu-0" in out
        assert (
            "rehearse: FAIL: create_local_venv_on_each_node(VllmGenerationWorker): STRICT_SPREAD placement group of 2 x {CPU: 1} "
            "never becomes ready; ray.get(pg.ready()) has no timeout, so NeMo RL v0.5.0 waits here forever" in out
        )
        assert "no free CPU on head (0 Ray CPUs)" in out
        assert "rehearse: change head.rayStartParams.num-cpus: set it to at least 1" in out

    def test_v070_leaves_the_head_out(self, cpuless_head: LocalCluster, tmp_values: Path) -> None:
        rc, out = run_in(cpuless_head, write(tmp_values, "head0-v070", head_without_cpus("v0.7.0")))
        assert rc == 0, out
        assert "STRICT_SPREAD 1 x {CPU: 1} on every alive Ray node with CPUs -> placed" in out


# --- the CLI end to end: own cluster, cleanup ---------------------------------------------------------


@pytest.mark.ray
def test_worker_cpus_too_few_for_colocated_generation(tmp_values: Path) -> None:
    values = build(Options(gpu="h200", nodes=1))
    values["worker"]["resources"]["requests"]["cpu"] = values["worker"]["resources"]["limits"]["cpu"] = "8"
    tag = f"rh-test-{uuid.uuid4().hex[:8]}"
    proc = cli(str(write(tmp_values, "worker-cpu8", values)), tag=tag)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert out.count("Not enough CPUs available. Requested 16 CPUs, but only 14 are available in the cluster.") == 6 + 2
    assert "Retrying placement group creation... 6/6. Next retry in 32 seconds." in out
    assert "rehearse: FAIL: ResourceInsufficientError: Maximum number of retries reached (6)." in out
    assert (
        "rehearse: change worker.resources.limits.cpu: give each GPU node at least 17 Ray CPUs "
        "(2 per GPU for the bundles + 1 for the venv reservation)" in out
    )
    assert proc.stderr == ""
    assert tagged_pids(tag) == []


def _names(pids: list[int]) -> set[str]:
    names = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            names.add(Path(f"/proc/{pid}/comm").read_text().strip())
    return names


@contextlib.contextmanager
def _sigint_not_ignored() -> Iterator[None]:
    """A child started inside gets SIGINT at its default, as a terminal's foreground job has it, also
    when pytest runs as a shell's background job (SIGINT ignored, which a child would inherit)."""
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    with handled_by(signal.default_int_handler, [signal.SIGINT] if ignored else []):
        yield


@pytest.mark.ray
@pytest.mark.parametrize(
    ("sig", "whole_group"),
    [(signal.SIGINT, True), (signal.SIGTERM, False)],
    ids=["ctrl-c-to-the-job", "sigterm-to-the-command"],
)
def test_an_interrupt_while_the_cluster_starts_ends_every_ray_process(tmp_values: Path, sig: int, whole_group: bool) -> None:
    """Ctrl-C reaches every process of the shell job; `kill` (SIGTERM) only the command, whose
    handler each Ray node's start used to replace with Ray's own, which exits 1 (ray/_private/node.py)."""
    tag = f"rh-test-{uuid.uuid4().hex[:8]}"
    path = write(tmp_values, f"interrupted-{sig}", build(Options(gpu="h200", nodes=1)))
    env = {**os.environ, TAG_ENV: tag}
    cmd = [sys.executable, "-m", "generator", "rehearse", str(path)]
    # Its own process group, like a shell job.
    with _sigint_not_ignored():
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    watchdog = threading.Timer(600, proc.kill)
    watchdog.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("rehearse: local Ray cluster"):
                break
        # The head node starting; a loaded machine (CI beside other jobs) starts Ray slowly.
        while "raylet" not in _names(tagged_pids(tag)) and proc.poll() is None:
            time.sleep(0.1)
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"rehearse ended (exit {proc.returncode}) before its head node's raylet started:\n{out}{err}")
        (os.killpg if whole_group else os.kill)(proc.pid, sig)
        _, err = proc.communicate(timeout=300)  # the Ray call in progress ends first (REGISTER_S per node at most)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in err.splitlines()
    assert tagged_pids(tag) == []


@pytest.mark.ray
def test_a_local_cluster_that_does_not_start_fails_in_one_line_and_leaves_no_process(
    tmp_values: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ray's own node-registration timeout, cut to 0 s, stands for a machine too busy to start Ray."""
    tag = f"rh-test-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv(TAG_ENV, tag)
    monkeypatch.setattr(cluster_module, "REGISTER_S", 0.0)
    lines: list[str] = []
    rc = rehearse(Request(write(tmp_values, "no-start", build(Options(gpu="h200", nodes=1)))), write=lines.append)
    assert rc == 1
    assert lines[-1].startswith(
        "rehearse: FAIL: the local Ray cluster did not start (TimeoutError: Timed out after 0.0 seconds while waiting for node to startup."
    )
    assert lines[-1].endswith("your values are not at fault: run again when the machine is less busy")
    assert tagged_pids(tag) == []


def test_ports_for_ray_are_free_distinct_and_below_the_ephemeral_range() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    assert all(20000 <= p < low for p in ports)
    for port in ports[:5]:
        with socket.socket() as s:
            s.bind(("", port))  # nothing took it


@pytest.mark.ray
def test_two_rehearsals_started_at_the_same_moment_both_pass(tmp_values: Path) -> None:
    # Each cluster's agents bind ports the kernel picks: with Ray's fixed defaults, or ports picked
    # before the agents bind, one cluster's agent could not bind and its jobs found no agent.
    path = write(tmp_values, "side-by-side", build(Options(gpu="h200", nodes=1)))
    tags = [f"rh-test-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    cmd = [sys.executable, "-m", "generator", "rehearse", str(path)]
    procs = [
        subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, TAG_ENV: tag}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for tag in tags
    ]
    try:
        results = [p.communicate(timeout=240) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (out, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, out[-2000:] + err[-2000:]
        assert "rehearse: PASS: every resource request was placed" in out
    assert [tagged_pids(tag) for tag in tags] == [[], []]
