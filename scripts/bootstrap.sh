#!/usr/bin/env bash
# Install one profile into the checkout, idempotently, saying what it does as it goes:
#   user      .venv with what generate, validate, render and infra need (requirements/user.lock),
#             the project itself, and the two pinned Helm binaries (sha256-checked) in .tools/
#   rehearse  user + a local Ray for `rehearse` (requirements/rehearse.lock)
#   dev       rehearse + pytest, hypothesis, ruff (requirements/dev.lock) and shellcheck
# Each profile contains the one before it; a venv that already holds a larger profile is kept.
set -euo pipefail
cd "$(dirname "$0")/.."

profile="${1:-user}"
case "$profile" in
  user) rank=1 ;; rehearse) rank=2 ;; dev) rank=3 ;;
  *) echo "usage: scripts/bootstrap.sh user|rehearse|dev" >&2; exit 2 ;;
esac

PYTHON="${PYTHON:-python3}"
if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "error: $PYTHON not found: install Python >= 3.11 (or set PYTHON=/path/to/python3.11)" >&2
  exit 1
fi
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "error: Python >= 3.11 is required ($PYTHON is $("$PYTHON" -V 2>&1)); set PYTHON=/path/to/python3.11" >&2
  exit 1
fi

lock="requirements/$profile.lock"
stamp=.venv/.profile
# A stamp is "<rank> <name> <sha256 of the lock and pyproject.toml>"; it is current when its lock is unchanged.
current() {
  local have_rank have_name have_sha
  [ -f "$stamp" ] || return 1
  read -r have_rank have_name have_sha < "$stamp" || return 1
  [ -x .venv/bin/python ] && [ "$have_rank" -ge "$rank" ] \
    && [ "$have_sha" = "$(cat "requirements/$have_name.lock" pyproject.toml | sha256sum | cut -d' ' -f1)" ]
}

if current; then
  echo "==> .venv is up to date ($(cut -d' ' -f2 "$stamp") profile, requirements/$(cut -d' ' -f2 "$stamp").lock)"
else
  [ -x .venv/bin/python ] || { echo "==> creating .venv with $("$PYTHON" -V)"; "$PYTHON" -m venv .venv; }
  n=$(grep -vc '^#' "$lock")
  echo "==> installing the $profile profile into .venv: $n pinned packages from $lock"
  # One line per package as pip takes it, so a minute of downloading is not a silent minute.
  set +e
  .venv/bin/python -m pip install --disable-pip-version-check --progress-bar off -r "$lock" 2>&1 \
    | tee .venv/pip.log | sed -u -n -e 's/^Collecting \([^ ]*\).*/    \1/p' -e 's/^Processing .*\/\([^/ ]*\)\.whl.*/    \1/p'
  rc=${PIPESTATUS[0]}
  set -e
  if [ "$rc" -ne 0 ]; then
    grep -v '^WARNING: Location' .venv/pip.log | tail -n 8 >&2
    echo "error: pip could not install $lock (whole log: .venv/pip.log); it needs network access to PyPI" >&2
    exit 1
  fi
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
  echo "$rank $profile $(cat "$lock" pyproject.toml | sha256sum | cut -d' ' -f1)" > "$stamp"
  echo "    done: $(du -sh .venv | cut -f1) in .venv"
fi

echo "==> pinned Helm binaries in .tools/helm/"
.venv/bin/python -m generator.helm.install

# Python reads generator/'s bytecode even where PYTHONDONTWRITEBYTECODE forbids writing it (CI,
# containers): without it every command compiles the package anew (about 0.1 s of each start).
echo "==> bytecode of generator/"
.venv/bin/python -m compileall -q generator >/dev/null

if [ "$profile" = dev ]; then
  echo "==> shellcheck (the infra script tests run it)"
  if ! command -v shellcheck >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
      echo "    installing Debian's shellcheck with apt-get"
      if ! apt_log="$({ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends shellcheck; } 2>&1)"; then
        printf '%s\n' "$apt_log" | tail -n 5 >&2
        echo "error: apt-get could not install shellcheck; install it with your package manager (it is only needed for the tests)" >&2
        exit 1
      fi
    else
      echo "error: shellcheck is missing; install it with your package manager (apt-get install shellcheck, brew install shellcheck, dnf install ShellCheck); only the tests need it" >&2
      exit 1
    fi
  fi
  echo "    $(shellcheck --version | sed -n 's/^version: /shellcheck /p')"
fi
