"""A local multi-node Ray cluster shaped like the rendered RayCluster (ray.cluster_utils.Cluster).

Why Cluster and not separate `ray start` processes: Cluster.add_node takes the same num_cpus,
num_gpus, memory, resources and labels as `ray start`, gives every node its own raylet on one
machine, and remove_node ends exactly one node's processes (graceful, like the kubelet stopping a
reclaimed Spot pod), which the preemption drill needs; `ray stop` would end every Ray process on
the machine.

Every process the cluster starts (GCS, dashboard, raylets, agents, workers, job drivers) inherits
the environment variable NEMO_RL_GKE_REHEARSAL=<tag>; shutdown() ends the nodes, then ends any
process still carrying the tag (Linux /proc), and nothing else.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from generator.rehearse.interrupts import held_back
from generator.rehearse.topology import NodeSpec

TAG_ENV = "NEMO_RL_GKE_REHEARSAL"
NODE_LABEL = "nemo-rl-gke/pod"
OBJECT_STORE_BYTES = 80 * 2**20  # Ray's minimum is 75 MiB
BIN = Path(sys.executable).parent
# How long a node may take to reach the GCS and to register with it. Ray's own waits are 20 tries
# and 30 s (node.py _init_gcs_client; cluster_utils.py Cluster._wait_for_node, wait_for_nodes); a
# two-core machine running other Ray clusters beside this one has taken longer. An interrupt during
# a start waits for it (interrupts.held_back).
REGISTER_S = 90.0


_HANDED_OUT: set[int] = set()


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="utf-8") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A port nothing listens on, for a Ray server whose address must be known before it starts
    (GCS, dashboard, client server); everything else in Ray binds port 0.

    Taken below the kernel's ephemeral range: outgoing connections and port-0 binds (Ray's own,
    many) take their ports from that range, so a port picked there can be gone before Ray binds
    it. Above Ray's default worker ports (10002-19999)."""
    low, high = 20000, max(20001, _ephemeral_low() - 1)
    for _ in range(1000):
        port = random.randint(low, high)  # noqa: S311 - spreading picks, not a secret
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise OSError(f"no free TCP port between {low} and {high}")


def new_tag() -> str:
    """The caller's tag (NEMO_RL_GKE_REHEARSAL set in its environment, e.g. by a test), else a new one."""
    return os.environ.get(TAG_ENV) or f"rh-{uuid.uuid4().hex[:12]}"


def _ancestors(parents: dict[int, int]) -> set[int]:
    pids, pid = {os.getpid()}, os.getpid()
    while pid in parents and pid > 1:
        pid = parents[pid]
        pids.add(pid)
    return pids


def _parent_map() -> dict[int, int]:
    """Every running process's parent, from /proc."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                    out[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    return out


def _in_folder(pid: int, folder: str) -> bool:
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd").removesuffix(" (deleted)")
    except OSError:
        return False
    return cwd == folder or cwd.startswith(folder + "/")


def tagged_pids(tag: str, folder: Path | None = None) -> list[int]:
    """Running processes (not this one or its ancestors) whose environment carries the tag, their
    descendants, and (given a folder) those working in it. Ray's agents rename themselves
    (setproctitle), which blanks the environment that /proc shows; they are found through their
    tagged parent or, once orphaned (their raylet ended first), through the folder the cluster's
    processes run in."""
    where = str(folder.resolve()) if folder is not None else None
    marker = f"{TAG_ENV}={tag}".encode() + b"\0"
    try:
        parents = _parent_map()
    except OSError:
        return []
    skip = _ancestors(parents)
    found: set[int] = set()
    for pid in parents:
        if pid in skip:
            continue
        if where is not None and _in_folder(pid, where):
            found.add(pid)
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if b"\0" + marker in b"\0" + env:
            found.add(pid)
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    todo = list(found)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found and child not in skip:
                found.add(child)
                todo.append(child)
    return sorted(p for p in found if _alive(p))


def end_tagged(tag: str, folder: Path | None = None, term_grace_s: float = 1.0, kill_wait_s: float = 15.0) -> list[int]:
    """SIGTERM, then SIGKILL, every process carrying the tag; returns those still alive after.

    Each scan collects a process's descendants before any is signalled (a child whose parent ends
    first is re-parented and only its working folder still ties it to the cluster), signals what
    it has not yet signalled, and ends after two scans in a row find nothing. SIGTERM gets a short
    grace; after SIGKILL the scans go on for up to kill_wait_s, since on a loaded machine a killed
    process can take seconds to exit and a raylet may still have forked a child that shows up late
    (returning at once when the scans come back empty, so the wait costs nothing otherwise)."""
    signalled: dict[int, int] = {}
    pids: set[int] = set()
    for sig, wait_s in ((signal.SIGTERM, term_grace_s), (signal.SIGKILL, kill_wait_s)):
        deadline = time.monotonic() + wait_s
        empty_scans = 0
        while True:
            pids = {p for p in signalled if _alive(p)} | set(tagged_pids(tag, folder))
            for pid in sorted(pids):
                if signalled.get(pid) != sig:  # also those started meanwhile (a raylet may still spawn)
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, sig)
                    signalled[pid] = sig
            # twice in a row: a process forked just before its parent ended shows up a moment later
            empty_scans = empty_scans + 1 if not pids else 0
            if empty_scans == 2:
                return []
            if time.monotonic() >= deadline:
                break
            time.sleep(0.1)
    return sorted(pids)


def _alive(pid: int) -> bool:
    """Running (zombies waiting for their parent count as ended)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


# Ray settings of every local Ray process this package (and the tests' Ray heads) start.
RAY_SETTINGS = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
    "RAY_enable_worker_prestart": "0",
    "RAY_prestart_worker_first_driver": "0",
    # The dashboard gives up when its subprocess modules are not ready within 30 s
    # (ray/dashboard/consts.py SUBPROCESS_MODULE_WAIT_READY_TIMEOUT), which a busy two-core
    # machine reaches; the Jobs API the rehearsal and the launcher use lives in the dashboard.
    "RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT": "300",
}


def _keep_sigterm_handler(_handler: Any) -> None:
    """Stands for ray._private.utils.set_sigterm_handler while nodes start (LocalCluster._spawning)."""


@dataclass
class LocalNode:
    spec: NodeSpec
    handle: Any


class LocalCluster:
    """One local Ray node per NodeSpec; CPUs, GPUs and memory declared, not real."""

    def __init__(self, workdir: Path, tag: str | None = None) -> None:
        self.workdir = workdir
        self.tag = tag or new_tag()
        self.temp_dir = workdir / "ray"
        self.dashboard_port = free_port()
        self._cluster: Any = None
        self.nodes: list[LocalNode] = []

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def env(self) -> dict[str, str]:
        """Environment of every process started for the rehearsal (RAY_SETTINGS and the tag)."""
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_JOB_CONFIG_JSON_ENV_VAR")}
        env.update(
            {
                TAG_ENV: self.tag,
                "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",  # jobs run `python` from PATH
                "RAY_TMPDIR": str(self.workdir),  # keeps Ray's address file out of /tmp/ray
                **RAY_SETTINGS,
            }
        )
        return env

    @contextlib.contextmanager
    def _spawning(self) -> Iterator[None]:
        """Ray's node processes inherit this process's environment and working directory.

        A node's start tries to reach the GCS once a second for REGISTER_S tries instead of Ray's
        20 (ray/_private/node.py _init_gcs_client; RAY_NUM_REDIS_GET_RETRIES is read when Ray is
        imported, before this runs): a busy machine starts the GCS slowly.

        It does not install Ray's SIGTERM handler (ray/_private/node.py _register_shutdown_hooks:
        end that one node's processes, then sys.exit(1)) over the rehearse command's, which ends
        every node and exits 130; the node's atexit hook and its reaper (every process ended if
        this one is killed) stay."""
        import ray._private.utils as ray_utils
        from ray._private import ray_constants

        saved_env, saved_cwd, env = dict(os.environ), os.getcwd(), self.env()
        saved_sigterm, saved_retries = ray_utils.set_sigterm_handler, ray_constants.NUM_REDIS_GET_RETRIES
        ray_utils.set_sigterm_handler = _keep_sigterm_handler
        ray_constants.NUM_REDIS_GET_RETRIES = max(saved_retries, int(REGISTER_S))
        os.environ.clear()
        os.environ.update(env)
        os.chdir(self.workdir)  # a folder holding no `ray` package
        try:
            yield
        finally:
            ray_utils.set_sigterm_handler = saved_sigterm
            ray_constants.NUM_REDIS_GET_RETRIES = saved_retries
            os.chdir(saved_cwd)
            os.environ.clear()
            os.environ.update(saved_env)

    def _node_args(self, spec: NodeSpec) -> dict[str, Any]:
        args: dict[str, Any] = {
            "num_gpus": spec.gpus,
            "object_store_memory": OBJECT_STORE_BYTES,
            "labels": {NODE_LABEL: spec.name},
            # Port 0: the kernel picks, atomically. Ray's fixed defaults (agent 52365, workers from
            # 10002) clash with the other nodes here or another Ray cluster on the machine, and a
            # port picked beforehand can be taken before the agent binds it.
            "dashboard_agent_listen_port": 0,
            "metrics_agent_port": 0,
            "runtime_env_agent_port": 0,
            "metrics_export_port": 0,
            "min_worker_port": 0,
            "max_worker_port": 0,
        }
        if spec.cpus is not None:
            args["num_cpus"] = spec.cpus
        else:
            args["num_cpus"] = os.cpu_count() or 1  # no CPU given: Ray counts the machine's
        if spec.memory_bytes is not None:
            args["memory"] = spec.memory_bytes
        if spec.resources:
            args["resources"] = dict(spec.resources)
        return args

    def start(self, specs: list[NodeSpec]) -> LocalCluster:
        from ray.cluster_utils import Cluster

        self.workdir.mkdir(parents=True, exist_ok=True)
        head, workers = specs[0], specs[1:]
        with self._spawning():
            head_args = self._node_args(head) | {
                "include_dashboard": True,
                "dashboard_host": "127.0.0.1",
                "dashboard_port": self.dashboard_port,
                "gcs_server_port": free_port(),
                "temp_dir": str(self.temp_dir),
            }
            self._cluster = Cluster()
            self._add(head, head_args)
            for spec in workers:
                self._add(spec, self._node_args(spec))
            with held_back("Ray has registered every node"):
                self._cluster.wait_for_nodes(timeout=REGISTER_S)
        return self

    def _add(self, spec: NodeSpec, args: dict[str, Any]) -> None:
        """Start one node and wait until the GCS lists it (the first call makes the head)."""
        with held_back(f"Ray node {spec.name} is up"):
            handle = self._cluster.add_node(wait=False, **args)
            self.nodes.append(LocalNode(spec, handle))
            self._cluster._wait_for_node(handle, timeout=REGISTER_S)

    def add(self, spec: NodeSpec) -> None:
        with self._spawning():
            self._add(spec, self._node_args(spec))

    def remove(self, name: str) -> NodeSpec:
        node = next(n for n in self.nodes if n.spec.name == name)
        self._cluster.remove_node(node.handle, allow_graceful=True)
        self.nodes.remove(node)
        return node.spec

    def shape(self) -> list[tuple[Any, ...]]:
        return sorted(n.spec.shape() for n in self.nodes)

    def head_failures(self) -> list[str]:
        """The head node's Ray processes that exited by themselves (gcs_server, raylet, dashboard,
        ...: Ray's Node.dead_processes, which leaves out those ended on purpose); [] while the head
        runs. A dead head fails any run on it, whatever the values say."""
        if self._cluster is None or self._cluster.head_node is None:
            return []
        return sorted({str(kind) for kind, _ in self._cluster.head_node.dead_processes()})

    def shutdown(self) -> list[int]:
        """End every node, then any process still carrying the tag (the dashboard's module processes
        outlive their parent for a while); returns the pids that survived SIGKILL (none expected)."""
        if self._cluster is not None:
            with contextlib.suppress(Exception):
                for node in reversed(self.nodes):
                    self._cluster.remove_node(node.handle, allow_graceful=False)
            self.nodes.clear()
            self._cluster = None
        return end_tagged(self.tag, self.workdir)
