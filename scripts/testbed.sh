#!/usr/bin/env bash
# The real-cluster test bed by hand: Kubernetes, kwok, KubeRay and Kueue built from their Go
# modules and run as processes on 127.0.0.1 (testbed/, docs/development.md#the-test-bed).
#   scripts/testbed.sh build | up [--gpu h200] [--nodes 2] [--network rdma|dranet|tcp] [--kuberay VERSION] | env | status | down
# Installs the contributor's profile first (scripts/bootstrap.sh dev) where it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh dev >&2
exec .venv/bin/python -m testbed "$@"
