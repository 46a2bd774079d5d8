#!/usr/bin/env bash
# Bring-up of the GKE infrastructure for nemo-rl-gke: NVIDIA H200 141GB (a3-ultragpu-8g), Standard cluster.
# Written by: python -m generator infra --gpu h200 --project my-project --region us-central1 --zone us-central1-b --groups reserved=4:reservation:rl-reservation,spot=4:spot --kueue --topology preferred
# Regenerate instead of editing; names match the values file written with the same options.
# Safe to run again: every step checks what exists before it creates anything.
# Lists what it creates and asks first on a terminal; --yes skips the question; without either it refuses.
# Run: bash THIS_FILE [--dry-run | --execute]; --dry-run prints the commands.
set -euo pipefail

# --- settings ---
PROJECT='my-project'
REGION='us-central1'
ZONE='us-central1-b'
CLUSTER='nemo-rl'
CLUSTER_VPC='default'
LUSTRE_MTU='8896'
OWNER_MARK='nemo-rl-gke infra: cluster nemo-rl'
OWNER_LABEL='nemo-rl-gke-infra=nemo-rl'
CPU_MACHINE_TYPE='e2-standard-16'
MIN_GKE_VERSION='1.33.2-gke.4655000'
MIN_GKE_FOR='Lustre on port 988 without the deprecated legacy port'
MACHINE_TYPE='a3-ultragpu-8g'
ACCELERATOR='nvidia-h200-141gb'
GPUS_PER_NODE='8'
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
RDMA_INSTALLER_URL='https://raw.githubusercontent.com/GoogleCloudPlatform/container-engine-accelerators/2da1c92ff7bd772a2c833710bb6c21dcfe6dfaae/gpudirect-rdma/nccl-rdma-installer.yaml'
RDMA_INSTALLER_NAMESPACE='kube-system'
NAMESPACE='nemo-rl'
KUEUE_MANIFEST='https://github.com/kubernetes-sigs/kueue/releases/download/v0.19.2/manifests.yaml'
KUEUE_QUEUE='gpu-queue'
KUEUE_CLUSTER_QUEUE='nemo-rl'
LUSTRE_INSTANCE='nemo-rl-lustre'
LUSTRE_FS='lfs'
LUSTRE_CAPACITY_GIB='9000'
LUSTRE_THROUGHPUT='1000'
LUSTRE_RANGE='nemo-rl-lustre-psa'
LUSTRE_FIREWALL='nemo-rl-lustre'
VALUES_OUT='values-infra.yaml'
APIS=(
  'compute.googleapis.com'
  'container.googleapis.com'
  'servicenetworking.googleapis.com'
  'lustre.googleapis.com'
)

DRY_RUN=0
DRY_RUN_ASSUMES=missing
ASSUME_YES=0
STEPS=17
CURRENT_STEP=''

# --- helpers ---
usage() {
  cat <<'EOF'
Usage: bash SCRIPT [--dry-run | --execute] [--yes]
  --dry-run   print the commands instead of running them
  --execute   run the commands
  --yes       create without asking (needed without a terminal)
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

require_min_version() {  # require_min_version VERSION MINIMUM WHAT FIX: stop unless VERSION >= MINIMUM
  if [ "$DRY_RUN" = 1 ]; then
    return 0
  fi
  [ -n "$1" ] || die "could not read the GKE version of cluster $CLUSTER or the default of $REGION; set GKE_VERSION"
  local lowest
  lowest="$(printf '%s\n%s\n' "$1" "$2" | sort -V)"
  [ "${lowest%%$'\n'*}" = "$2" ] || die "$3 $2, the minimum for $MIN_GKE_FOR: $4"
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
  command -v kubectl >/dev/null 2>&1 || die "kubectl is not on PATH (gcloud components install kubectl)"
fi

if [ "$DRY_RUN" = 0 ] && [ "$ASSUME_YES" = 0 ]; then
  if [ ! -t 0 ]; then
    die 'no terminal to ask on, and no --yes: nothing was created.' \
      'See what this script creates with --dry-run, then run it with --yes'
  fi
  cat <<EOF
This creates, in project $PROJECT, whatever of the following is missing (each step checks first):
  - the Compute Engine, GKE, Service Networking and Managed Lustre APIs
  - VPC $CLUSTER_VPC (MTU $LUSTRE_MTU, auto subnets) unless it exists; VPC $GVNIC_VPC with one subnet and a firewall rule; VPC $RDMA_VPC (RoCE) with ${#RDMA_SUBNETS[@]} subnets: no charge of their own
  - GKE Standard cluster $CLUSTER in $REGION: USD 0.10 per hour (GKE's cluster management fee, https://cloud.google.com/kubernetes-engine/pricing); one $CPU_MACHINE_TYPE CPU node, price: https://cloud.google.com/compute/vm-instance-pricing
  - GPU node pool gpu-h200-reserved: 4 x a3-ultragpu-8g (8 x NVIDIA H200 141GB), from the reservation, billed with it (at the on-demand rate) whether used or not
  - GPU node pool gpu-h200-spot: 0 to 4 x a3-ultragpu-8g (8 x NVIDIA H200 141GB), Spot, 0 nodes until the worker pods ask, billed while they run; price: https://cloud.google.com/spot-vms/pricing
  - NCCL RDMA installer (gIB v1.1.1) and namespace $NAMESPACE (Pod Security enforce=privileged)
  - Kueue v0.19.2, its ClusterQueue $KUEUE_CLUSTER_QUEUE and LocalQueue $KUEUE_QUEUE
  - private services access range $LUSTRE_RANGE on $CLUSTER_VPC and a firewall rule for Lustre (port 988)
  - Managed Lustre $LUSTRE_INSTANCE in $ZONE: $LUSTRE_CAPACITY_GIB GiB at $LUSTRE_THROUGHPUT MB/s per TiB, billed per GiB until it is deleted; price: https://cloud.google.com/products/calculator
EOF
  printf 'Create what is missing? Type yes to go on: '
  answer=''
  read -r answer || true
  case "$answer" in
    y | yes) ;;
    *)
      echo 'aborted: nothing was created' >&2
      exit 1
      ;;
  esac
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

step 2 'GPU quota'
# GPUs each quota metric needs: PREEMPTIBLE_NVIDIA_H200_GPUS: 32
need_gpus() {  # need_gpus METRIC COUNT: stop unless the region's quota has COUNT GPUs left
  local line limit usage
  query line "$2 0" gcloud compute regions describe "$REGION" --project="$PROJECT" --flatten=quotas \
    --filter="quotas.metric=$1" --format='value(quotas.limit,quotas.usage)'
  if [ -z "$line" ]; then
    echo "    ! $REGION shows no quota $1: not checked"
    return 0
  fi
  read -r limit usage <<<"$line"
  limit="${limit%.*}"
  usage="${usage%.*}"
  if [ $((limit - usage)) -lt "$2" ]; then
    die "quota $1 in $REGION has $((limit - usage)) GPUs left ($usage of $limit used), the GPU pools need up to $2:" \
      "request more (IAM & Admin > Quotas), then run this script again"
  fi
  echo "    = quota $1: $((limit - usage)) of $limit GPUs left, up to $2 needed"
}
need_gpus PREEMPTIBLE_NVIDIA_H200_GPUS 32

step 3 'Cluster VPC (eth0, Managed Lustre)'
# The cluster's VPC (eth0 of every node) and Managed Lustre's. Created when missing, with the MTU
# Managed Lustre's documentation recommends (8896, about 10% more throughput) and auto-mode subnets.
if ! exists gcloud compute networks describe "$CLUSTER_VPC" --project="$PROJECT"; then
  run gcloud compute networks create "$CLUSTER_VPC" --project="$PROJECT" --subnet-mode=auto --mtu="$LUSTRE_MTU" \
    --description="$OWNER_MARK"
else
  mtu=''
  query mtu "$LUSTRE_MTU" gcloud compute networks describe "$CLUSTER_VPC" --project="$PROJECT" --format='value(mtu)'
  if [ "${mtu:-1460}" != "$LUSTRE_MTU" ]; then
    echo "    ! $CLUSTER_VPC has MTU ${mtu:-1460}; Managed Lustre recommends $LUSTRE_MTU (kept: changing it affects every VM on it)"
  fi
  subnets=''
  query subnets "$CLUSTER_VPC" gcloud compute networks subnets list --project="$PROJECT" --network="$CLUSTER_VPC" \
    --regions="$REGION" --format='value(name)'
  [ -n "$subnets" ] || die "VPC $CLUSTER_VPC has no subnet in $REGION: add one, or choose another --network"
fi

step 4 'gVNIC VPC, subnet and firewall (eth1)'
if ! exists gcloud compute networks describe "$GVNIC_VPC" --project="$PROJECT"; then
  run gcloud compute networks create "$GVNIC_VPC" --project="$PROJECT" --subnet-mode=custom --description="$OWNER_MARK"
fi
if ! exists gcloud compute networks subnets describe "$GVNIC_SUBNET" --project="$PROJECT" --region="$REGION"; then
  run gcloud compute networks subnets create "$GVNIC_SUBNET" --project="$PROJECT" --region="$REGION" \
    --network="$GVNIC_VPC" --range="$GVNIC_RANGE" --description="$OWNER_MARK"
fi
if ! exists gcloud compute firewall-rules describe "$GVNIC_FIREWALL" --project="$PROJECT"; then
  run gcloud compute firewall-rules create "$GVNIC_FIREWALL" --project="$PROJECT" --network="$GVNIC_VPC" \
    --action=ALLOW --rules=tcp:0-65535,udp:0-65535,icmp --source-ranges=192.168.0.0/16 --description="$OWNER_MARK"
fi

step 5 'RoCE VPC and its RDMA subnets (eth2..eth9)'
# The RoCE network profile is zonal: every RDMA NIC must be in $ZONE.
if ! exists gcloud compute networks describe "$RDMA_VPC" --project="$PROJECT"; then
  run gcloud compute networks create "$RDMA_VPC" --project="$PROJECT" --subnet-mode=custom \
    --network-profile="$ZONE-vpc-roce" --description="$OWNER_MARK"
fi
for i in "${!RDMA_SUBNETS[@]}"; do
  if ! exists gcloud compute networks subnets describe "${RDMA_SUBNETS[$i]}" --project="$PROJECT" --region="$REGION"; then
    run gcloud compute networks subnets create "${RDMA_SUBNETS[$i]}" --project="$PROJECT" --region="$REGION" \
      --network="$RDMA_VPC" --range="${RDMA_RANGES[$i]}" --description="$OWNER_MARK"
  fi
done

step 6 'GKE version floor'
# The GKE version must not be older than the highest floor of what this cluster uses:
#   1.31.7-gke.1265000  a3-ultragpu-8g with GPUDirect RDMA (generator/gke/profiles.py)
#   1.33.2-gke.1111000  the Managed Lustre CSI driver (https://docs.cloud.google.com/kubernetes-engine/docs/concepts/managed-lustre)
#   1.33.2-gke.4655000  Lustre on port 988 without the deprecated legacy port (https://docs.cloud.google.com/python/docs/reference/container/latest/google.cloud.container_v1.types.LustreCsiDriverConfig)
# An existing cluster's control plane version; for a new one GKE_VERSION, else the region's default.
cluster_version=''
if exists gcloud container clusters describe "$CLUSTER" --project="$PROJECT" --location="$REGION"; then
  query cluster_version EXISTING_GKE_VERSION gcloud container clusters describe "$CLUSTER" --project="$PROJECT" \
    --location="$REGION" --format='value(currentMasterVersion)'
  require_min_version "$cluster_version" "$MIN_GKE_VERSION" "cluster $CLUSTER runs GKE $cluster_version, older than" \
    "upgrade it (gcloud container clusters upgrade) or delete it"
else
  cluster_version="${GKE_VERSION:-}"
  if [ -z "$cluster_version" ]; then
    query cluster_version DEFAULT_GKE_VERSION gcloud container get-server-config --project="$PROJECT" \
      --location="$REGION" --format='value(defaultClusterVersion)'
  fi
  require_min_version "$cluster_version" "$MIN_GKE_VERSION" "GKE $cluster_version is older than" \
    "set GKE_VERSION to a newer version"
fi
echo "    = GKE $cluster_version: not older than $MIN_GKE_VERSION ($MIN_GKE_FOR)"

step 7 'GKE Standard cluster (multi-networking, Ray operator, Lustre CSI driver)'
# Lustre on its own port 988: from GKE 1.33.2-gke.4655000 the Lustre CSI driver needs neither the
# instance's --gke-support-enabled nor the cluster's --enable-legacy-lustre-port, which GKE marks
# deprecated; the GKE version floor step keeps the cluster at or past that version.
# --addons replaces GKE's default add-on list, so the two defaults (HTTP load balancing, Horizontal
# Pod Autoscaling) are named beside the Ray operator and the Lustre CSI driver.
if ! exists gcloud container clusters describe "$CLUSTER" --project="$PROJECT" --location="$REGION"; then
  run gcloud container clusters create "$CLUSTER" \
    --project="$PROJECT" \
    --location="$REGION" \
    --node-locations="$ZONE" \
    --cluster-version="$cluster_version" \
    --network="$CLUSTER_VPC" \
    --enable-dataplane-v2 \
    --enable-ip-alias \
    --enable-multi-networking \
    --addons=HttpLoadBalancing,HorizontalPodAutoscaling,RayOperator,LustreCsiDriver \
    --workload-pool="$PROJECT.svc.id.goog" \
    --machine-type="$CPU_MACHINE_TYPE" \
    --num-nodes=1 \
    --labels="$OWNER_LABEL"
fi

step 8 'Cluster credentials for kubectl'
run gcloud container clusters get-credentials "$CLUSTER" --project="$PROJECT" --location="$REGION"

step 9 'GPU node pool gpu-h200-reserved'
# Worker group reserved: reservation.
# Fixed at 4 nodes, not autoscaled: a reservation is billed at the on-demand rate until it is
# deleted, whether or not VMs use it, and a VM that consumes it costs nothing more (only its disks).
# Removing idle nodes would save almost nothing; kept up, they keep the image pulled. To stop paying
# for the GPUs, delete the reservation.
# https://docs.cloud.google.com/compute/docs/instances/reservations-overview#reservation-billing
# eth1 on the gVNIC VPC, eth2..eth9 on the RoCE subnets: the same names as network.* in the values file.
if ! exists gcloud container node-pools describe gpu-h200-reserved --project="$PROJECT" --cluster="$CLUSTER" \
    --location="$REGION"; then
  run gcloud container node-pools create gpu-h200-reserved \
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
    --num-nodes=4 \
    --reservation-affinity=specific \
    --reservation=rl-reservation
fi

step 10 'GPU node pool gpu-h200-spot'
# Worker group spot: spot.
# Autoscaled from 0 to 4 nodes: the cluster autoscaler adds GPU nodes when the chart's worker
# pods cannot be scheduled and removes a node after it has been unneeded for about 10 minutes, so no
# GPU node is billed before `helm install` or after the worker pods are gone. Location policy ANY
# requires autoscaling and 0 initial nodes. The cluster keeps GKE's default autoscaling profile.
# https://docs.cloud.google.com/kubernetes-engine/docs/concepts/cluster-autoscaler
# https://github.com/kubernetes/autoscaler/blob/master/cluster-autoscaler/FAQ.md#how-does-scale-down-work
# eth1 on the gVNIC VPC, eth2..eth9 on the RoCE subnets: the same names as network.* in the values file.
if ! exists gcloud container node-pools describe gpu-h200-spot --project="$PROJECT" --cluster="$CLUSTER" \
    --location="$REGION"; then
  run gcloud container node-pools create gpu-h200-spot \
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
    --spot \
    --enable-autoscaling \
    --num-nodes=0 \
    --total-min-nodes=0 \
    --total-max-nodes=4 \
    --location-policy=ANY
fi

step 11 'NCCL RDMA installer'
# Google's NCCL RDMA installer DaemonSet (gIB into /home/kubernetes/bin/gib on GPU nodes), from
# GoogleCloudPlatform/container-engine-accelerators at a pinned commit (--rdma-installer-commit),
# never from a moving branch: at the default commit it runs gIB v1.1.1.
if ! exists kubectl get daemonset nccl-rdma-installer --namespace="$RDMA_INSTALLER_NAMESPACE"; then
  run kubectl apply -f "$RDMA_INSTALLER_URL"
fi
# The GKE Network and GKENetworkParamSet objects (gvnic-1, rdma-0..rdma-7) are not created here:
# the Helm chart renders them from network.* in the values file (network.createObjects), which
# holds the same VPC and subnet names as this script. One owner keeps them from drifting.

step 12 'Namespace and its Pod Security level'
# The release's namespace, at the Pod Security level the chart needs: the GPU workers mount the
# NVIDIA driver and gIB from the node (hostPath), which the baseline level forbids, so enforce
# privileged; warn and audit at baseline report just those two volumes.
if ! exists kubectl get namespace "$NAMESPACE"; then
  run kubectl create namespace "$NAMESPACE"
fi
level=''
query level '' kubectl get namespace "$NAMESPACE" -o jsonpath='{.metadata.labels.pod-security\.kubernetes\.io/enforce}'
if [ "$level" != privileged ]; then
  run kubectl label namespace "$NAMESPACE" --overwrite pod-security.kubernetes.io/enforce=privileged \
    pod-security.kubernetes.io/warn=baseline pod-security.kubernetes.io/audit=baseline
else
  echo "    = $NAMESPACE enforces the privileged Pod Security level"
fi

step 13 Kueue
# Kueue v0.19.2 (its release manifests, server-side as its documentation applies them).
if ! exists kubectl get deployment kueue-controller-manager --namespace=kueue-system; then
  run kubectl apply --server-side -f "$KUEUE_MANIFEST"
fi
run kubectl wait deployment/kueue-controller-manager --namespace=kueue-system --for=condition=Available --timeout=300s

step 14 'Kueue queues'
# The queue the chart's RayCluster waits in (kueue.queueName: $KUEUE_QUEUE): flavors cpu, h200-reservation-rl-reservation, h200-spot; topology gke-default over cloud.google.com/gce-topology-block, cloud.google.com/gce-topology-subblock, cloud.google.com/gce-topology-host, kubernetes.io/hostname.
if ! exists kubectl get clusterqueue "$KUEUE_CLUSTER_QUEUE"; then
  kueue_config="$(
    cat <<'EOF'
apiVersion: kueue.x-k8s.io/v1beta2
kind: Topology
metadata:
  name: gke-default
spec:
  levels:
  - nodeLabel: cloud.google.com/gce-topology-block
  - nodeLabel: cloud.google.com/gce-topology-subblock
  - nodeLabel: cloud.google.com/gce-topology-host
  - nodeLabel: kubernetes.io/hostname
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: cpu
spec: {}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: h200-reservation-rl-reservation
spec:
  nodeLabels:
    cloud.google.com/gke-accelerator: nvidia-h200-141gb
    cloud.google.com/reservation-name: rl-reservation
    cloud.google.com/reservation-affinity: specific
  topologyName: gke-default
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: h200-spot
spec:
  nodeLabels:
    cloud.google.com/gke-accelerator: nvidia-h200-141gb
    cloud.google.com/gke-spot: 'true'
  topologyName: gke-default
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: nemo-rl
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources:
    - cpu
    - memory
    - nvidia.com/gpu
    flavors:
    - name: cpu
      resources:
      - name: cpu
        nominalQuota: '64'
      - name: memory
        nominalQuota: 256Gi
      - name: nvidia.com/gpu
        nominalQuota: '0'
    - name: h200-reservation-rl-reservation
      resources:
      - name: cpu
        nominalQuota: '896'
      - name: memory
        nominalQuota: 11808Gi
      - name: nvidia.com/gpu
        nominalQuota: '32'
    - name: h200-spot
      resources:
      - name: cpu
        nominalQuota: '896'
      - name: memory
        nominalQuota: 11808Gi
      - name: nvidia.com/gpu
        nominalQuota: '32'
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata:
  name: gpu-queue
  namespace: nemo-rl
spec:
  clusterQueue: nemo-rl
EOF
  )"
  if [ "$DRY_RUN" = 1 ]; then
    printf '%s\n' "$kueue_config" | sed 's/^/      | /'
  fi
  run kubectl apply -f - <<<"$kueue_config"
fi

step 15 'Managed Lustre: private services access'
# Private services access on the cluster's VPC: Managed Lustre takes its addresses from this range.
if ! exists gcloud compute addresses describe "$LUSTRE_RANGE" --global --project="$PROJECT"; then
  run gcloud compute addresses create "$LUSTRE_RANGE" --global --project="$PROJECT" --purpose=VPC_PEERING \
    --prefix-length=20 --network="$CLUSTER_VPC" --description="$OWNER_MARK"
fi
if ! exists gcloud compute firewall-rules describe "$LUSTRE_FIREWALL" --project="$PROJECT"; then
  cidr=''
  query cidr RANGE_CIDR gcloud compute addresses describe "$LUSTRE_RANGE" --global --project="$PROJECT" \
    --format='value[separator=/](address,prefixLength)'
  run gcloud compute firewall-rules create "$LUSTRE_FIREWALL" --project="$PROJECT" --network="$CLUSTER_VPC" \
    --allow=tcp:988 --source-ranges="$cidr" --description="$OWNER_MARK"
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

step 16 'Managed Lustre instance'
# In the GPU nodes' zone, on the cluster's VPC, on Lustre's own port (no --gke-support-enabled).
if ! exists gcloud lustre instances describe "$LUSTRE_INSTANCE" --project="$PROJECT" --location="$ZONE"; then
  run gcloud lustre instances create "$LUSTRE_INSTANCE" --project="$PROJECT" --location="$ZONE" \
    --network="projects/$PROJECT/global/networks/$CLUSTER_VPC" \
    --capacity-gib="$LUSTRE_CAPACITY_GIB" --per-unit-storage-throughput="$LUSTRE_THROUGHPUT" \
    --filesystem="$LUSTRE_FS" --description="$OWNER_MARK" --labels="$OWNER_LABEL"
fi

step 17 'Values overlay for the chart'
mount_point=''
query mount_point "LUSTRE_IP@tcp:/$LUSTRE_FS" gcloud lustre instances describe "$LUSTRE_INSTANCE" \
  --project="$PROJECT" --location="$ZONE" --format='value(mountPoint)'
case "$mount_point" in
  *@tcp:/*) ;;
  *) die "unexpected mountPoint '$mount_point' of Lustre instance $LUSTRE_INSTANCE (want IP@tcp:/FILESYSTEM)" ;;
esac
lustre_ip="${mount_point%%@*}"
lustre_fs="${mount_point##*:/}"
overlay="$(
  cat <<EOF
# Written by the nemo-rl-gke infra script: what it created, in the chart's keys.
# Use it after the generator's file: -f values-h200.yaml -f values-infra.yaml
# GPU pools made: reserved=4 (reservation rl-reservation), spot=4 (spot). workerGroups is not set here: your values file holds it,
# so your edits to it (replicas, tolerations, node selectors) stay when both are installed.
storage:
  lustre:
    volumeHandle: my-project/us-central1-b/nemo-rl-lustre
    ip: '$lustre_ip'
    filesystem: '$lustre_fs'
    capacity: 9000Gi
network:
  gvnic:
    name: gvnic-1
    vpc: nemo-rl-gvnic-net
    subnet: nemo-rl-gvnic-sub
  rdma:
  - name: rdma-0
    vpc: nemo-rl-rdma-net
    subnet: nemo-rl-rdma-sub-0
  - name: rdma-1
    vpc: nemo-rl-rdma-net
    subnet: nemo-rl-rdma-sub-1
  - name: rdma-2
    vpc: nemo-rl-rdma-net
    subnet: nemo-rl-rdma-sub-2
  - name: rdma-3
    vpc: nemo-rl-rdma-net
    subnet: nemo-rl-rdma-sub-3
  - name: rdma-4
    vpc: nemo-rl-rdma-net
    subnet: nemo-rl-rdma-sub-4
  - name: rdma-5
    vpc: nemo-rl-rdma-net
    subnet: nemo-rl-rdma-sub-5
  - name: rdma-6
    vpc: nemo-rl-rdma-net
    subnet: nemo-rl-rdma-sub-6
  - name: rdma-7
    vpc: nemo-rl-rdma-net
    subnet: nemo-rl-rdma-sub-7
gke:
  nodePools:
  - name: default-pool
    machineType: e2-standard-16
  - name: gpu-h200-reserved
    machineType: a3-ultragpu-8g
    labels:
      cloud.google.com/gke-accelerator: nvidia-h200-141gb
      cloud.google.com/gke-gpu-driver-version: latest
      cloud.google.com/reservation-name: rl-reservation
      cloud.google.com/reservation-affinity: specific
    taints:
    - key: nvidia.com/gpu
      value: present
      effect: NoSchedule
  - name: gpu-h200-spot
    machineType: a3-ultragpu-8g
    labels:
      cloud.google.com/gke-accelerator: nvidia-h200-141gb
      cloud.google.com/gke-gpu-driver-version: latest
      cloud.google.com/gke-spot: 'true'
    taints:
    - key: nvidia.com/gpu
      value: present
      effect: NoSchedule
kueue:
  enabled: true
  queueName: gpu-queue
  version: v0.19.2
  topology:
    mode: preferred
    level: cloud.google.com/gce-topology-block
EOF
)"
if [ "$DRY_RUN" = 1 ]; then
  printf '\n%s would hold:\n' "$VALUES_OUT"
  printf '%s\n' "$overlay" | sed 's/^/    | /'
else
  printf '%s\n' "$overlay" >"$VALUES_OUT"
  printf '\nWrote %s: the Lustre volume (%s), networks, Kueue queue (your values file keeps the worker groups).\n' "$VALUES_OUT" \
    "$PROJECT/$ZONE/$LUSTRE_INSTANCE"
fi
cat <<EOF

Next: write the values file, check both together, then install the chart with both:
  python -m generator --gpu h200 --groups reserved=4:reservation:rl-reservation,spot=4:spot --kueue-queue gpu-queue
  python -m generator validate values-h200.yaml -f $VALUES_OUT
  helm install nemo-rl charts/nemo-rl-gke --namespace=$NAMESPACE -f values-h200.yaml -f $VALUES_OUT
EOF

CURRENT_STEP=''
if [ "$DRY_RUN" = 1 ]; then
  printf '\nDry run: nothing was changed.\n'
else
  printf '\nBring-up complete.\n'
fi
