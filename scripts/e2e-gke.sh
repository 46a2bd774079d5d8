#!/usr/bin/env bash
# End-to-end test on a real Google Cloud project, for maintainers; never run by CI (it refuses when
# CI is set). It bills the project: about 1-1.5 hours of one GPU node (Spot) and a 9000 GiB
# Managed Lustre instance, plus the CPU node and the cluster fee (README: "End-to-end test").
#
#   scripts/e2e-gke.sh --project PROJECT [--gpu h200|b200] [--region R] [--zone Z] [--confirm PROJECT] [--keep]
#
# 1. python -m generator infra (1 GPU node, Spot) and the bring-up script it writes;
# 2. the quickstart values with the Lustre instance infra.sh made: validate, then doctor;
# 3. helm install, then status until step 2 with a mean reward above 0, then helm test;
# 4. helm uninstall, then the teardown script (also when a step fails, unless --keep).
# Asks for the project id again before it creates anything (or takes --confirm PROJECT).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  cat <<'EOF'
Usage: scripts/e2e-gke.sh --project PROJECT [options]
  --project P       the Google Cloud project to create everything in (required)
  --gpu G           h200 (default) or b200
  --region R        default us-central1
  --zone Z          default us-central1-b (must offer the GPU and Managed Lustre)
  --cluster NAME    default nemo-rl-e2e
  --confirm P       confirm without a prompt: must equal --project
  --keep            keep the cluster and everything else at the end (and on failure)
  --timeout MIN     minutes to wait for step 2 after helm install; default 120
Environment: E2E_DIR (default .cache/e2e-<time>) holds the scripts and logs.
EOF
}

die() {
  printf 'error: %s\n' "$*" >&2
  exit 2
}

project='' gpu='h200' region='us-central1' zone='us-central1-b' cluster='nemo-rl-e2e' confirm='' keep=0 timeout_min=120
while [ "$#" -gt 0 ]; do
  case "$1" in
    --project) project="${2:-}"; shift 2 ;;
    --gpu) gpu="${2:-}"; shift 2 ;;
    --region) region="${2:-}"; shift 2 ;;
    --zone) zone="${2:-}"; shift 2 ;;
    --cluster) cluster="${2:-}"; shift 2 ;;
    --confirm) confirm="${2:-}"; shift 2 ;;
    --keep) keep=1; shift ;;
    --timeout) timeout_min="${2:-}"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done

if [ -n "${CI:-}" ]; then
  die "CI is set: this script bills a real Google Cloud project and never runs in CI"
fi
if [ -z "$project" ]; then
  usage >&2
  die "--project is required: this script creates a GKE cluster, a GPU node and Managed Lustre in it"
fi
case "$gpu" in h200 | b200) ;; *) die "--gpu must be h200 or b200, not '$gpu'" ;; esac
case "$timeout_min" in '' | *[!0-9]*) die "--timeout must be a number of minutes" ;; esac

if [ -z "$confirm" ]; then
  if [ ! -t 0 ]; then
    die "no terminal to confirm on: pass --confirm $project"
  fi
  printf 'This creates a GKE cluster with 1 %s GPU node and a 9000 GiB Managed Lustre instance in project %s\n' "$gpu" "$project"
  printf '(about 1-1.5 hours, billed to the project). Type the project id to go on: '
  read -r confirm || true
fi
if [ "$confirm" != "$project" ]; then
  die "not confirmed ('$confirm' is not '$project'): nothing was created"
fi

PY=python3
if [ -x .venv/bin/python ]; then PY=.venv/bin/python; fi
"$PY" -c 'import kubernetes, generator' 2>/dev/null || die "the user's profile is not installed: run scripts/setup.sh --no-rehearse"
HELM="$("$PY" -c 'from generator.helm.runner import default_helm; print(default_helm().path)')" || die "pinned Helm missing: scripts/bootstrap.sh"
for tool in gcloud kubectl; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is not on PATH"
done

dir="${E2E_DIR:-.cache/e2e-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$dir"
release='nemo-rl'
namespace='nemo-rl'
infra_args=(--gpu "$gpu" --nodes 1 --project "$project" --region "$region" --zone "$zone" --cluster "$cluster"
  --namespace "$namespace" --values-out "$dir/values-infra.yaml")
started="$(date +%s)"

say() {
  printf '\n==> [%s] %s\n' "$(date +%H:%M:%S)" "$*"
}

teardown() {
  local rc=$?
  trap - EXIT
  if [ "$keep" = 1 ]; then
    say "kept (--keep): delete it all with: bash $dir/teardown.sh --yes"
    exit "$rc"
  fi
  say "helm uninstall, then the teardown script"
  "$HELM" uninstall "$release" --namespace "$namespace" --wait --timeout 15m >/dev/null 2>&1 || true
  if [ -f "$dir/teardown.sh" ]; then
    bash "$dir/teardown.sh" --yes 2>&1 | tee "$dir/teardown.log" || rc=1
  fi
  say "done in $(( ($(date +%s) - started) / 60 )) min; logs in $dir (exit $rc)"
  exit "$rc"
}

say "writing the bring-up and teardown scripts into $dir"
"$PY" -m generator infra "${infra_args[@]}" -o "$dir/infra.sh" --force
"$PY" -m generator infra "${infra_args[@]}" --teardown -o "$dir/teardown.sh" --force
trap teardown EXIT

say "bring-up (infra.sh): cluster, GPU pool, RDMA installer, Lustre"
bash "$dir/infra.sh" --execute --yes 2>&1 | tee "$dir/infra.log"  # you confirmed above

if [ ! -s "$dir/values-infra.yaml" ]; then
  die "infra.sh wrote no values overlay $dir/values-infra.yaml (see $dir/infra.log)"
fi
values=(-f "examples/quickstart-$gpu.yaml" -f "$dir/values-infra.yaml")

say "validate and doctor, with the values helm install gets"
"$PY" -m generator validate "${values[@]:1}"
"$PY" -m generator doctor "${values[@]:1}" --namespace "$namespace" | tee "$dir/doctor.log"

say "helm install $release"
"$HELM" install "$release" charts/nemo-rl-gke --namespace "$namespace" "${values[@]}" | tee "$dir/install.log"

say "status every minute until step 2 with a mean reward above 0 (at most $timeout_min min)"
deadline=$(( $(date +%s) + timeout_min * 60 ))
reached=''
while [ "$(date +%s)" -lt "$deadline" ]; do
  "$PY" -m generator status "$release" --namespace "$namespace" | tee -a "$dir/status.log" || true
  reached="$("$PY" -m generator status "$release" --namespace "$namespace" --format json 2>/dev/null | "$PY" -c '
import json, sys
p = (json.load(sys.stdin).get("progress") or {})
latest = p.get("latest") or {}
print("yes" if (p.get("step") or 0) >= 2 and (latest.get("reward") or 0) > 0 else "")
' || true)"
  if [ "$reached" = yes ]; then
    break
  fi
  sleep 60
done
if [ "$reached" != yes ]; then
  die "no step 2 with a reward above 0 within $timeout_min min (see $dir/status.log)"
fi

say "helm test $release"
"$HELM" test "$release" --namespace "$namespace" --logs | tee "$dir/helm-test.log"
say "end to end: PASS"
