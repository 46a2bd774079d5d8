#!/usr/bin/env bash
# The project's test command: installs the contributor's profile (scripts/bootstrap.sh dev:
# everything the user's has, plus pytest, hypothesis, ruff and shellcheck) where it is missing,
# then lint, the vendored data's checksums, and the test suite in its lanes:
#   scripts/test.sh            every lane (the default, and what CI runs)
#   scripts/test.sh --fast     the tests that need neither a local Ray nor the test bed
#   scripts/test.sh --ray      the tests that start a local Ray cluster
#   scripts/test.sh --cluster  the tests against the real test bed (builds it first: testbed/)
# Arguments after the lane go to pytest (e.g. scripts/test.sh --fast -k doctor).
set -euo pipefail
cd "$(dirname "$0")/.."

lane=all
case "${1:-}" in
  --fast) lane=fast; shift ;;
  --ray) lane=ray; shift ;;
  --cluster) lane=cluster; shift ;;
  --all) shift ;;
esac

scripts/bootstrap.sh dev
echo "==> ruff (lint and format)"
.venv/bin/ruff check .
.venv/bin/ruff format --check . >/dev/null || { .venv/bin/ruff format --check . >&2; echo "error: run .venv/bin/ruff format ." >&2; exit 1; }
echo "==> import layers (lint-imports, .importlinter)"
.venv/bin/lint-imports --no-cache >/dev/null || { .venv/bin/lint-imports --no-cache >&2; exit 1; }
echo "==> vendored data (scripts/vendor.sh check)"
scripts/vendor.sh check | sed 's/^/    /'
echo "==> NeMo RL start-up asserts (scripts/nemo-rl-asserts.sh --check)"
scripts/nemo-rl-asserts.sh --check

# pytest's exit 5 means it collected nothing: a lane that runs no test fails.
run_pytest() {
  local rc=0
  .venv/bin/python -m pytest "$@" || rc=$?
  if [ "$rc" -eq 5 ]; then
    echo "error: pytest collected no tests" >&2
    return 1
  fi
  return "$rc"
}

status=0
# Six workers on two cores: the slow tests wait on Ray clusters and subprocesses, not the CPU.
# loadfile: each test file runs in one worker, so a module's Ray cluster fixture starts once.
# (Not loadgroup: with pytest 9.2 pytest-xdist 3.8 ignores xdist_group marks.)
case "$lane" in
  fast) echo "==> pytest: fast lane"; run_pytest -n 6 --dist loadfile -m "not ray and not cluster" "$@" || status=$? ;;
  ray) echo "==> pytest: Ray lane"; run_pytest -n 6 --dist loadfile -m "ray and not cluster" "$@" || status=$? ;;
  all) echo "==> pytest: fast and Ray lanes"; run_pytest -n 6 --dist loadfile -m "not cluster" "$@" || status=$? ;;
esac
if [ "$lane" = cluster ] || [ "$lane" = all ]; then
  echo "==> the test bed: Kubernetes, kwok, KubeRay and Kueue from their Go modules (scripts/testbed.sh build)"
  .venv/bin/python -m testbed build | sed 's/^/    /'
  echo "==> pytest: cluster lane (one process: one test bed for the session)"
  run_pytest -p no:xdist -m cluster tests/cluster "$@" || status=$?
fi
exit "$status"
