#!/usr/bin/env bash
# Install everything the project needs, idempotently: a virtualenv with the pinned Python
# dependencies, the project itself, and the two pinned Helm binaries (sha256-checked).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "error: Python >= 3.11 is required ($PYTHON is $("$PYTHON" -V 2>&1)); set PYTHON=/path/to/python3.11" >&2
  exit 1
fi

stamp=.venv/.requirements.sha256
want="$(sha256sum requirements.lock pyproject.toml | sha256sum | cut -d' ' -f1)"
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "==> virtualenv .venv (pinned dependencies from requirements.lock)"
  "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.lock
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
  echo "$want" > "$stamp"
else
  echo "==> virtualenv .venv is up to date"
fi

echo "==> pinned Helm binaries"
.venv/bin/python -m generator.install_helm

echo "==> shellcheck (Debian package; the infra script tests run it)"
if ! command -v shellcheck >/dev/null 2>&1; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "error: shellcheck is missing and apt-get is not available; install shellcheck with your package manager" >&2
    exit 1
  fi
  if ! apt_log="$({ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends shellcheck; } 2>&1)"; then
    printf '%s\n' "$apt_log" | tail -n 5 >&2
    echo "error: could not install shellcheck with apt-get (needs root); install it, e.g. apt-get install shellcheck" >&2
    exit 1
  fi
fi
echo "    $(shellcheck --version | sed -n 's/^version: /shellcheck /p')"
