"""What the CLI reads and writes: never a device, FIFO or oversized file; never a file it did not
write; symlinks written through; every failure one line, never a traceback."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CI_DIR = ROOT / "charts" / "nemo-rl-gke" / "ci"
B200 = CI_DIR / "b200-values.yaml"
INFRA = ("infra", "--gpu", "h200", "--project", "my-proj-1", "--region", "us-central1", "--zone", "us-central1-a")
MEMORY_LIMIT = 2 << 30  # a read of a device or a huge file fails fast instead of filling the machine


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run(*args: str, cwd: Path, stdout: int | None = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "generator", *args],
        cwd=cwd,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        check=False,
        timeout=60,  # a read of a FIFO that blocks fails the test instead of hanging it
        preexec_fn=_limit_memory,
    )


def one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "error: " in proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --- load_values: validate -----------------------------------------------------------------


def test_validate_refuses_a_device_and_a_fifo_without_reading_them(tmp_path):
    one_line_error(run("validate", "/dev/zero", cwd=tmp_path), "/dev/zero", "character device")
    fifo = tmp_path / "values.yaml"
    os.mkfifo(fifo)
    one_line_error(run("validate", str(fifo), cwd=tmp_path), str(fifo), "named pipe")


def test_validate_reads_no_more_of_a_huge_file_than_the_limit(tmp_path):
    huge = tmp_path / "huge.yaml"
    with open(huge, "wb") as f:
        f.truncate(3 << 30)  # 3 GiB, sparse: more than the memory the CLI may use here
    one_line_error(run("validate", str(huge), cwd=tmp_path), "huge.yaml", "larger than 1024 KiB")
