"""What the GKE bring-up and teardown scripts do: the options, the resource names, and each
step as a bash snippet.

Names come from the same sources as the values file: the accelerator profile
(`profiles.profile`) and the multi-network plan (`networks.plan`). Each snippet only reads the
variables that `infra_script` defines at the top of the script, always quoted, and checks that a
resource exists (`describe`/`get`) before creating or deleting it, so a half-finished run is
completed by running the script again.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from generator.gke import networks
from generator.gke.profiles import profile
from generator.gke.provisioning import DEFAULT_MODE, DEFAULT_PROVISIONING

APIS = (
    "compute.googleapis.com",
    "container.googleapis.com",
    "storage.googleapis.com",
    "servicenetworking.googleapis.com",
    "lustre.googleapis.com",
)
# The cluster's own VPC (eth0 of every node). Managed Lustre must sit on this network.
CLUSTER_VPC = "default"
# Standard clusters: the default pool (one node, in the GPU zone) holds the Ray head
# (head.resources in the values file: 6 CPU / 24Gi) beside GKE's system pods.
CPU_MACHINE_TYPE = "e2-standard-16"
GVNIC_RANGE = "192.168.0.0/24"
RDMA_RANGE = "192.168.{}.0/24"  # subnet i gets 192.168.(i+1).0/24
GVNIC_FIREWALL_SOURCE = "192.168.0.0/16"
LUSTRE_FILESYSTEM = "lfs"
LUSTRE_PSA_PREFIX_LENGTH = 20
BUCKET_ROLE = "roles/storage.objectUser"
INSTALLER_BASE = "https://raw.githubusercontent.com/GoogleCloudPlatform/container-engine-accelerators/refs/heads/master/gpudirect-rdma"
INSTALLERS = {
    "standard": (f"{INSTALLER_BASE}/nccl-rdma-installer.yaml", "kube-system"),
    "autopilot": (f"{INSTALLER_BASE}/nccl-rdma-installer-autopilot.yaml", "rdma-system"),
}


@dataclass(frozen=True)
class InfraOptions:
    gpu: str
    project: str
    region: str
    zone: str
    mode: str = DEFAULT_MODE
    nodes: int = 2
    provisioning: str = DEFAULT_PROVISIONING
    reservation: str = ""
    cluster: str = "nemo-rl"
    network_prefix: str = networks.DEFAULT_PREFIX
    lustre_capacity_gib: int = 9000
    lustre_throughput: int = 1000
    bucket: str = ""  # empty: <project>-<cluster>
    namespace: str = "default"
    ksa: str = "nemo-rl-ksa"
    preload_image_disk: str = ""  # image name or projects/P/global/images/NAME
    dry_run: bool = False  # the script's default mode

    @property
    def bucket_name(self) -> str:
        return self.bucket or f"{self.project}-{self.cluster}"

    @property
    def preload_image(self) -> str:
        disk = self.preload_image_disk
        if not disk or disk.startswith("projects/"):
            return disk
        return f"projects/{self.project}/global/images/{disk}"


@dataclass(frozen=True)
class Step:
    title: str
    body: str


def variables(o: InfraOptions) -> list[tuple[str, str | tuple[str, ...]]]:
    """Every name the scripts may use, in the order they are shown; the script keeps the used ones."""
    p = profile(o.gpu)
    plan = networks.plan(o.network_prefix, p.rdma_nics)
    url, installer_ns = INSTALLERS[o.mode]
    return [
        ("PROJECT", o.project),
        ("REGION", o.region),
        ("ZONE", o.zone),
        ("CLUSTER", o.cluster),
        ("CLUSTER_VPC", CLUSTER_VPC),
        ("CPU_MACHINE_TYPE", CPU_MACHINE_TYPE),
        ("MIN_GKE_VERSION", p.min_gke_version),
        ("NODE_POOL", f"gpu-{p.key}"),
        ("NODES", str(o.nodes)),
        ("MACHINE_TYPE", p.machine_type),
        ("ACCELERATOR", p.node_label),
        ("GPUS_PER_NODE", str(p.gpus_per_node)),
        ("RESERVATION", o.reservation),
        ("PRELOAD_IMAGE", o.preload_image),
        ("GVNIC_VPC", plan.gvnic_vpc),
        ("GVNIC_SUBNET", plan.gvnic.subnet),
        ("GVNIC_RANGE", GVNIC_RANGE),
        ("GVNIC_FIREWALL", f"{plan.prefix}-gvnic-internal"),
        ("RDMA_VPC", plan.rdma_vpc),
        ("RDMA_SUBNETS", tuple(n.subnet for n in plan.rdma)),
        ("RDMA_RANGES", tuple(RDMA_RANGE.format(i + 1) for i in range(len(plan.rdma)))),
        ("RDMA_INSTALLER_URL", url),
        ("RDMA_INSTALLER_NAMESPACE", installer_ns),
        ("BUCKET", o.bucket_name),
        ("BUCKET_ROLE", BUCKET_ROLE),
        ("NAMESPACE", o.namespace),
        ("KSA", o.ksa),
        ("LUSTRE_INSTANCE", f"{o.cluster}-lustre"),
        ("LUSTRE_FS", LUSTRE_FILESYSTEM),
        ("LUSTRE_CAPACITY_GIB", str(o.lustre_capacity_gib)),
        ("LUSTRE_THROUGHPUT", str(o.lustre_throughput)),
        ("LUSTRE_RANGE", f"{o.cluster}-lustre-psa"),
        ("LUSTRE_FIREWALL", f"{o.cluster}-lustre"),
        ("APIS", APIS),
    ]


# --- bring-up -----------------------------------------------------------------------------

ENABLE_APIS = """\
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
"""

GVNIC_NETWORK = """\
if ! exists gcloud compute networks describe "$GVNIC_VPC" --project="$PROJECT"; then
  run gcloud compute networks create "$GVNIC_VPC" --project="$PROJECT" --subnet-mode=custom
fi
if ! exists gcloud compute networks subnets describe "$GVNIC_SUBNET" --project="$PROJECT" --region="$REGION"; then
  run gcloud compute networks subnets create "$GVNIC_SUBNET" --project="$PROJECT" --region="$REGION" \\
    --network="$GVNIC_VPC" --range="$GVNIC_RANGE"
fi
if ! exists gcloud compute firewall-rules describe "$GVNIC_FIREWALL" --project="$PROJECT"; then
  run gcloud compute firewall-rules create "$GVNIC_FIREWALL" --project="$PROJECT" --network="$GVNIC_VPC" \\
    --action=ALLOW --rules=tcp:0-65535,udp:0-65535,icmp --source-ranges=%(source)s
fi
"""

RDMA_NETWORK = """\
# The RoCE network profile is zonal: every RDMA NIC must be in $ZONE.
if ! exists gcloud compute networks describe "$RDMA_VPC" --project="$PROJECT"; then
  run gcloud compute networks create "$RDMA_VPC" --project="$PROJECT" --subnet-mode=custom \\
    --network-profile="$ZONE-vpc-roce"
fi
for i in "${!RDMA_SUBNETS[@]}"; do
  if ! exists gcloud compute networks subnets describe "${RDMA_SUBNETS[$i]}" --project="$PROJECT" --region="$REGION"; then
    run gcloud compute networks subnets create "${RDMA_SUBNETS[$i]}" --project="$PROJECT" --region="$REGION" \\
      --network="$RDMA_VPC" --range="${RDMA_RANGES[$i]}"
  fi
done
"""

CLUSTER_VERSION = """\
  # The region's default GKE version, unless GKE_VERSION is set; it must not be older than
  # the accelerator's minimum.
  cluster_version="${GKE_VERSION:-}"
  if [ -z "$cluster_version" ]; then
    query cluster_version DEFAULT_GKE_VERSION gcloud container get-server-config --project="$PROJECT" \\
      --location="$REGION" --format='value(defaultClusterVersion)'
  fi
  require_min_version "$cluster_version" "$MIN_GKE_VERSION"
"""

STANDARD_CLUSTER = (
    """\
# Legacy-port rule: GKE reaches a Managed Lustre instance created with --gke-support-enabled (the
# Lustre step below creates one) only when the cluster's Lustre CSI driver runs with
# --enable-legacy-lustre-port (LNet on port 6988; port 988 clashes with the gke-metadata-server).
if ! exists gcloud container clusters describe "$CLUSTER" --project="$PROJECT" --location="$REGION"; then
"""
    + CLUSTER_VERSION
    + """\
  run gcloud container clusters create "$CLUSTER" \\
    --project="$PROJECT" \\
    --location="$REGION" \\
    --node-locations="$ZONE" \\
    --cluster-version="$cluster_version" \\
    --network="$CLUSTER_VPC" \\
    --enable-dataplane-v2 \\
    --enable-ip-alias \\
    --enable-multi-networking \\
    --addons=RayOperator,LustreCsiDriver \\
    --enable-legacy-lustre-port \\
    --workload-pool="$PROJECT.svc.id.goog" \\
    --machine-type="$CPU_MACHINE_TYPE" \\
    --num-nodes=1
fi
"""
)

AUTOPILOT_CLUSTER = (
    """\
# Legacy-port rule: GKE reaches a Managed Lustre instance created with --gke-support-enabled (the
# Lustre step below creates one) only when the cluster's Lustre CSI driver runs with
# --enable-legacy-lustre-port (LNet on port 6988; port 988 clashes with the gke-metadata-server).
# Autopilot has Workload Identity and Dataplane V2 built in.
if ! exists gcloud container clusters describe "$CLUSTER" --project="$PROJECT" --location="$REGION"; then
"""
    + CLUSTER_VERSION
    + """\
  run gcloud container clusters create-auto "$CLUSTER" \\
    --project="$PROJECT" \\
    --location="$REGION" \\
    --cluster-version="$cluster_version" \\
    --network="$CLUSTER_VPC" \\
    --enable-multi-networking \\
    --enable-ray-operator \\
    --enable-lustre-csi-driver \\
    --enable-legacy-lustre-port
fi
# No node pool in Autopilot: GKE adds GPU nodes for the pods that ask for them (the accelerator
# node selectors in the values file).
"""
)

CREDENTIALS = """\
run gcloud container clusters get-credentials "$CLUSTER" --project="$PROJECT" --location="$REGION"
"""

# How the GPU pool is sized, per provisioning type. Sources, GKE's documentation:
#   [CA]  https://docs.cloud.google.com/kubernetes-engine/docs/concepts/cluster-autoscaler
#         --total-min-nodes/--total-max-nodes (GKE >= 1.24) bound the whole pool across zones;
#         location policy ANY: "autoscaling has to be enabled and the initial number of nodes has
#         to be set to 0"; ANY is the default for Spot and flex-start pools, BALANCED (the
#         on-demand and reservation default) is not supported for flex-start; a node pool scales
#         up when Pods cannot be scheduled and down to its minimum when its nodes are unneeded.
#   [FAQ] https://github.com/kubernetes/autoscaler/blob/master/cluster-autoscaler/FAQ.md#how-does-scale-down-work
#         (linked from [CA]): "If a node is unneeded for more than 10 minutes, it will be terminated."
#   [HOW] https://docs.cloud.google.com/kubernetes-engine/docs/how-to/cluster-autoscaler
#         --enable-autoscaling with --min-nodes/--max-nodes (per zone) or --total-min-nodes/
#         --total-max-nodes (whole pool); the two pairs are mutually exclusive.
#   [RES] https://docs.cloud.google.com/compute/docs/instances/reservations-overview#reservation-billing
#         (as summarised in https://docs.cloud.google.com/gemini-enterprise-agent-platform/machine-learning/predictions/use-reservations):
#         reserved resources are charged at the on-demand rate until the reservation is deleted;
#         a VM consuming the reservation incurs no separate charge (only disks, IP addresses).
# Spot, on-demand and flex-start: from 0 up to $NODES nodes, so no GPU node exists before the
# chart's worker pods ask for one, and the autoscaler removes a node once no worker pod needs it.
# The pool has one zone ($ZONE), so the per-zone and the total bounds are the same; the total
# ones are used, as the flex-start pool did before Spot and on-demand were autoscaled.
FROM_ZERO = [
    "--enable-autoscaling",
    "--num-nodes=0",
    "--total-min-nodes=0",
    '--total-max-nodes="$NODES"',
    "--location-policy=ANY",  # [CA] needs autoscaling and 0 initial nodes; the Spot default
]
PROVISIONING_FLAGS = {
    "spot": ["--spot", *FROM_ZERO],
    "on-demand": [*FROM_ZERO],
    # Fixed at $NODES: the reservation is paid for whether its VMs run or not [RES], so removing
    # idle nodes saves nothing but their boot disks, and nodes kept up keep the image pulled.
    "reservation": ['--num-nodes="$NODES"', "--reservation-affinity=specific", '--reservation="$RESERVATION"'],
    # DWS flex-start: the autoscaler obtains up to $NODES nodes [CA].
    "flex-start": ["--flex-start", *FROM_ZERO, "--reservation-affinity=none", "--no-enable-autorepair"],
}

# The comment above the pool in the generated script, so its reader knows what is paid for.
POOL_SIZING = {
    "autoscaled": (
        "# Autoscaled from 0 to $NODES nodes: the cluster autoscaler adds GPU nodes when the chart's worker\n"
        "# pods cannot be scheduled and removes a node after it has been unneeded for about 10 minutes, so no\n"
        "# GPU node is billed before `helm install` or after the worker pods are gone. Location policy ANY\n"
        "# requires autoscaling and 0 initial nodes. The cluster keeps GKE's default autoscaling profile.\n"
        "# https://docs.cloud.google.com/kubernetes-engine/docs/concepts/cluster-autoscaler\n"
        "# https://github.com/kubernetes/autoscaler/blob/master/cluster-autoscaler/FAQ.md#how-does-scale-down-work\n"
    ),
    "reservation": (
        "# Fixed at $NODES nodes, not autoscaled: a reservation is billed at the on-demand rate until it is\n"
        "# deleted, whether or not VMs use it, and a VM that consumes it costs nothing more (only its disks).\n"
        "# Removing idle nodes would save almost nothing; kept up, they keep the image pulled. To stop paying\n"
        "# for the GPUs, delete the reservation.\n"
        "# https://docs.cloud.google.com/compute/docs/instances/reservations-overview#reservation-billing\n"
    ),
}


def node_pool(o: InfraOptions) -> str:
    rdma = networks.plan(o.network_prefix, profile(o.gpu).rdma_nics).rdma
    flags = [
        '--project="$PROJECT"',
        '--cluster="$CLUSTER"',
        '--location="$REGION"',
        '--node-locations="$ZONE"',
        '--machine-type="$MACHINE_TYPE"',
        '--accelerator="type=$ACCELERATOR,count=$GPUS_PER_NODE,gpu-driver-version=latest"',
        '--additional-node-network="network=$GVNIC_VPC,subnetwork=$GVNIC_SUBNET"',
        *(f'--additional-node-network="network=$RDMA_VPC,subnetwork=${{RDMA_SUBNETS[{i}]}}"' for i in range(len(rdma))),
        *PROVISIONING_FLAGS[o.provisioning],
    ]
    if o.preload_image:
        flags += ["--enable-image-streaming", '--secondary-boot-disk="disk-image=$PRELOAD_IMAGE,mode=CONTAINER_IMAGE_CACHE"']
    lines = " \\\n".join(f"    {f}" for f in flags)
    sizing = POOL_SIZING["reservation" if o.provisioning == "reservation" else "autoscaled"]
    return (
        sizing + "# eth1 on the gVNIC VPC, eth2..eth9 on the RoCE subnets: the same names as network.* in the values file.\n"
        'if ! exists gcloud container node-pools describe "$NODE_POOL" --project="$PROJECT" --cluster="$CLUSTER" \\\n'
        '    --location="$REGION"; then\n'
        '  run gcloud container node-pools create "$NODE_POOL" \\\n'
        f"{lines}\n"
        "fi\n"
    )


RDMA_INSTALLER = """\
# Google's NCCL RDMA installer DaemonSet (gIB plugin into /home/kubernetes/bin/gib on GPU nodes).
if ! exists kubectl get daemonset nccl-rdma-installer --namespace="$RDMA_INSTALLER_NAMESPACE"; then
  run kubectl apply -f "$RDMA_INSTALLER_URL"
fi
# The GKE Network and GKENetworkParamSet objects (gvnic-1, rdma-0..rdma-7) are not created here:
# the Helm chart renders them from network.* in the values file (network.createObjects), which
# holds the same VPC and subnet names as this script. One owner keeps them from drifting.
"""

BUCKET = """\
if ! exists gcloud storage buckets describe "gs://$BUCKET" --project="$PROJECT"; then
  run gcloud storage buckets create "gs://$BUCKET" --project="$PROJECT" --location="$REGION" \\
    --uniform-bucket-level-access --enable-hierarchical-namespace
fi
"""

SERVICE_ACCOUNT = """\
if ! exists kubectl get namespace "$NAMESPACE"; then
  run kubectl create namespace "$NAMESPACE"
fi
if ! exists kubectl get serviceaccount "$KSA" --namespace="$NAMESPACE"; then
  run kubectl create serviceaccount "$KSA" --namespace="$NAMESPACE"
fi
"""

WORKLOAD_IDENTITY = """\
# Workload Identity Federation: the Kubernetes service account itself is the IAM principal.
project_number=''
query project_number PROJECT_NUMBER gcloud projects describe "$PROJECT" --format='value(projectNumber)'
member="principal://iam.googleapis.com/projects/$project_number/locations/global/workloadIdentityPools/$PROJECT.svc.id.goog/subject/ns/$NAMESPACE/sa/$KSA"
bindings=''
query bindings '' gcloud storage buckets get-iam-policy "gs://$BUCKET" --project="$PROJECT" \\
  --flatten='bindings[].members' --format='csv[no-heading](bindings.role,bindings.members)'
if has_line "$bindings" "$BUCKET_ROLE,$member"; then
  echo "    = $member has $BUCKET_ROLE on gs://$BUCKET"
else
  run gcloud storage buckets add-iam-policy-binding "gs://$BUCKET" --project="$PROJECT" \\
    --member="$member" --role="$BUCKET_ROLE"
fi
"""

LUSTRE_ACCESS = """\
# Private services access on the cluster's VPC: Managed Lustre takes its addresses from this range.
if ! exists gcloud compute addresses describe "$LUSTRE_RANGE" --global --project="$PROJECT"; then
  run gcloud compute addresses create "$LUSTRE_RANGE" --global --project="$PROJECT" --purpose=VPC_PEERING \\
    --prefix-length=%(prefix)d --network="$CLUSTER_VPC" --description='Managed Lustre private services access'
fi
if ! exists gcloud compute firewall-rules describe "$LUSTRE_FIREWALL" --project="$PROJECT"; then
  cidr=''
  query cidr RANGE_CIDR gcloud compute addresses describe "$LUSTRE_RANGE" --global --project="$PROJECT" \\
    --format='value[separator=/](address,prefixLength)'
  run gcloud compute firewall-rules create "$LUSTRE_FIREWALL" --project="$PROJECT" --network="$CLUSTER_VPC" \\
    --allow=tcp:988,tcp:6988 --source-ranges="$cidr"
fi
ranges=''
query ranges '' gcloud services vpc-peerings list --project="$PROJECT" --network="$CLUSTER_VPC" \\
  --service=servicenetworking.googleapis.com --flatten=reservedPeeringRanges --format='value(reservedPeeringRanges)'
if has_line "$ranges" "$LUSTRE_RANGE"; then
  echo "    = $LUSTRE_RANGE is peered with servicenetworking.googleapis.com"
elif [ -z "$ranges" ]; then
  run gcloud services vpc-peerings connect --project="$PROJECT" --network="$CLUSTER_VPC" \\
    --service=servicenetworking.googleapis.com --ranges="$LUSTRE_RANGE"
else
  # The VPC already has a private services connection: keep its ranges and add ours.
  run gcloud services vpc-peerings update --project="$PROJECT" --network="$CLUSTER_VPC" \\
    --service=servicenetworking.googleapis.com --ranges="${ranges//$'\\n'/,},$LUSTRE_RANGE"
fi
"""

LUSTRE_INSTANCE = """\
# In the GPU nodes' zone, on the cluster's VPC. --gke-support-enabled moves Lustre to port 6988,
# hence --enable-legacy-lustre-port on the cluster.
if ! exists gcloud lustre instances describe "$LUSTRE_INSTANCE" --project="$PROJECT" --location="$ZONE"; then
  run gcloud lustre instances create "$LUSTRE_INSTANCE" --project="$PROJECT" --location="$ZONE" \\
    --network="projects/$PROJECT/global/networks/$CLUSTER_VPC" \\
    --capacity-gib="$LUSTRE_CAPACITY_GIB" --per-unit-storage-throughput="$LUSTRE_THROUGHPUT" \\
    --filesystem="$LUSTRE_FS" --gke-support-enabled
fi
"""

CHART_VALUES = """\
mount_point=''
query mount_point "LUSTRE_IP@tcp:/$LUSTRE_FS" gcloud lustre instances describe "$LUSTRE_INSTANCE" \\
  --project="$PROJECT" --location="$ZONE" --format='value(mountPoint)'
case "$mount_point" in
  *@tcp:/*) ;;
  *) die "unexpected mountPoint '$mount_point' of Lustre instance $LUSTRE_INSTANCE (want IP@tcp:/FILESYSTEM)" ;;
esac
lustre_ip="${mount_point%%%%@*}"
lustre_fs="${mount_point##*:/}"
cat <<EOF

storage.lustre values for the chart:
  volumeHandle: $PROJECT/$ZONE/$LUSTRE_INSTANCE
  ip:           $lustre_ip
  filesystem:   $lustre_fs

Next: write the values file, then install the chart with these values:
  %(generate)s
  helm install nemo-rl charts/nemo-rl-gke -f %(values_file)s --namespace=$NAMESPACE \\\\
    --set storage.lustre.volumeHandle=$PROJECT/$ZONE/$LUSTRE_INSTANCE \\\\
    --set storage.lustre.ip=$lustre_ip \\\\
    --set storage.lustre.filesystem=$lustre_fs \\\\
    --set storage.lustre.capacity=${LUSTRE_CAPACITY_GIB}Gi \\\\
    --set serviceAccount.create=false --set serviceAccount.name=$KSA
EOF
"""


def generate_command(o: InfraOptions) -> str:
    """The values-generator command with the options this script shares with it."""
    argv = ["python", "-m", "generator", "--gpu", o.gpu]
    if o.mode != "standard":
        argv += ["--mode", o.mode]
    argv += ["--nodes", str(o.nodes)]
    if o.network_prefix != networks.DEFAULT_PREFIX:
        argv += ["--network-prefix", o.network_prefix]
    argv += ["--provisioning", o.provisioning]
    if o.reservation:
        # Pods select the reservation by its name (cloud.google.com/reservation-name), also when
        # the node pool was given its full path.
        argv += ["--reservation", reservation_name(o.reservation)]
    return shlex.join(argv)


def reservation_name(reservation: str) -> str:
    """R of projects/P/reservations/R[/reservationBlocks/B], or the name as given."""
    parts = reservation.split("/")
    return parts[3] if len(parts) >= 4 and parts[0] == "projects" and parts[2] == "reservations" else reservation


def bring_up_steps(o: InfraOptions) -> list[Step]:
    steps = [
        Step("Enable the Google Cloud APIs", ENABLE_APIS),
        Step("gVNIC VPC, subnet and firewall (eth1)", GVNIC_NETWORK % {"source": GVNIC_FIREWALL_SOURCE}),
        Step("RoCE VPC and its RDMA subnets (eth2..eth9)", RDMA_NETWORK),
    ]
    if o.mode == "standard":
        steps.append(Step("GKE Standard cluster (multi-networking, Ray operator, Lustre CSI driver)", STANDARD_CLUSTER))
    else:
        steps.append(Step("GKE Autopilot cluster (multi-networking, Ray operator, Lustre CSI driver)", AUTOPILOT_CLUSTER))
    steps.append(Step("Cluster credentials for kubectl", CREDENTIALS))
    if o.mode == "standard":
        steps.append(Step("GPU node pool", node_pool(o)))
    steps += [
        Step("NCCL RDMA installer", RDMA_INSTALLER),
        Step("Cloud Storage bucket", BUCKET),
        Step("Kubernetes service account", SERVICE_ACCOUNT),
        Step("Workload Identity: bucket access for the service account", WORKLOAD_IDENTITY),
        Step("Managed Lustre: private services access", LUSTRE_ACCESS % {"prefix": LUSTRE_PSA_PREFIX_LENGTH}),
        Step("Managed Lustre instance", LUSTRE_INSTANCE),
        Step(
            "Values for the chart",
            CHART_VALUES % {"generate": generate_command(o), "values_file": f"values-{o.gpu}.yaml"},
        ),
    ]
    return steps


# --- teardown -------------------------------------------------------------------------------

TEARDOWN_LUSTRE = """\
if exists gcloud lustre instances describe "$LUSTRE_INSTANCE" --project="$PROJECT" --location="$ZONE"; then
  run gcloud lustre instances delete "$LUSTRE_INSTANCE" --project="$PROJECT" --location="$ZONE" --quiet
fi
"""

TEARDOWN_LUSTRE_ACCESS = """\
keep_range=0
ranges=''
query ranges "$LUSTRE_RANGE" gcloud services vpc-peerings list --project="$PROJECT" --network="$CLUSTER_VPC" \\
  --service=servicenetworking.googleapis.com --flatten=reservedPeeringRanges --format='value(reservedPeeringRanges)'
if [ "$ranges" = "$LUSTRE_RANGE" ]; then
  # Can be refused for a while after the instance is deleted; run the teardown again later.
  run gcloud services vpc-peerings delete --project="$PROJECT" --network="$CLUSTER_VPC" \\
    --service=servicenetworking.googleapis.com --quiet
elif has_line "$ranges" "$LUSTRE_RANGE"; then
  echo "    ! the private services connection of $CLUSTER_VPC also serves other ranges: it and $LUSTRE_RANGE are kept"
  keep_range=1
fi
if exists gcloud compute firewall-rules describe "$LUSTRE_FIREWALL" --project="$PROJECT"; then
  run gcloud compute firewall-rules delete "$LUSTRE_FIREWALL" --project="$PROJECT" --quiet
fi
if [ "$keep_range" = 0 ] && exists gcloud compute addresses describe "$LUSTRE_RANGE" --global --project="$PROJECT"; then
  run gcloud compute addresses delete "$LUSTRE_RANGE" --global --project="$PROJECT" --quiet
fi
"""

TEARDOWN_BUCKET = """\
# Its IAM bindings go with it.
if exists gcloud storage buckets describe "gs://$BUCKET" --project="$PROJECT"; then
  run gcloud storage rm --recursive "gs://$BUCKET" --project="$PROJECT"
fi
"""

TEARDOWN_CLUSTER = """\
# With the cluster go everything inside it: %(inside)s.
if exists gcloud container clusters describe "$CLUSTER" --project="$PROJECT" --location="$REGION"; then
  run gcloud container clusters delete "$CLUSTER" --project="$PROJECT" --location="$REGION" --quiet
fi
"""

TEARDOWN_RDMA_NETWORK = """\
for (( i = ${#RDMA_SUBNETS[@]} - 1; i >= 0; i-- )); do
  if exists gcloud compute networks subnets describe "${RDMA_SUBNETS[$i]}" --project="$PROJECT" --region="$REGION"; then
    run gcloud compute networks subnets delete "${RDMA_SUBNETS[$i]}" --project="$PROJECT" --region="$REGION" --quiet
  fi
done
if exists gcloud compute networks describe "$RDMA_VPC" --project="$PROJECT"; then
  run gcloud compute networks delete "$RDMA_VPC" --project="$PROJECT" --quiet
fi
"""

TEARDOWN_GVNIC_NETWORK = """\
if exists gcloud compute firewall-rules describe "$GVNIC_FIREWALL" --project="$PROJECT"; then
  run gcloud compute firewall-rules delete "$GVNIC_FIREWALL" --project="$PROJECT" --quiet
fi
if exists gcloud compute networks subnets describe "$GVNIC_SUBNET" --project="$PROJECT" --region="$REGION"; then
  run gcloud compute networks subnets delete "$GVNIC_SUBNET" --project="$PROJECT" --region="$REGION" --quiet
fi
if exists gcloud compute networks describe "$GVNIC_VPC" --project="$PROJECT"; then
  run gcloud compute networks delete "$GVNIC_VPC" --project="$PROJECT" --quiet
fi
"""

TEARDOWN_SUMMARY = """\
  - Managed Lustre instance $LUSTRE_INSTANCE in $ZONE, with all its data
  - private services access range $LUSTRE_RANGE (and its peering if nothing else uses it), firewall rule $LUSTRE_FIREWALL
  - Cloud Storage bucket gs://$BUCKET, with all its objects
  - GKE cluster $CLUSTER in $REGION, with everything running in it
  - VPC $RDMA_VPC and its ${#RDMA_SUBNETS[@]} subnets
  - VPC $GVNIC_VPC, its subnet $GVNIC_SUBNET and firewall rule $GVNIC_FIREWALL
"""


def teardown_steps(o: InfraOptions) -> list[Step]:
    inside = (
        "the GPU node pool, the NCCL RDMA installer, the service account"
        if o.mode == "standard"
        else ("the NCCL RDMA installer, the service account")
    )
    return [
        Step("Managed Lustre instance", TEARDOWN_LUSTRE),
        Step("Managed Lustre: private services access", TEARDOWN_LUSTRE_ACCESS),
        Step("Cloud Storage bucket", TEARDOWN_BUCKET),
        Step("GKE cluster", TEARDOWN_CLUSTER % {"inside": inside}),
        Step("RoCE VPC and its RDMA subnets", TEARDOWN_RDMA_NETWORK),
        Step("gVNIC VPC, subnet and firewall", TEARDOWN_GVNIC_NETWORK),
    ]
