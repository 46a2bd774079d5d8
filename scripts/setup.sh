#!/usr/bin/env bash
# The user's set-up and main job: install the user's profile (.venv with the run-time
# dependencies and a local Ray for `rehearse`; --no-rehearse leaves Ray out), the pinned Helm
# binaries, then generate the B200 and H200 values files, validate them, lint the chart with both
# Helm majors, render it for both into out/ with every object validated, and say what comes next.
set -euo pipefail
cd "$(dirname "$0")/.."

profile=rehearse
for arg in "$@"; do
  case "$arg" in
    --no-rehearse) profile=user ;;
    -h|--help) sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: scripts/setup.sh [--no-rehearse]" >&2; exit 2 ;;
  esac
done
scripts/bootstrap.sh "$profile"

py=.venv/bin/python
# One values file per accelerator profile of the table (generator/gke/profiles.py).
profiles="$("$py" -c 'from generator.gke.profiles import PROFILES; print(*PROFILES)')"
files=()
for gpu in $profiles; do files+=("values-$gpu.yaml"); done
echo "==> generate values files"
for gpu in $profiles; do
  if [ -e "values-$gpu.yaml" ]; then
    # never over a file the user may have edited (docs/install-on-gke.md, step 2)
    echo "    values-$gpu.yaml exists: kept (delete it to write a fresh one)"
  else
    # a machine Google offers by reservation only (A4X) needs one named: a placeholder to replace
    reserve="$("$py" -c 'import sys
from generator.gke.profiles import profile
from generator.gke.provisioning import placeholder_reservation
r = placeholder_reservation(profile(sys.argv[1]))
print(f"--reservation={r}" if r else "")' "$gpu")"
    "$py" -m generator --gpu "$gpu" ${reserve:+"$reserve"} 2>&1 | sed 's/^/    /'
  fi
done
echo "==> validate"
"$py" -m generator validate "${files[@]}" | sed 's/^/    /'
echo "==> lint (helm lint --strict, both pinned Helm majors)"
for helm in .tools/helm/*/helm; do
  for f in "${files[@]}"; do
    "$helm" lint --strict charts/nemo-rl-gke -f "$f" >/dev/null
  done
  echo "    $("$helm" version --short): ok"
done
echo "==> render and validate every object"
"$py" -m generator render "${files[@]}" --out out | sed 's/^/    /'

cat <<'NEXT'

Done. Next, the cheapest proof that a cluster works: the quickstart, 1 GPU node, about 1
node-hour, no token needed (docs/install-on-gke.md has each step; on B200: --gpu b200, quickstart-b200):
  source .venv/bin/activate   # python -m generator, and the pinned Helm as `helm`
  python -m generator infra --gpu h200 --nodes 1 --project PROJECT --region REGION --zone ZONE -o infra.sh
  bash infra.sh     # lists what it creates and asks once; cluster, GPU pool, Lustre; writes values-infra.yaml
  python -m generator validate examples/quickstart-h200.yaml -f values-infra.yaml
  python -m generator doctor examples/quickstart-h200.yaml -f values-infra.yaml -n nemo-rl   # the live cluster, read-only
  helm install nemo-rl charts/nemo-rl-gke --namespace=nemo-rl -f examples/quickstart-h200.yaml -f values-infra.yaml
Then the tutorial's run (values-h200.yaml: Gemma 3 27B on 2 nodes, 30-50 node-hours): README.md.
NEXT
