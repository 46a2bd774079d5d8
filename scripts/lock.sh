#!/usr/bin/env bash
# Re-pin the whole dependency tree from requirements.in into requirements.lock.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install --quiet -r requirements.in
{
  echo "# Whole dependency tree, pinned: pip freeze of a clean venv after 'pip install -r requirements.in'."
  echo "# Regenerate with scripts/lock.sh after changing requirements.in."
  "$tmp/venv/bin/pip" freeze
} > requirements.lock
echo "requirements.lock: $(grep -vc '^#' requirements.lock) packages"
