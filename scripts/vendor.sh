#!/usr/bin/env bash
# The third-party data under vendor/ (KubeRay CRDs, NeMo RL recipe configs and start-up source, GKE networking CRDs):
#   scripts/vendor.sh check            verify every file against its SHA256SUMS
#   scripts/vendor.sh refresh FOLDER   replace every set with the files in FOLDER, laid out as
#                                      crds/kuberay-<version>/*.yaml, nemo-rl/<tag>/examples/configs/...
#                                      crds/gke-networking-api-<version>/*.yaml and nemo-rl-src/<tag>/...
# Standard library + PyYAML: runs in the project's .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m generator.vendored "$@"
