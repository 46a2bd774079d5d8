#!/usr/bin/env bash
# Teardown of the GKE infrastructure for nemo-rl-gke: NVIDIA H200 141GB (a3-ultragpu-8g), Standard cluster.
# Written by: python -m generator infra --gpu h200 --project my-project --region us-central1 --zone us-central1-b --groups reserved=4:reservation:rl-reservation,spot=4:spot --kueue --topology preferred --teardown
# Regenerate instead of editing; names match the values file written with the same options.
# Deletes in the reverse order of the bring-up script, only what it created, and asks first unless --yes.
# Run: bash THIS_FILE [--dry-run | --execute]; --dry-run prints the commands.
set -euo pipefail

# --- settings ---
PROJECT='my-project'
REGION='us-central1'
ZONE='us-central1-b'
CLUSTER='nemo-rl'
CLUSTER_VPC='default'
OWNER_MARK='nemo-rl-gke infra: cluster nemo-rl'
OWNER_LABEL='nemo-rl-gke-infra=nemo-rl'
GVNIC_VPC='nemo-rl-gvnic-net'
GVNIC_SUBNET='nemo-rl-gvnic-sub'
GVNIC_FIREWALL='nemo-rl-gvnic-internal'
RDMA_VPC='nemo-rl-rdma-net'
RDMA_SUBNETS=(
  'nemo-rl-rdma-sub-0'
  'nemo-rl-rdma-sub-1'
  'nemo-rl-rdma-sub-2'
  'nemo-rl-rdma-sub-3'
  'nemo-rl-rdma-sub-4'
  'nemo-rl-rdma-sub-5'
  'nemo-rl-rdma-sub-6'
  'nemo-rl-rdma-sub-7'
)
LUSTRE_INSTANCE='nemo-rl-lustre'
LUSTRE_RANGE='nemo-rl-lustre-psa'
LUSTRE_FIREWALL='nemo-rl-lustre'

DRY_RUN=0
DRY_RUN_ASSUMES=present
ASSUME_YES=0
STEPS=6
CURRENT_STEP=''

# --- helpers ---
usage() {
  cat <<'EOF'
Usage: bash SCRIPT [--dry-run | --execute] [--yes]
  --dry-run   print the commands instead of running them
  --execute   run the commands
  --yes       delete without asking for confirmation
Default: --execute.
EOF
}

show() {  # show PREFIX CMD...: print CMD, shell-quoted, after PREFIX
  local prefix="$1"
  shift
  printf '%s' "$prefix"
  printf ' %q' "$@"
  printf '\n'
}

die() {
  printf 'error: %s\n' "$*" >&2
  exit 1
}

run() {  # run CMD...: print CMD, then run it (only print it with --dry-run)
  show '    +' "$@"
  if [ "$DRY_RUN" = 0 ]; then
    "$@"
  fi
}

exists() {  # exists CMD...: whether the describe/get CMD finds its resource
  if [ "$DRY_RUN" = 1 ]; then
    show '    ? check:' "$@"
    [ "$DRY_RUN_ASSUMES" = present ]
    return
  fi
  if "$@" >/dev/null 2>&1; then
    show '    = exists:' "$@"
    return 0
  fi
  return 1
}

query() {  # query NAME PLACEHOLDER CMD...: set NAME to the output of CMD (PLACEHOLDER with --dry-run)
  local query_name="$1" query_placeholder="$2" query_out
  shift 2
  if [ "$DRY_RUN" = 1 ]; then
    show '    ? read:' "$@"
    query_out="$query_placeholder"
  else
    query_out="$("$@")"
  fi
  printf -v "$query_name" '%s' "$query_out"
}

owned() {  # owned FORMAT WANT CMD...: whether the describe CMD prints WANT with --format=FORMAT (this script made it)
  local owned_format="$1" owned_want="$2" owned_out
  shift 2
  if [ "$DRY_RUN" = 1 ]; then
    show '    ? owner:' "$@" "--format=$owned_format"
    return 0
  fi
  owned_out="$("$@" --format="$owned_format" 2>/dev/null)" || return 1
  [ "$owned_out" = "$owned_want" ]
}

has_line() {  # has_line TEXT LINE: whether LINE is one of the lines of TEXT
  case $'\n'"$1"$'\n' in
    *$'\n'"$2"$'\n'*) return 0 ;;
  esac
  return 1
}

step() {  # step N TITLE
  CURRENT_STEP="$1/$STEPS, $2"
  printf '\n==> [%s/%s] %s\n' "$1" "$STEPS" "$2"
}

on_exit() {
  local rc=$?
  if [ "$rc" -ne 0 ] && [ -n "$CURRENT_STEP" ]; then
    printf '\nerror: stopped in step %s (exit %s). Fix the cause and run this script again: finished steps are skipped.\n' \
      "$CURRENT_STEP" "$rc" >&2
  fi
}

while [ "$#" -gt 0 ]; do
  case "$1" in
    --dry-run) DRY_RUN=1 ;;
    --execute) DRY_RUN=0 ;;
    --yes) ASSUME_YES=1 ;;
    -h | --help)
      usage
      exit 0
      ;;
    *)
      printf 'error: unknown argument %s (see --help)\n' "$1" >&2
      exit 2
      ;;
  esac
  shift
done
trap on_exit EXIT
if [ "$DRY_RUN" = 0 ]; then
  command -v gcloud >/dev/null 2>&1 || die "gcloud is not on PATH (install the Google Cloud CLI)"
fi

if [ "$DRY_RUN" = 0 ] && [ "$ASSUME_YES" = 0 ]; then
  cat <<EOF
This deletes, in project $PROJECT:
  - Managed Lustre instance $LUSTRE_INSTANCE in $ZONE, with all its data
  - private services access range $LUSTRE_RANGE (and its peering if nothing else uses it), firewall rule $LUSTRE_FIREWALL
  - GKE cluster $CLUSTER in $REGION, with everything running in it
  - VPC $RDMA_VPC and its ${#RDMA_SUBNETS[@]} subnets
  - VPC $GVNIC_VPC, its subnet $GVNIC_SUBNET and firewall rule $GVNIC_FIREWALL
  - VPC $CLUSTER_VPC
Each only if this script created it (it carries the mark "$OWNER_MARK" or the label $OWNER_LABEL);
anything else, such as a VPC that existed before, is kept.
EOF
  printf 'Delete all of this? Type yes to go on: '
  answer=''
  read -r answer || true
  case "$answer" in
    y | yes) ;;
    *)
      echo 'aborted: nothing was deleted' >&2
      exit 1
      ;;
  esac
fi

# --- steps ---
step 1 'Managed Lustre instance'
if exists gcloud lustre instances describe "$LUSTRE_INSTANCE" --project="$PROJECT" --location="$ZONE"; then
  if owned 'value(labels.nemo-rl-gke-infra)' "$CLUSTER" gcloud lustre instances describe "$LUSTRE_INSTANCE" --project="$PROJECT" --location="$ZONE"; then
    run gcloud lustre instances delete "$LUSTRE_INSTANCE" --project="$PROJECT" --location="$ZONE" --quiet
  else
    echo "    ! kept Managed Lustre instance $LUSTRE_INSTANCE: this script did not create it"
  fi
fi

step 2 'Managed Lustre: private services access'
keep_range=0
if exists gcloud compute addresses describe "$LUSTRE_RANGE" --global --project="$PROJECT" &&
  ! owned 'value(description)' "$OWNER_MARK" gcloud compute addresses describe "$LUSTRE_RANGE" --global --project="$PROJECT"; then
  echo "    ! kept range $LUSTRE_RANGE and its peering: this script did not create it"
  keep_range=1
fi
ranges=''
query ranges "$LUSTRE_RANGE" gcloud services vpc-peerings list --project="$PROJECT" --network="$CLUSTER_VPC" \
  --service=servicenetworking.googleapis.com --flatten=reservedPeeringRanges --format='value(reservedPeeringRanges)'
if [ "$keep_range" = 0 ] && [ "$ranges" = "$LUSTRE_RANGE" ]; then
  # Can be refused for a while after the instance is deleted; run the teardown again later.
  run gcloud services vpc-peerings delete --project="$PROJECT" --network="$CLUSTER_VPC" \
    --service=servicenetworking.googleapis.com --quiet
elif has_line "$ranges" "$LUSTRE_RANGE"; then
  echo "    ! the private services connection of $CLUSTER_VPC also serves other ranges: it and $LUSTRE_RANGE are kept"
  keep_range=1
fi
if exists gcloud compute firewall-rules describe "$LUSTRE_FIREWALL" --project="$PROJECT"; then
  if owned 'value(description)' "$OWNER_MARK" gcloud compute firewall-rules describe "$LUSTRE_FIREWALL" --project="$PROJECT"; then
    run gcloud compute firewall-rules delete "$LUSTRE_FIREWALL" --project="$PROJECT" --quiet
  else
    echo "    ! kept firewall rule $LUSTRE_FIREWALL: this script did not create it"
  fi
fi
if [ "$keep_range" = 0 ]; then
  if exists gcloud compute addresses describe "$LUSTRE_RANGE" --global --project="$PROJECT"; then
    if owned 'value(description)' "$OWNER_MARK" gcloud compute addresses describe "$LUSTRE_RANGE" --global --project="$PROJECT"; then
      run gcloud compute addresses delete "$LUSTRE_RANGE" --global --project="$PROJECT" --quiet
    else
      echo "    ! kept range $LUSTRE_RANGE: this script did not create it"
    fi
  fi
fi

step 3 'GKE cluster'
# With the cluster go everything inside it: the GPU node pools, the NCCL RDMA installer, the namespace, Kueue and its queues.
if exists gcloud container clusters describe "$CLUSTER" --project="$PROJECT" --location="$REGION"; then
  if owned 'value(resourceLabels.nemo-rl-gke-infra)' "$CLUSTER" gcloud container clusters describe "$CLUSTER" --project="$PROJECT" --location="$REGION"; then
    run gcloud container clusters delete "$CLUSTER" --project="$PROJECT" --location="$REGION" --quiet
  else
    echo "    ! kept cluster $CLUSTER: this script did not create it"
  fi
fi

step 4 'RoCE VPC and its RDMA subnets'
for (( i = ${#RDMA_SUBNETS[@]} - 1; i >= 0; i-- )); do
  if exists gcloud compute networks subnets describe "${RDMA_SUBNETS[$i]}" --project="$PROJECT" --region="$REGION"; then
    if owned 'value(description)' "$OWNER_MARK" gcloud compute networks subnets describe "${RDMA_SUBNETS[$i]}" --project="$PROJECT" --region="$REGION"; then
      run gcloud compute networks subnets delete "${RDMA_SUBNETS[$i]}" --project="$PROJECT" --region="$REGION" --quiet
    else
      echo "    ! kept subnet ${RDMA_SUBNETS[$i]}: this script did not create it"
    fi
  fi
done
if exists gcloud compute networks describe "$RDMA_VPC" --project="$PROJECT"; then
  if owned 'value(description)' "$OWNER_MARK" gcloud compute networks describe "$RDMA_VPC" --project="$PROJECT"; then
    run gcloud compute networks delete "$RDMA_VPC" --project="$PROJECT" --quiet
  else
    echo "    ! kept VPC $RDMA_VPC: this script did not create it"
  fi
fi

step 5 'gVNIC VPC, subnet and firewall'
if exists gcloud compute firewall-rules describe "$GVNIC_FIREWALL" --project="$PROJECT"; then
  if owned 'value(description)' "$OWNER_MARK" gcloud compute firewall-rules describe "$GVNIC_FIREWALL" --project="$PROJECT"; then
    run gcloud compute firewall-rules delete "$GVNIC_FIREWALL" --project="$PROJECT" --quiet
  else
    echo "    ! kept firewall rule $GVNIC_FIREWALL: this script did not create it"
  fi
fi
if exists gcloud compute networks subnets describe "$GVNIC_SUBNET" --project="$PROJECT" --region="$REGION"; then
  if owned 'value(description)' "$OWNER_MARK" gcloud compute networks subnets describe "$GVNIC_SUBNET" --project="$PROJECT" --region="$REGION"; then
    run gcloud compute networks subnets delete "$GVNIC_SUBNET" --project="$PROJECT" --region="$REGION" --quiet
  else
    echo "    ! kept subnet $GVNIC_SUBNET: this script did not create it"
  fi
fi
if exists gcloud compute networks describe "$GVNIC_VPC" --project="$PROJECT"; then
  if owned 'value(description)' "$OWNER_MARK" gcloud compute networks describe "$GVNIC_VPC" --project="$PROJECT"; then
    run gcloud compute networks delete "$GVNIC_VPC" --project="$PROJECT" --quiet
  else
    echo "    ! kept VPC $GVNIC_VPC: this script did not create it"
  fi
fi

step 6 'Cluster VPC'
# A VPC that existed before the bring-up (such as the project's default) carries no mark and stays.
if exists gcloud compute networks describe "$CLUSTER_VPC" --project="$PROJECT"; then
  if owned 'value(description)' "$OWNER_MARK" gcloud compute networks describe "$CLUSTER_VPC" --project="$PROJECT"; then
    run gcloud compute networks delete "$CLUSTER_VPC" --project="$PROJECT" --quiet
  else
    echo "    ! kept VPC $CLUSTER_VPC: this script did not create it"
  fi
fi

CURRENT_STEP=''
if [ "$DRY_RUN" = 1 ]; then
  printf '\nDry run: nothing was changed.\n'
else
  printf '\nTeardown complete.\n'
fi
