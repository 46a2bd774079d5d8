"""What the CLI reads and writes: never a device, FIFO or oversized file; never a file it did not
write; symlinks written through; every failure one line, never a traceback."""

from __future__ import annotations

import os
import resource
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

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


# --- write_atomic: generate -o and infra -o ------------------------------------------------


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_a_device_target_is_refused_without_reading_it(tmp_path, force):
    proc = run("--gpu", "h200", "-o", "/dev/zero", *force, cwd=tmp_path)
    one_line_error(proc, "/dev/zero", "character device", "-o")
    assert stat.S_ISCHR(os.stat("/dev/zero").st_mode)


@pytest.mark.parametrize("command", [("--gpu", "h200"), INFRA])
def test_a_fifo_target_is_refused_even_with_force_and_stays_a_fifo(tmp_path, command):
    fifo = tmp_path / "v.yaml"
    os.mkfifo(fifo)
    proc = run(*command, "-o", str(fifo), "--force", cwd=tmp_path)
    one_line_error(proc, str(fifo), "named pipe")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["v.yaml"]


def test_a_symlink_is_written_through_and_its_target_keeps_its_mode(tmp_path):
    real = tmp_path / "real.yaml"
    real.write_text("mine: 1\n")
    real.chmod(0o600)
    link = tmp_path / "link.yaml"
    link.symlink_to("real.yaml")
    refused = run("--gpu", "h200", "-o", "link.yaml", cwd=tmp_path)
    one_line_error(refused, "link.yaml", "--force")
    assert real.read_text() == "mine: 1\n"

    proc = run("--gpu", "h200", "-o", "link.yaml", "--force", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and os.readlink(link) == "real.yaml"
    assert yaml.safe_load(real.read_text())["accelerator"]["type"] == "h200"
    assert stat.S_IMODE(real.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.yaml", "real.yaml"]
    again = run("--gpu", "h200", "-o", "link.yaml", cwd=tmp_path)
    assert again.returncode == 0 and "unchanged" in again.stderr


def test_a_dangling_symlink_needs_force_and_then_creates_its_target(tmp_path):
    (tmp_path / "shared").mkdir()
    link = tmp_path / "v.yaml"
    link.symlink_to("shared/values.yaml")
    proc = run("--gpu", "h200", "-o", "v.yaml", cwd=tmp_path)
    one_line_error(proc, "v.yaml", "does not exist", "--force")
    assert link.is_symlink() and not (tmp_path / "shared" / "values.yaml").exists()

    proc = run("--gpu", "h200", "-o", "v.yaml", "--force", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink()
    assert yaml.safe_load((tmp_path / "shared" / "values.yaml").read_text())["accelerator"]["type"] == "h200"


def test_a_long_legal_file_name_is_written(tmp_path):
    name = "v" * 245 + ".yaml"  # 250 bytes: legal, but too long with a prefix and suffix added
    proc = run("--gpu", "h200", "-o", name, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in tmp_path.iterdir()] == [name]


@pytest.mark.parametrize(
    ("target", "reason"),
    [("/proc/x.yaml", "cannot write"), ("v" * 300 + ".yaml", "File name too long"), ("loop", "symbolic links")],
)
def test_write_errors_are_one_line_naming_the_file(tmp_path, target, reason):
    (tmp_path / "loop").symlink_to("loop")
    proc = run("--gpu", "h200", "-o", target, cwd=tmp_path)
    one_line_error(proc, f"{target}: cannot write: ", reason)


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
