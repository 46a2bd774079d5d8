#!/usr/bin/env bash
# Re-pin the whole dependency tree of each install profile (requirements/<profile>.in) into
# requirements/<profile>.lock: pip freeze of a clean virtualenv. Run after changing a .in file.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for profile in user rehearse dev; do
  echo "==> $profile: clean virtualenv, pip install -r requirements/$profile.in"
  python3 -m venv "$tmp/$profile"
  # Constrained by the current dev lock where it exists, so re-locking one profile keeps the others' versions.
  constraint=()
  if [ -f requirements/dev.lock ] && [ "${LOCK_UPGRADE:-0}" != 1 ]; then constraint=(-c requirements/dev.lock); fi
  "$tmp/$profile/bin/pip" install --quiet --disable-pip-version-check -r "requirements/$profile.in" "${constraint[@]}"
  {
    echo "# The $profile profile's whole dependency tree, pinned: pip freeze of a clean virtualenv"
    echo "# after 'pip install -r requirements/$profile.in'. Regenerate with scripts/lock.sh."
    "$tmp/$profile/bin/pip" freeze --disable-pip-version-check
  } > "requirements/$profile.lock"
  echo "    requirements/$profile.lock: $(grep -vc '^#' "requirements/$profile.lock") packages"
done
