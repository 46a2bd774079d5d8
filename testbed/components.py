"""What the test bed builds: each component's wrapper module, the Go packages it builds and the
binaries they become. A component's version is the one its wrapper's go.mod requires (with
go.sum beside it): that file is the one place the version is pinned; everything here reads it.

Why wrapper modules: `go install pkg@version` refuses a module whose go.mod has `replace` lines
(k8s.io/kubernetes, etcd's server, KubeRay v1.3.2); a module of our own that requires it builds
it, and its go.sum fixes every dependency's hash.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GO_DIR = ROOT / "testbed" / "go"
BIN_DIR = ROOT / ".tools" / "testbed"


@dataclass(frozen=True)
class Binary:
    name: str  # the file written
    package: str  # the Go package built into it


@dataclass(frozen=True)
class Component:
    folder: str  # testbed/go/<folder>
    module: str  # the module whose required version is the component's version
    binaries: tuple[Binary, ...]
    # Kubernetes' own build stamps its version into these packages (hack/lib/version.sh); without
    # it /version says v0.0.0-master, which Helm's kubeVersion and the operators' gates read.
    stamp_kubernetes_version: bool = False

    @property
    def go_mod(self) -> Path:
        return GO_DIR / self.folder / "go.mod"

    @cached_property
    def version(self) -> str:
        return required_version(self.go_mod.read_text(), self.module)

    @property
    def bin_dir(self) -> Path:
        return BIN_DIR / self.folder / self.version

    def path(self, binary: str) -> Path:
        return self.bin_dir / binary

    def ldflags(self) -> str:
        flags = ["-s", "-w"]
        if self.stamp_kubernetes_version:
            major, minor = self.version.lstrip("v").split(".")[:2]
            for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
                flags += [
                    f"-X {pkg}.gitVersion={self.version}",
                    f"-X {pkg}.gitMajor={major}",
                    f"-X {pkg}.gitMinor={minor}",
                    f"-X {pkg}.gitTreeState=clean",
                ]
        return " ".join(flags)


_REQUIRE = re.compile(r"^\s*(?:require\s+)?(\S+)\s+(v\S+)", re.MULTILINE)


def required_version(go_mod: str, module: str) -> str:
    """The version of `module` a go.mod requires."""
    for name, version in _REQUIRE.findall(go_mod):
        if name == module:
            return version
    raise ValueError(f"go.mod requires no version of {module}")


CONTROL_PLANE = Component(
    folder="controlplane",
    module="k8s.io/kubernetes",
    binaries=tuple(
        Binary(name, f"k8s.io/kubernetes/cmd/{name}") for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
    ),
    stamp_kubernetes_version=True,
)
ETCD = Component(folder="etcd", module="go.etcd.io/etcd/server/v3", binaries=(Binary("etcd", "go.etcd.io/etcd/server/v3"),))
KWOK = Component(folder="kwok", module="sigs.k8s.io/kwok", binaries=(Binary("kwok", "sigs.k8s.io/kwok/cmd/kwok"),))
KUEUE = Component(folder="kueue", module="sigs.k8s.io/kueue", binaries=(Binary("kueue", "sigs.k8s.io/kueue/cmd/kueue"),))
KUBERAY_MODULE = "github.com/ray-project/kuberay/ray-operator"
# Every KubeRay version the tests run against: one wrapper module each, oldest first.
KUBERAY = tuple(
    Component(folder=folder, module=KUBERAY_MODULE, binaries=(Binary("ray-operator", KUBERAY_MODULE),))
    for folder in ("kuberay-v1.3.2", "kuberay-v1.6.2")
)
ALL: tuple[Component, ...] = (ETCD, CONTROL_PLANE, KWOK, *KUBERAY, KUEUE)


def kuberay(version: str) -> Component:
    for c in KUBERAY:
        if c.version == version:
            return c
    raise ValueError(f"the test bed builds no KubeRay {version}: choose one of {', '.join(c.version for c in KUBERAY)}")
