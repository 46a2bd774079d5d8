"""Run the pinned Helm binaries (or a user-chosen one) on the chart."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from generator.core.paths import CHART_DIR, ROOT
from generator.helm.pins import HELM4, PINS, HelmPin

DEFAULT_RELEASE = "nemo-rl"
DEFAULT_NAMESPACE = "default"


class HelmError(Exception):
    """Helm exited non-zero; the message is Helm's own error text."""


def helm_env() -> dict[str, str]:
    """The environment Helm runs in: away from the user's kube context, caches and plugins."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
    state = ROOT / ".cache" / "helm"
    env.update(HELM_CACHE_HOME=str(state / "cache"), HELM_CONFIG_HOME=str(state / "config"), HELM_DATA_HOME=str(state / "data"))
    env["KUBECONFIG"] = "/dev/null"
    return env


@dataclass(frozen=True)
class Helm:
    path: Path
    version: str

    @property
    def major(self) -> int:
        return int(self.version.lstrip("v").split(".")[0])

    def run(self, args: Sequence[str]) -> str:
        proc = subprocess.run([str(self.path), *args], capture_output=True, text=True, env=helm_env(), check=False)
        if proc.returncode != 0:
            raise HelmError((proc.stderr or proc.stdout).strip())
        return proc.stdout

    def template(
        self,
        values_files: Sequence[Path] = (),
        *,
        release: str = DEFAULT_RELEASE,
        namespace: str = DEFAULT_NAMESPACE,
        chart: Path | str = CHART_DIR,
        set_values: Sequence[str] = (),
        extra: Sequence[str] = (),
    ) -> str:
        args = ["template", release, str(chart), "--namespace", namespace]
        for f in values_files:
            args += ["-f", str(f)]
        for s in set_values:
            args += ["--set", s]
        return self.run([*args, *extra])

    def lint(self, values_files: Sequence[Path] = (), *, chart: Path | str = CHART_DIR, strict: bool = True) -> str:
        args = ["lint", str(chart)]
        if strict:
            args.append("--strict")
        for f in values_files:
            args += ["-f", str(f)]
        return self.run(args)


class HelmMissing(Exception):
    pass


def pinned(pin: HelmPin) -> Helm:
    if not pin.path.exists():
        raise HelmMissing(
            f"Helm {pin.version} is not installed at {pin.path}; run scripts/bootstrap.sh (or python -m generator.helm.install)"
        )
    return Helm(pin.path, pin.version)


def all_pinned() -> list[Helm]:
    return [pinned(p) for p in PINS]


def default_helm(user_path: str | None = None) -> Helm:
    """The pinned Helm 4, or the binary the user asked for with --helm."""
    if user_path:
        path = Path(user_path)
        try:
            out = subprocess.run([str(path), "version", "--short"], capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError) as e:
            raise HelmMissing(f"--helm {user_path}: cannot run it ({e})") from None
        return Helm(path, out.strip().split("+")[0] or "unknown")
    return pinned(HELM4)


def pinned_or_input_error() -> Helm:
    """The pinned Helm 4, or an InputError (one line, exit 2) saying how to install it."""
    from generator.core.errors import InputError

    try:
        return default_helm()
    except HelmMissing as e:
        raise InputError(str(e)) from None


_SCHEMA_LINE = re.compile(r"^- (?:at '(?P<pointer>[^']*)'|(?P<dotted>[^\s:]+)): (?P<message>.+)$")
_EXECUTION = re.compile(r"execution error at \([^)]*\): (?P<message>.+)$")


def _key(pointer: str) -> str:
    """`/workerGroups/0/replicas` (Helm 4's JSON pointer) as `workerGroups[0].replicas`."""
    out = ""
    for raw in pointer.strip("/").split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        out += f"[{part}]" if part.isdigit() else (f".{part}" if out else part)
    return out or "(the values)"


def error_key(error: str) -> str:
    """The values key Helm's schema error names first ("" when it names none)."""
    for line in error.strip().splitlines():
        m = _SCHEMA_LINE.match(line.strip())
        if m:
            return _key(m["pointer"] if m["pointer"] is not None else "/" + m["dotted"].replace(".", "/"))
    return ""


def one_line(error: str) -> str:
    """Helm's error text in one line naming the key: the first schema violation (and how many
    more), the template's own `fail` message, or Helm's first error line."""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    problems = []
    for line in lines:
        m = _SCHEMA_LINE.match(line)
        if m:
            key = _key(m["pointer"] if m["pointer"] is not None else "/" + m["dotted"].replace(".", "/"))
            problems.append(f"{key}: {m['message']}")
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return f"{problems[0]}{more}"
    for line in lines:
        m = _EXECUTION.search(line)
        if m:
            return m["message"]
    first = lines[0] if lines else "failed with no message"
    return first.removeprefix("Error: ")
