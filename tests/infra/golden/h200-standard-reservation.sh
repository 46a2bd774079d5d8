#!/usr/bin/env bash
# Bring-up of the GKE infrastructure for nemo-rl-gke: NVIDIA H200 141GB (a3-ultragpu-8g), Standard cluster.
# Written by: python -m generator infra --gpu h200 --project my-project --region us-central1 --zone us-central1-b --provisioning reservation --reservation r1
# Regenerate instead of editing; names match the values file written with the same options.
# Safe to run again: every step checks what exists before it creates anything.
# Run: bash THIS_FILE [--dry-run | --execute]; --dry-run prints the commands.
set -euo pipefail

# --- settings ---
PROJECT='my-project'
REGION='us-central1'
ZONE='us-central1-b'
CLUSTER='nemo-rl'
CLUSTER_VPC='default'
CPU_MACHINE_TYPE='e2-standard-16'
MIN_GKE_VERSION='1.31.7-gke.1265000'
NODE_POOL='gpu-h200'
NODES='2'
MACHINE_TYPE='a3-ultragpu-8g'
ACCELERATOR='nvidia-h200-141gb'
GPUS_PER_NODE='8'
RESERVATION='r1'
GVNIC_VPC='nemo-rl-gvnic-net'
GVNIC_SUBNET='nemo-rl-gvnic-sub'
GVNIC_RANGE='192.168.0.0/24'
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
RDMA_RANGES=(
  '192.168.1.0/24'
  '192.168.2.0/24'
  '192.168.3.0/24'
  '192.168.4.0/24'
  '192.168.5.0/24'
  '192.168.6.0/24'
  '192.168.7.0/24'
  '192.168.8.0/24'
)
RDMA_INSTALLER_URL='https://raw.githubusercontent.com/GoogleCloudPlatform/container-engine-accelerators/refs/heads/master/gpudirect-rdma/nccl-rdma-installer.yaml'
RDMA_INSTALLER_NAMESPACE='kube-system'
BUCKET='my-project-nemo-rl'
BUCKET_ROLE='roles/storage.objectUser'
NAMESPACE='default'
KSA='nemo-rl-ksa'
LUSTRE_INSTANCE='nemo-rl-lustre'
LUSTRE_FS='lfs'
LUSTRE_CAPACITY_GIB='9000'
LUSTRE_THROUGHPUT='1000'
LUSTRE_RANGE='nemo-rl-lustre-psa'
LUSTRE_FIREWALL='nemo-rl-lustre'
APIS=(
  'compute.googleapis.com'
  'container.googleapis.com'
  'storage.googleapis.com'
  'servicenetworking.googleapis.com'
  'lustre.googleapis.com'
)

DRY_RUN=0
DRY_RUN_ASSUMES=missing
STEPS=13
CURRENT_STEP=''

# --- helpers ---
usage() {
  cat <<'EOF'
Usage: bash SCRIPT [--dry-run | --execute]
  --dry-run   print the commands instead of running them
  --execute   run the commands
  GKE_VERSION=V bash SCRIPT  creates the cluster at version V (default: the region's default)
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

has_line() {  # has_line TEXT LINE: whether LINE is one of the lines of TEXT
  case $'\n'"$1"$'\n' in
    *$'\n'"$2"$'\n'*) return 0 ;;
  esac
  return 1
}

require_min_version() {  # require_min_version VERSION MINIMUM
  if [ "$DRY_RUN" = 1 ]; then
    return 0
  fi
  [ -n "$1" ] || die "could not read the default GKE version of $REGION; set GKE_VERSION"
  local lowest
  lowest="$(printf '%s\n%s\n' "$1" "$2" | sort -V)"
  [ "${lowest%%$'\n'*}" = "$2" ] || die "GKE $1 is older than $2, the minimum for $ACCELERATOR; set GKE_VERSION to a newer version"
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
  command -v kubectl >/dev/null 2>&1 || die "kubectl is not on PATH (gcloud components install kubectl)"
fi

# --- steps ---
step 1 'Enable the Google Cloud APIs'
enabled=''
query enabled '' gcloud services list --enabled --project="$PROJECT" --format='value(config.name)'
missing=()
for api in "${APIS[@]}"; do
  has_line "$enabled" "$api" || missing+=("$api")
done
if [ "${#missing[@]}" -gt 0 ]; then
  run gcloud services enable "${missing[@]}" --project="$PROJECT"
else
  echo "    = all ${#APIS[@]} APIs are enabled"
fi

step 2 'gVNIC VPC, subnet and firewall (eth1)'
if ! exists gcloud compute networks describe "$GVNIC_VPC" --project="$PROJECT"; then
  run gcloud compute networks create "$GVNIC_VPC" --project="$PROJECT" --subnet-mode=custom
fi
if ! exists gcloud compute networks subnets describe "$GVNIC_SUBNET" --project="$PROJECT" --region="$REGION"; then
  run gcloud compute networks subnets create "$GVNIC_SUBNET" --project="$PROJECT" --region="$REGION" \
    --network="$GVNIC_VPC" --range="$GVNIC_RANGE"
fi
if ! exists gcloud compute firewall-rules describe "$GVNIC_FIREWALL" --project="$PROJECT"; then
  run gcloud compute firewall-rules create "$GVNIC_FIREWALL" --project="$PROJECT" --network="$GVNIC_VPC" \
    --action=ALLOW --rules=tcp:0-65535,udp:0-65535,icmp --source-ranges=192.168.0.0/16
fi

step 3 'RoCE VPC and its RDMA subnets (eth2..eth9)'
# The RoCE network profile is zonal: every RDMA NIC must be in $ZONE.
if ! exists gcloud compute networks describe "$RDMA_VPC" --project="$PROJECT"; then
  run gcloud compute networks create "$RDMA_VPC" --project="$PROJECT" --subnet-mode=custom \
    --network-profile="$ZONE-vpc-roce"
fi
for i in "${!RDMA_SUBNETS[@]}"; do
  if ! exists gcloud compute networks subnets describe "${RDMA_SUBNETS[$i]}" --project="$PROJECT" --region="$REGION"; then
    run gcloud compute networks subnets create "${RDMA_SUBNETS[$i]}" --project="$PROJECT" --region="$REGION" \
      --network="$RDMA_VPC" --range="${RDMA_RANGES[$i]}"
  fi
done

step 4 'GKE Standard cluster (multi-networking, Ray operator, Lustre CSI driver)'
# Legacy-port rule: GKE reaches a Managed Lustre instance created with --gke-support-enabled (the
# Lustre step below creates one) only when the cluster's Lustre CSI driver runs with
# --enable-legacy-lustre-port (LNet on port 6988; port 988 clashes with the gke-metadata-server).
if ! exists gcloud container clusters describe "$CLUSTER" --project="$PROJECT" --location="$REGION"; then
  # The region's default GKE version, unless GKE_VERSION is set; it must not be older than
  # the accelerator's minimum.
  cluster_version="${GKE_VERSION:-}"
  if [ -z "$cluster_version" ]; then
    query cluster_version DEFAULT_GKE_VERSION gcloud container get-server-config --project="$PROJECT" \
      --location="$REGION" --format='value(defaultClusterVersion)'
  fi
  require_min_version "$cluster_version" "$MIN_GKE_VERSION"
  run gcloud container clusters create "$CLUSTER" \
    --project="$PROJECT" \
    --location="$REGION" \
    --node-locations="$ZONE" \
    --cluster-version="$cluster_version" \
    --network="$CLUSTER_VPC" \
    --enable-dataplane-v2 \
    --enable-ip-alias \
    --enable-multi-networking \
    --addons=RayOperator,LustreCsiDriver \
    --enable-legacy-lustre-port \
    --workload-pool="$PROJECT.svc.id.goog" \
    --machine-type="$CPU_MACHINE_TYPE" \
    --num-nodes=1
fi

step 5 'Cluster credentials for kubectl'
run gcloud container clusters get-credentials "$CLUSTER" --project="$PROJECT" --location="$REGION"

step 6 'GPU node pool'
# Fixed at $NODES nodes, not autoscaled: a reservation is billed at the on-demand rate until it is
# deleted, whether or not VMs use it, and a VM that consumes it costs nothing more (only its disks).
# Removing idle nodes would save almost nothing; kept up, they keep the image pulled. To stop paying
# for the GPUs, delete the reservation.
# https://docs.cloud.google.com/compute/docs/instances/reservations-overview#reservation-billing
# eth1 on the gVNIC VPC, eth2..eth9 on the RoCE subnets: the same names as network.* in the values file.
if ! exists gcloud container node-pools describe "$NODE_POOL" --project="$PROJECT" --cluster="$CLUSTER" \
    --location="$REGION"; then
  run gcloud container node-pools create "$NODE_POOL" \
    --project="$PROJECT" \
    --cluster="$CLUSTER" \
    --location="$REGION" \
    --node-locations="$ZONE" \
    --machine-type="$MACHINE_TYPE" \
    --accelerator="type=$ACCELERATOR,count=$GPUS_PER_NODE,gpu-driver-version=latest" \
    --additional-node-network="network=$GVNIC_VPC,subnetwork=$GVNIC_SUBNET" \
    --additional-node-network="network=$RDMA_VPC,subnetwork=${RDMA_SUBNETS[0]}" \
    --additional-node-network="network=$RDMA_VPC,subnetwork=${RDMA_SUBNETS[1]}" \
    --additional-node-network="network=$RDMA_VPC,subnetwork=${RDMA_SUBNETS[2]}" \
    --additional-node-network="network=$RDMA_VPC,subnetwork=${RDMA_SUBNETS[3]}" \
    --additional-node-network="network=$RDMA_VPC,subnetwork=${RDMA_SUBNETS[4]}" \
    --additional-node-network="network=$RDMA_VPC,subnetwork=${RDMA_SUBNETS[5]}" \
    --additional-node-network="network=$RDMA_VPC,subnetwork=${RDMA_SUBNETS[6]}" \
    --additional-node-network="network=$RDMA_VPC,subnetwork=${RDMA_SUBNETS[7]}" \
    --num-nodes="$NODES" \
    --reservation-affinity=specific \
    --reservation="$RESERVATION"
fi

step 7 'NCCL RDMA installer'
# Google's NCCL RDMA installer DaemonSet (gIB plugin into /home/kubernetes/bin/gib on GPU nodes).
if ! exists kubectl get daemonset nccl-rdma-installer --namespace="$RDMA_INSTALLER_NAMESPACE"; then
  run kubectl apply -f "$RDMA_INSTALLER_URL"
fi
# The GKE Network and GKENetworkParamSet objects (gvnic-1, rdma-0..rdma-7) are not created here:
# the Helm chart renders them from network.* in the values file (network.createObjects), which
# holds the same VPC and subnet names as this script. One owner keeps them from drifting.

step 8 'Cloud Storage bucket'
if ! exists gcloud storage buckets describe "gs://$BUCKET" --project="$PROJECT"; then
  run gcloud storage buckets create "gs://$BUCKET" --project="$PROJECT" --location="$REGION" \
    --uniform-bucket-level-access --enable-hierarchical-namespace
fi

step 9 'Kubernetes service account'
if ! exists kubectl get namespace "$NAMESPACE"; then
  run kubectl create namespace "$NAMESPACE"
fi
if ! exists kubectl get serviceaccount "$KSA" --namespace="$NAMESPACE"; then
  run kubectl create serviceaccount "$KSA" --namespace="$NAMESPACE"
fi

step 10 'Workload Identity: bucket access for the service account'
# Workload Identity Federation: the Kubernetes service account itself is the IAM principal.
project_number=''
query project_number PROJECT_NUMBER gcloud projects describe "$PROJECT" --format='value(projectNumber)'
member="principal://iam.googleapis.com/projects/$project_number/locations/global/workloadIdentityPools/$PROJECT.svc.id.goog/subject/ns/$NAMESPACE/sa/$KSA"
bindings=''
query bindings '' gcloud storage buckets get-iam-policy "gs://$BUCKET" --project="$PROJECT" \
  --flatten='bindings[].members' --format='csv[no-heading](bindings.role,bindings.members)'
if has_line "$bindings" "$BUCKET_ROLE,$member"; then
  echo "    = $member has $BUCKET_ROLE on gs://$BUCKET"
else
  run gcloud storage buckets add-iam-policy-binding "gs://$BUCKET" --project="$PROJECT" \
    --member="$member" --role="$BUCKET_ROLE"
fi

step 11 'Managed Lustre: private services access'
# Private services access on the cluster's VPC: Managed Lustre takes its addresses from this range.
if ! exists gcloud compute addresses describe "$LUSTRE_RANGE" --global --project="$PROJECT"; then
  run gcloud compute addresses create "$LUSTRE_RANGE" --global --project="$PROJECT" --purpose=VPC_PEERING \
    --prefix-length=20 --network="$CLUSTER_VPC" --description='Managed Lustre private services access'
fi
if ! exists gcloud compute firewall-rules describe "$LUSTRE_FIREWALL" --project="$PROJECT"; then
  cidr=''
  query cidr RANGE_CIDR gcloud compute addresses describe "$LUSTRE_RANGE" --global --project="$PROJECT" \
    --format='value[separator=/](address,prefixLength)'
  run gcloud compute firewall-rules create "$LUSTRE_FIREWALL" --project="$PROJECT" --network="$CLUSTER_VPC" \
    --allow=tcp:988,tcp:6988 --source-ranges="$cidr"
fi
ranges=''
query ranges '' gcloud services vpc-peerings list --project="$PROJECT" --network="$CLUSTER_VPC" \
  --service=servicenetworking.googleapis.com --flatten=reservedPeeringRanges --format='value(reservedPeeringRanges)'
if has_line "$ranges" "$LUSTRE_RANGE"; then
  echo "    = $LUSTRE_RANGE is peered with servicenetworking.googleapis.com"
elif [ -z "$ranges" ]; then
  run gcloud services vpc-peerings connect --project="$PROJECT" --network="$CLUSTER_VPC" \
    --service=servicenetworking.googleapis.com --ranges="$LUSTRE_RANGE"
else
  # The VPC already has a private services connection: keep its ranges and add ours.
  run gcloud services vpc-peerings update --project="$PROJECT" --network="$CLUSTER_VPC" \
    --service=servicenetworking.googleapis.com --ranges="${ranges//$'\n'/,},$LUSTRE_RANGE"
fi

step 12 'Managed Lustre instance'
# In the GPU nodes' zone, on the cluster's VPC. --gke-support-enabled moves Lustre to port 6988,
# hence --enable-legacy-lustre-port on the cluster.
if ! exists gcloud lustre instances describe "$LUSTRE_INSTANCE" --project="$PROJECT" --location="$ZONE"; then
  run gcloud lustre instances create "$LUSTRE_INSTANCE" --project="$PROJECT" --location="$ZONE" \
    --network="projects/$PROJECT/global/networks/$CLUSTER_VPC" \
    --capacity-gib="$LUSTRE_CAPACITY_GIB" --per-unit-storage-throughput="$LUSTRE_THROUGHPUT" \
    --filesystem="$LUSTRE_FS" --gke-support-enabled
fi

step 13 'Values for the chart'
mount_point=''
query mount_point "LUSTRE_IP@tcp:/$LUSTRE_FS" gcloud lustre instances describe "$LUSTRE_INSTANCE" \
  --project="$PROJECT" --location="$ZONE" --format='value(mountPoint)'
case "$mount_point" in
  *@tcp:/*) ;;
  *) die "unexpected mountPoint '$mount_point' of Lustre instance $LUSTRE_INSTANCE (want IP@tcp:/FILESYSTEM)" ;;
esac
lustre_ip="${mount_point%%@*}"
lustre_fs="${mount_point##*:/}"
cat <<EOF

storage.lustre values for the chart:
  volumeHandle: $PROJECT/$ZONE/$LUSTRE_INSTANCE
  ip:           $lustre_ip
  filesystem:   $lustre_fs

Next: write the values file, then install the chart with these values:
  python -m generator --gpu h200 --nodes 2 --provisioning reservation --reservation r1
  helm install nemo-rl charts/nemo-rl-gke -f values-h200.yaml --namespace=$NAMESPACE \\
    --set storage.lustre.volumeHandle=$PROJECT/$ZONE/$LUSTRE_INSTANCE \\
    --set storage.lustre.ip=$lustre_ip \\
    --set storage.lustre.filesystem=$lustre_fs \\
    --set storage.lustre.capacity=${LUSTRE_CAPACITY_GIB}Gi \\
    --set serviceAccount.create=false --set serviceAccount.name=$KSA
EOF

CURRENT_STEP=''
if [ "$DRY_RUN" = 1 ]; then
  printf '\nDry run: nothing was changed.\n'
else
  printf '\nBring-up complete.\n'
fi
