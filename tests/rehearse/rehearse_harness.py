"""Shared pieces of the rehearsal tests: values files, the CLI as a subprocess, and local Ray
clusters shaped like a rendered RayCluster (each ended, with every process, on the way out)."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from generator.rehearse.cluster import TAG_ENV, LocalCluster, tagged_pids
from generator.rehearse.run import Request, rehearse, render
from generator.rehearse.topology import NodeSpec
from generator.values.build import Options, build

ROOT = Path(__file__).resolve().parents[2]


def write(tmp: Path, name: str, values: dict[str, Any]) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path


def with_override(values: dict[str, Any], key: str, value: str) -> dict[str, Any]:
    out = copy.deepcopy(values)
    out["grpo"]["overrides"] = [o if not o.startswith(f"{key}=") else f"{key}={value}" for o in out["grpo"]["overrides"]]
    assert f"{key}={value}" in out["grpo"]["overrides"]
    return out


def head_without_cpus(release: str) -> dict[str, Any]:
    values = build(Options(gpu="h200", nodes=1, release=release))
    values["head"]["rayStartParams"] = {"num-cpus": "0"}
    return values


def run_in(cluster: LocalCluster, values: Path, **kw: Any) -> tuple[int, str]:
    lines: list[str] = []
    rc = rehearse(Request(values, **kw), cluster=cluster, write=lines.append)
    return rc, "\n".join(lines)


def cli(*args: str, tag: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, TAG_ENV: tag}
    cmd = [sys.executable, "-m", "generator", "rehearse", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def start_cluster(values: Path) -> Iterator[LocalCluster]:
    yield from cluster_of(render(Request(values))[1].nodes, "rh-test")


def cluster_of(nodes: list[NodeSpec], tag: str) -> Iterator[LocalCluster]:
    """A local Ray cluster of these nodes, for a fixture to yield; on the way out every one of its
    processes is ended (and the test fails if one survives)."""
    workdir = Path(tempfile.mkdtemp(prefix="rh-", dir="/tmp"))  # short: Ray's socket paths
    cluster = LocalCluster(workdir, tag=f"{tag}-{uuid.uuid4().hex[:8]}")
    try:
        cluster.start(nodes)
        yield cluster
    finally:
        survivors = cluster.shutdown()
        shutil.rmtree(workdir, ignore_errors=True)
    assert survivors == []
    assert tagged_pids(cluster.tag, workdir) == []
