"""Build the test bed's binaries into .tools/testbed/<folder>/<version>/.

A component is rebuilt only when its stamp changed: the sha256 of its go.mod and go.sum, the
ldflags and the Go version. Otherwise nothing runs at all; and when something does, Go's module
and build caches make it a link step. Each build says what it does as it goes.
"""

from __future__ import annotations

import hashlib
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from testbed import toolchain
from testbed.components import ALL, Component

STAMP = ".stamp"


class BuildError(Exception):
    pass


@dataclass(frozen=True)
class Built:
    component: Component
    seconds: float
    rebuilt: bool


def stamp(component: Component, go: toolchain.Go) -> str:
    h = hashlib.sha256()
    for f in (component.go_mod, component.go_mod.with_name("go.sum")):
        h.update(f.read_bytes())
    h.update(component.ldflags().encode())
    h.update(go.label.encode())
    h.update(" ".join(f"{b.name}={b.package}" for b in component.binaries).encode())
    return h.hexdigest()


def current(component: Component, go: toolchain.Go) -> bool:
    marker = component.bin_dir / STAMP
    return (
        marker.exists()
        and marker.read_text().strip() == stamp(component, go)
        and all(component.path(b.name).exists() for b in component.binaries)
    )


def build_one(component: Component, go: toolchain.Go, log: Callable[[str], None]) -> Built:
    start = time.monotonic()
    if current(component, go):
        return Built(component, time.monotonic() - start, False)
    log(f"building {component.folder} {component.version} ({', '.join(b.name for b in component.binaries)}) with {go.label}")
    component.bin_dir.mkdir(parents=True, exist_ok=True)
    (component.bin_dir / STAMP).unlink(missing_ok=True)
    for b in component.binaries:
        cmd = [str(go.path), "build", "-trimpath", "-ldflags", component.ldflags(), "-o", str(component.path(b.name)), b.package]
        proc = subprocess.run(cmd, cwd=component.go_mod.parent, env=go.env(), capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = "; ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
            raise BuildError(f"go build {b.package} in testbed/go/{component.folder} failed: {tail}")
    (component.bin_dir / STAMP).write_text(stamp(component, go) + "\n")
    took = time.monotonic() - start
    log(f"    built in {took:.0f} s")
    return Built(component, took, True)


def build(components: Iterable[Component] = ALL, log: Callable[[str], None] = print) -> list[Built]:
    go = toolchain.find(log)
    return [build_one(c, go, log) for c in components]


def module_dir(component: Component, module: str | None = None) -> str:
    """Where Go's module cache holds `module` (default: the component's own) at the version the
    wrapper requires: the source of the CRDs, webhook configurations and stage files applied."""
    go = toolchain.find()
    proc = subprocess.run(
        [str(go.path), "list", "-m", "-f", "{{.Dir}}", module or component.module],
        cwd=component.go_mod.parent,
        env=go.env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        raise BuildError(f"go list -m {module or component.module} in testbed/go/{component.folder}: {proc.stderr.strip()[-300:]}")
    return proc.stdout.strip()
