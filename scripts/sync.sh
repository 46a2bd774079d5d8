#!/usr/bin/env bash
# Regenerate every derived file (chart schema copy, chart values.yaml, generated scenario and
# example values, README values table) from its one source.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m generator.sync "$@"
