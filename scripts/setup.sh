#!/usr/bin/env bash
# Set everything up and run the main job: install (virtualenv, pinned dependencies, pinned Helm
# binaries), generate the B200 and H200 values files, validate them, render the chart for both
# into out/ with every object validated, and print a summary.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh

py=.venv/bin/python
echo "==> generate values files"
for gpu in b200 h200; do
  if [ -e "values-$gpu.yaml" ]; then
    # never over a file the user may have edited (README, step 2)
    echo "  values-$gpu.yaml exists: kept (delete it to write a fresh one)"
  else
    "$py" -m generator --gpu "$gpu"
  fi
done
echo "==> validate"
"$py" -m generator validate values-b200.yaml values-h200.yaml
echo "==> lint (helm lint --strict, both pinned Helm majors)"
for helm in .tools/helm/*/helm; do
  for f in values-b200.yaml values-h200.yaml; do
    "$helm" lint --strict charts/nemo-rl-gke -f "$f" >/dev/null
  done
  echo "  $("$helm" version --short): ok"
done
echo "==> render and validate every object"
"$py" -m generator render values-b200.yaml values-h200.yaml --out out
echo
echo "Done. Next: create the cluster (python -m generator infra --help), then"
echo "  helm install nemo-rl charts/nemo-rl-gke -f values-h200.yaml"
