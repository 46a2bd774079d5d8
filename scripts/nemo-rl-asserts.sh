#!/usr/bin/env bash
# Every assert and raise on NeMo RL's GRPO start-up path, per supported release, from the source
# carried under vendor/nemo-rl-src/ (generator/nemo_rl/asserts.py):
#   scripts/nemo-rl-asserts.sh                       rewrite generator/nemo_rl/startup_asserts.json
#   scripts/nemo-rl-asserts.sh --check               exit 1 when it differs from the carried source
#   scripts/nemo-rl-asserts.sh stage GIT_DIR FOLDER  copy each release's start-up files out of a git
#                                                    mirror of NVIDIA-NeMo/RL for scripts/vendor.sh refresh
# Standard library only: runs in the project's .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m generator.nemo_rl.asserts "$@"
