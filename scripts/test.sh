#!/usr/bin/env bash
# The project's test command: installs what is missing, then lint + the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
echo "==> ruff"
.venv/bin/ruff check .
echo "==> pytest"
set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "error: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
