#!/usr/bin/env bash
# The project's test command: installs the contributor's profile (scripts/bootstrap.sh dev:
# everything the user's has, plus pytest, hypothesis, ruff and shellcheck) where it is missing,
# then lint, the vendored data's checksums, and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh dev
echo "==> ruff"
.venv/bin/ruff check .
echo "==> vendored data (scripts/vendor.sh check)"
scripts/vendor.sh check | sed 's/^/    /'
echo "==> pytest"
# Six workers on two cores: the slow tests wait on Ray clusters and subprocesses, not the CPU
# (measured: 200 s with 6 workers, 218 s with 8: the two cores are the limit).
# loadfile: each test file runs in one worker, so a module's Ray cluster fixture starts once
# (the two launcher files and the two rehearsal files: five local Ray clusters at most).
# (Not loadgroup: with pytest 9.2 pytest-xdist 3.8 ignores xdist_group marks.)
set +e
.venv/bin/python -m pytest -n 6 --dist loadfile "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "error: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
