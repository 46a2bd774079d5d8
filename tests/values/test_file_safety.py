"""What the CLI reads and writes: never a device, FIFO or oversized file; never a file it did not
write; symlinks written through; every failure one line, never a traceback."""

from __future__ import annotations

import os
import resource
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from generator.core import files
from generator.core.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
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


# --- render --------------------------------------------------------------------------------


def test_render_never_deletes_files_it_did_not_write(tmp_path):
    # Stems with no letter render keeps in a folder name once gave an empty folder name: --out
    # itself, whose *.yaml files (the user's values, the input too) were deleted.
    shutil.copy(B200, tmp_path / "本番.yaml")
    (tmp_path / "mine.yaml").write_text("keep: 1\n")
    (tmp_path / "notes.yaml").write_text("keep: 2\n")
    before = snapshot(tmp_path)
    proc = run("render", "本番.yaml", "--out", ".", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    after = snapshot(tmp_path)
    assert {k: v for k, v in after.items() if k in before} == before
    written = sorted(set(after) - set(before))
    assert written == ["values/.nemo-rl-gke-render", "values/all.yaml"]
    assert "# Source: nemo-rl-gke/templates/raycluster.yaml" in (tmp_path / "values" / "all.yaml").read_text()


def test_render_refuses_a_folder_it_did_not_make_and_reuses_its_own(tmp_path):
    out = tmp_path / "out"
    (out / "b200-values").mkdir(parents=True)
    (out / "b200-values" / "mine.yaml").write_text("keep: 1\n")
    proc = run("render", str(B200), "--out", "out", cwd=tmp_path)
    one_line_error(proc, "out/b200-values", "not made by render")
    assert [p.name for p in (out / "b200-values").iterdir()] == ["mine.yaml"]

    (out / "b200-values" / "mine.yaml").unlink()
    assert run("render", str(B200), "--out", "out", cwd=tmp_path).returncode == 2  # empty, still not render's
    (out / "b200-values").rmdir()
    first = run("render", str(B200), "--out", "out", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    rendered = (out / "b200-values" / "all.yaml").read_text()
    (out / "b200-values" / "all.yaml").write_text("stale\n")
    second = run("render", str(B200), "--out", "out", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert (out / "b200-values" / "all.yaml").read_text() == rendered


def test_render_takes_over_a_folder_an_earlier_version_rendered(tmp_path):
    folder = tmp_path / "out" / "b200-values"
    folder.mkdir(parents=True)
    (folder / "all.yaml").write_text("---\n# Source: nemo-rl-gke/templates/old.yaml\nkind: ConfigMap\n")
    proc = run("render", str(B200), "--out", "out", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "RayCluster" in (folder / "all.yaml").read_text()


def test_render_refuses_two_inputs_with_one_output_folder(tmp_path):
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        shutil.copy(B200, tmp_path / sub / "values.yaml")
    proc = run("render", "a/values.yaml", "b/values.yaml", "--out", "out", cwd=tmp_path)
    one_line_error(proc, "a/values.yaml", "b/values.yaml", "--out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("out", "needle"),
    [("file.txt", "is not a folder"), ("/proc/foo", "cannot create the folder")],
)
def test_render_out_that_is_not_a_folder_is_one_line(tmp_path, out, needle):
    (tmp_path / "file.txt").write_text("mine\n")
    proc = run("render", str(B200), "--out", out, cwd=tmp_path)
    one_line_error(proc, f"--out {out}", needle)
    assert (tmp_path / "file.txt").read_text() == "mine\n"


@pytest.mark.parametrize("helm", ["/bin/echo", "/bin/true"])
def test_render_refuses_a_helm_that_is_not_helm(tmp_path, helm):
    proc = run("render", str(B200), "--out", "out", "--helm", helm, cwd=tmp_path)
    one_line_error(proc, f"--helm {helm}", "not Helm")
    assert not (tmp_path / "out").exists()


def test_render_that_renders_nothing_fails_and_writes_nothing(tmp_path):
    fake = tmp_path / "helm"
    fake.write_text('#!/bin/sh\nif [ "$1" = version ]; then echo v3.99.0; fi\nexit 0\n')
    fake.chmod(0o755)
    proc = run("render", str(B200), "--out", "out", "--helm", str(fake), cwd=tmp_path)
    one_line_error(proc, "b200-values.yaml", "rendered no objects")
    assert "valid" not in proc.stdout
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize("release", ["--debug", "Nemo", "nemo_rl", "-x", "x-", "a" * 54])
def test_render_release_must_be_a_helm_release_name(tmp_path, release):
    proc = run("render", str(B200), "--out", "out", f"--release={release}", cwd=tmp_path)
    assert proc.returncode == 2
    one_line_error(proc, "--release", "not a Helm release name")
    assert not (tmp_path / "out").exists()


def test_render_reports_a_helm_failure_in_one_line_naming_the_key(tmp_path):
    # Helm's schema error is three lines (a header, the chart, the violation); render says the last.
    bad = tmp_path / "bad.yaml"
    bad.write_text("image:\n  tag: 5\n")
    proc = run("render", "bad.yaml", "--out", "out", cwd=tmp_path)
    assert proc.returncode == 1
    one_line_error(proc, "error: bad.yaml: helm v4.1.4 template failed: image.tag: got number, want string")


@pytest.mark.parametrize("command", ["render", "validate", "rehearse", "doctor"])
def test_an_empty_values_file_is_refused_in_one_line(tmp_path, command):
    extra = {"render": ["--out", "out"], "doctor": ["--kubeconfig", "/dev/null"]}.get(command, [])
    for text in ("", "# only a comment\n", "null\n"):
        (tmp_path / "empty.yaml").write_text(text)
        proc = run(command, "empty.yaml", *extra, cwd=tmp_path)
        assert proc.returncode == 2
        one_line_error(proc, "empty.yaml: is empty", "write {} in it")
    (tmp_path / "empty.yaml").write_text("{}\n")  # set nothing, said so: Helm's defaults
    assert run("validate", "empty.yaml", cwd=tmp_path).returncode == 0
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("where", ["VALUES", "-f"])
def test_render_refuses_a_huge_values_file_before_helm_reads_it(tmp_path, where):
    huge = tmp_path / "huge.yaml"
    with open(huge, "w") as f:
        f.write("a: " + "x" * (50 << 20) + "\n")  # 50 MB: Helm took minutes and gigabytes on it
    args = ["huge.yaml"] if where == "VALUES" else [str(B200), "-f", "huge.yaml"]
    one_line_error(run("render", *args, "--out", "out", cwd=tmp_path), "huge.yaml", "larger than 1024 KiB")
    assert not (tmp_path / "out").exists()


# --- writing to stdout ---------------------------------------------------------------------


@pytest.mark.parametrize("args", [("validate", "--format", "json", str(B200)), INFRA])
def test_a_reader_that_went_away_ends_the_cli_quietly(tmp_path, args):
    r, w = os.pipe()
    os.close(r)  # `... | true` after true has exited
    try:
        proc = run(*args, cwd=tmp_path, stdout=w)
    finally:
        os.close(w)
    assert proc.returncode == 141  # as a process killed by SIGPIPE reports in the shell
    assert proc.stderr == ""


def test_a_full_stdout_is_one_line(tmp_path):
    with open("/dev/full", "w") as full:
        proc = run(*INFRA, cwd=tmp_path, stdout=full.fileno())
    assert proc.returncode == 1
    assert proc.stderr == "error: cannot write to standard output: No space left on device\n"


LIBYAML_CASES = [
    "a: 1\x07",
    "a: \x85x",
    "\ufeffa: 1",
    "a:\n\tb: 1",
    "a: " + "[" * 60 + "]" * 60,
    "a: \ud800",
    "a: 1\nb: 2\na: 3",
    "a: &x {b: 1}\nc: *x\nd:\n  <<: *x\n  b: 2",
    "? [1]\n: 2",
    "a: !!python/object:os.system x",
    "a: 0o17\nb: 1_000\nc: .inf\nd: 2001-12-14\ne: 0x1F\nf: yes\ng: ~",
    "a: \x00",
    "a: \u2028x\nb: \ue000\nc: \U0001f600\nd: \x7f",
    "a: [1, 2\nb: 3",
    "a: 'unterminated\n",
    "a:\n  - b\n   c: 1",
    "- a\n- b",
    "",
    "# only a comment\n",
]


@pytest.mark.parametrize("text", LIBYAML_CASES)
def test_the_libyaml_parser_reads_and_refuses_as_pyyamls_does(text, monkeypatch):
    # parse_yaml reads with libyaml (several times faster) and falls back to PyYAML's own parser
    # for what libyaml refuses: documents and messages are those of PyYAML alone.
    def outcome() -> object:
        try:
            return ("ok", files.parse_yaml(text, "v.yaml"))
        except InputError as e:
            return ("refused", str(e))

    fast = outcome()
    monkeypatch.setattr(files, "_FastUniqueKeyLoader", files._UniqueKeyLoader)
    assert fast == outcome()
