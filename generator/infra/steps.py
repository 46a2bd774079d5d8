"""What the GKE bring-up and teardown scripts do: the options, the resource names, and each
step as a bash snippet.

Names come from the same sources as the values file: the accelerator profile
(`profiles.profile`), the multi-network plan (`networks.plan`) and the worker groups
(`worker_groups.GroupSpec`). Each snippet only reads the variables that `infra_script` defines at
the top of the script, always quoted, and checks that a resource exists (`describe`/`get`) before
creating or deleting it, so a half-finished run is completed by running the script again.

Ownership: everything the script creates carries a mark, the description `nemo-rl-gke infra:
cluster CLUSTER` (networks, subnets, firewall rules, addresses, the Lustre instance) or the label
`nemo-rl-gke-infra=CLUSTER` (the cluster, the Lustre instance). The teardown deletes only what
carries this cluster's mark, so a VPC, a range or a cluster that existed before is never deleted.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from generator.gke import networks, versions
from generator.gke.machines import CPU_POOL
from generator.gke.profiles import profile
from generator.infra import dra, kueue, overlay
from generator.infra.options import (
    GIB_IMAGE,
    GIB_VERSION,
    RDMA_INSTALLER_COMMIT,
    InfraOptions,
    reservation_name,
    reservation_project,
)
from generator.values.worker_groups import GroupSpec

APIS = (
    "compute.googleapis.com",
    "container.googleapis.com",
    "servicenetworking.googleapis.com",
    "lustre.googleapis.com",
)
# Standard clusters: the default pool (one node, in the GPU zone) holds the Ray head
# (head.resources in the values file: 6 CPU / 24Gi) beside GKE's system pods.
CPU_MACHINE_TYPE = CPU_POOL.machine_type
GVNIC_RANGE = "192.168.0.0/24"
RDMA_RANGE = "192.168.{}.0/24"  # subnet i gets 192.168.(i+1).0/24
GVNIC_FIREWALL_SOURCE = "192.168.0.0/16"
LUSTRE_FILESYSTEM = "lfs"
LUSTRE_PSA_PREFIX_LENGTH = 20
# "Setting the --mtu flag to 8896 gives about 10% better performance": the VPC of Managed Lustre
# ("Access Managed Lustre instances on GKE with the Managed Lustre CSI driver", Set up a VPC network,
# https://docs.cloud.google.com/kubernetes-engine/docs/how-to/persistent-volumes/lustre-csi-driver-new-volume).
LUSTRE_MTU = "8896"
INSTALLER_BASE = "https://raw.githubusercontent.com/GoogleCloudPlatform/container-engine-accelerators/{commit}/gpudirect-rdma"
INSTALLERS = {
    "standard": ("nccl-rdma-installer.yaml", "kube-system"),
    "autopilot": ("nccl-rdma-installer-autopilot.yaml", "rdma-system"),
}
OWNER_LABEL_KEY = "nemo-rl-gke-infra"


@dataclass(frozen=True)
class Step:
    title: str
    body: str


def owner_mark(o: InfraOptions) -> str:
    return f"nemo-rl-gke infra: cluster {o.cluster}"


def installer_url(o: InfraOptions) -> str:
    return installer_manifest_url(o.mode, o.rdma_installer_commit, o.gpu)


def installer_manifest_url(mode: str, commit: str = RDMA_INSTALLER_COMMIT, gpu: str = "") -> str:
    """The NCCL RDMA installer manifest for a GKE mode (on Standard, the machine's own: A4X's is
    the arm64 one, nccl-rdma-installer-a4x.yaml), at a pinned commit."""
    name = profile(gpu).gib_installer if gpu and mode == "standard" else INSTALLERS[mode][0]
    return f"{INSTALLER_BASE.format(commit=commit)}/{name}"


def min_version(o: InfraOptions) -> versions.Floor:
    return versions.highest(versions.floors(profile(o.gpu), _flex(o), o.network_mode))


def variables(o: InfraOptions) -> list[tuple[str, str | tuple[str, ...]]]:
    """Every name the scripts may use, in the order they are shown; the script keeps the used ones."""
    p = profile(o.gpu)
    plan = networks.plan(o.network_prefix, p.rdma_nics)
    floor = min_version(o)
    return [
        ("PROJECT", o.project),
        ("REGION", o.region),
        ("ZONE", o.zone),
        ("CLUSTER", o.cluster),
        ("CLUSTER_VPC", o.network),
        ("LUSTRE_MTU", LUSTRE_MTU),
        ("OWNER_MARK", owner_mark(o)),
        ("OWNER_LABEL", f"{OWNER_LABEL_KEY}={o.cluster}"),
        ("CPU_MACHINE_TYPE", CPU_MACHINE_TYPE),
        ("MIN_GKE_VERSION", floor.version),
        ("MIN_GKE_FOR", floor.what),
        ("MACHINE_TYPE", p.machine_type),
        ("ACCELERATOR", p.node_label),
        ("GPUS_PER_NODE", str(p.gpus_per_node)),
        ("GPU_QUOTA_METRIC", p.quota_metric),
        ("PRELOAD_IMAGE", o.preload_image),
        ("GVNIC_VPC", plan.gvnic_vpc),
        ("GVNIC_SUBNET", plan.gvnic.subnet),
        ("GVNIC_RANGE", GVNIC_RANGE),
        ("GVNIC_FIREWALL", f"{plan.prefix}-gvnic-internal"),
        ("RDMA_VPC", plan.rdma_vpc),
        ("RDMA_SUBNETS", tuple(n.subnet for n in plan.rdma)),
        ("RDMA_RANGES", tuple(RDMA_RANGE.format(i + 1) for i in range(len(plan.rdma)))),
        ("RDMA_INSTALLER_URL", installer_url(o)),
        ("RDMA_INSTALLER_NAMESPACE", INSTALLERS[o.mode][1]),
        # The arm64 installer runs the -arm64 image (nccl-rdma-installer-a4x.yaml at the pinned commit).
        ("GIB_IMAGE", f"{GIB_IMAGE}{'-arm64' if p.cpu_arch == 'arm64' else ''}:{o.gib_version}"),
        ("NAMESPACE", o.namespace),
        ("KUEUE_MANIFEST", kueue.MANIFEST),
        ("KUEUE_QUEUE", o.kueue_queue),
        ("KUEUE_CLUSTER_QUEUE", kueue.CLUSTER_QUEUE),
        ("LUSTRE_INSTANCE", f"{o.cluster}-lustre"),
        ("LUSTRE_FS", LUSTRE_FILESYSTEM),
        ("LUSTRE_CAPACITY_GIB", str(o.lustre_capacity_gib)),
        ("LUSTRE_THROUGHPUT", str(o.lustre_throughput)),
        ("LUSTRE_RANGE", f"{o.cluster}-lustre-psa"),
        ("LUSTRE_FIREWALL", f"{o.cluster}-lustre"),
        ("DRA_NAMESPACE", dra.NAMESPACE),
        ("DRA_QUOTA", dra.QUOTA),
        ("DRA_RELEASE", dra.RELEASE),
        ("DRA_CHART", dra.CHART),
        ("DRA_CHART_VERSION", dra.CHART_VERSION),
        ("VALUES_OUT", o.values_out),
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

# GPU quota: Compute Engine's regional quota of the GPU, as `gcloud compute regions describe`
# shows it (limit and usage per metric); Spot and flex-start VMs draw on the PREEMPTIBLE_ metric.
# Managed Lustre's capacity quota is not among what that call shows: not checked here.
QUOTA_CHECK = """\
# GPUs each quota metric needs: %(needs)s
need_gpus() {  # need_gpus METRIC COUNT: stop unless the region's quota has COUNT GPUs left
  local line limit usage
  query line "$2 0" gcloud compute regions describe "$REGION" --project="$PROJECT" --flatten=quotas \\
    --filter="quotas.metric=$1" --format='value(quotas.limit,quotas.usage)'
  if [ -z "$line" ]; then
    echo "    ! $REGION shows no quota $1: not checked"
    return 0
  fi
  read -r limit usage <<<"$line"
  limit="${limit%%.*}"
  usage="${usage%%.*}"
  if [ $((limit - usage)) -lt "$2" ]; then
    die "quota $1 in $REGION has $((limit - usage)) GPUs left ($usage of $limit used), the GPU pools need up to $2:" \\
      "request more (IAM & Admin > Quotas), then run this script again"
  fi
  echo "    = quota $1: $((limit - usage)) of $limit GPUs left, up to $2 needed"
}
%(calls)s"""

CLUSTER_NETWORK = """\
# The cluster's VPC (eth0 of every node) and Managed Lustre's. Created when missing, with the MTU
# Managed Lustre's documentation recommends (8896, about 10% more throughput) and auto-mode subnets.
if ! exists gcloud compute networks describe "$CLUSTER_VPC" --project="$PROJECT"; then
  run gcloud compute networks create "$CLUSTER_VPC" --project="$PROJECT" --subnet-mode=auto --mtu="$LUSTRE_MTU" \\
    --description="$OWNER_MARK"
else
  mtu=''
  query mtu "$LUSTRE_MTU" gcloud compute networks describe "$CLUSTER_VPC" --project="$PROJECT" --format='value(mtu)'
  if [ "${mtu:-1460}" != "$LUSTRE_MTU" ]; then
    echo "    ! $CLUSTER_VPC has MTU ${mtu:-1460}; Managed Lustre recommends $LUSTRE_MTU (kept: changing it affects every VM on it)"
  fi
  subnets=''
  query subnets "$CLUSTER_VPC" gcloud compute networks subnets list --project="$PROJECT" --network="$CLUSTER_VPC" \\
    --regions="$REGION" --format='value(name)'
  [ -n "$subnets" ] || die "VPC $CLUSTER_VPC has no subnet in $REGION: add one, or choose another --network"
fi
"""

GVNIC_NETWORK = """\
if ! exists gcloud compute networks describe "$GVNIC_VPC" --project="$PROJECT"; then
  run gcloud compute networks create "$GVNIC_VPC" --project="$PROJECT" --subnet-mode=custom --description="$OWNER_MARK"
fi
if ! exists gcloud compute networks subnets describe "$GVNIC_SUBNET" --project="$PROJECT" --region="$REGION"; then
  run gcloud compute networks subnets create "$GVNIC_SUBNET" --project="$PROJECT" --region="$REGION" \\
    --network="$GVNIC_VPC" --range="$GVNIC_RANGE" --description="$OWNER_MARK"
fi
if ! exists gcloud compute firewall-rules describe "$GVNIC_FIREWALL" --project="$PROJECT"; then
  run gcloud compute firewall-rules create "$GVNIC_FIREWALL" --project="$PROJECT" --network="$GVNIC_VPC" \\
    --action=ALLOW --rules=tcp:0-65535,udp:0-65535,icmp --source-ranges=%(source)s --description="$OWNER_MARK"
fi
"""

RDMA_NETWORK = """\
# The RoCE network profile is zonal: every RDMA NIC must be in $ZONE.
if ! exists gcloud compute networks describe "$RDMA_VPC" --project="$PROJECT"; then
  run gcloud compute networks create "$RDMA_VPC" --project="$PROJECT" --subnet-mode=custom \\
    --network-profile="$ZONE-vpc-roce" --description="$OWNER_MARK"
fi
for i in "${!RDMA_SUBNETS[@]}"; do
  if ! exists gcloud compute networks subnets describe "${RDMA_SUBNETS[$i]}" --project="$PROJECT" --region="$REGION"; then
    run gcloud compute networks subnets create "${RDMA_SUBNETS[$i]}" --project="$PROJECT" --region="$REGION" \\
      --network="$RDMA_VPC" --range="${RDMA_RANGES[$i]}" --description="$OWNER_MARK"
  fi
done
"""

CLUSTER_VERSION = """\
# The GKE version must not be older than the highest floor of what this cluster uses:
%(floors)s
# An existing cluster's control plane version; for a new one GKE_VERSION, else the region's default.
cluster_version=''
if exists gcloud container clusters describe "$CLUSTER" --project="$PROJECT" --location="$REGION"; then
  query cluster_version EXISTING_GKE_VERSION gcloud container clusters describe "$CLUSTER" --project="$PROJECT" \\
    --location="$REGION" --format='value(currentMasterVersion)'
  require_min_version "$cluster_version" "$MIN_GKE_VERSION" "cluster $CLUSTER runs GKE $cluster_version, older than" \\
    "upgrade it (gcloud container clusters upgrade) or delete it"
else
  cluster_version="${GKE_VERSION:-}"
  if [ -z "$cluster_version" ]; then
    query cluster_version DEFAULT_GKE_VERSION gcloud container get-server-config --project="$PROJECT" \\
      --location="$REGION" --format='value(defaultClusterVersion)'
  fi
  require_min_version "$cluster_version" "$MIN_GKE_VERSION" "GKE $cluster_version is older than" \\
    "set GKE_VERSION to a newer version"
fi
echo "    = GKE $cluster_version: not older than $MIN_GKE_VERSION ($MIN_GKE_FOR)"
"""

LUSTRE_PORT_NOTE = """\
# Lustre on its own port 988: from GKE 1.33.2-gke.4655000 the Lustre CSI driver needs neither the
# instance's --gke-support-enabled nor the cluster's --enable-legacy-lustre-port, which GKE marks
# deprecated; the GKE version floor step keeps the cluster at or past that version.
"""

STANDARD_CLUSTER = """\
# --addons replaces GKE's default add-on list, so the two defaults (HTTP load balancing, Horizontal
# Pod Autoscaling) are named beside the Ray operator and the Lustre CSI driver.
if ! exists gcloud container clusters describe "$CLUSTER" --project="$PROJECT" --location="$REGION"; then
  run gcloud container clusters create "$CLUSTER" \\
    --project="$PROJECT" \\
    --location="$REGION" \\
    --node-locations="$ZONE" \\
    --cluster-version="$cluster_version" \\
    --network="$CLUSTER_VPC" \\
    --enable-dataplane-v2 \\
    --enable-ip-alias \\
%(multi)s    --addons=HttpLoadBalancing,HorizontalPodAutoscaling,RayOperator,LustreCsiDriver \\
    --workload-pool="$PROJECT.svc.id.goog" \\
    --machine-type="$CPU_MACHINE_TYPE" \\
    --num-nodes=1 \\
    --labels="$OWNER_LABEL"
fi
"""

AUTOPILOT_CLUSTER = """\
# Autopilot has Workload Identity and Dataplane V2 built in.
if ! exists gcloud container clusters describe "$CLUSTER" --project="$PROJECT" --location="$REGION"; then
  run gcloud container clusters create-auto "$CLUSTER" \\
    --project="$PROJECT" \\
    --location="$REGION" \\
    --cluster-version="$cluster_version" \\
    --network="$CLUSTER_VPC" \\
    --enable-multi-networking \\
    --enable-ray-operator \\
    --enable-lustre-csi-driver \\
    --labels="$OWNER_LABEL"
fi
# No node pool in Autopilot: GKE adds GPU nodes for the pods that ask for them (the accelerator
# node selectors in the values file).
"""

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
# Spot, on-demand and flex-start: from 0 up to the group's nodes, so no GPU node exists before the
# chart's worker pods ask for one, and the autoscaler removes a node once no worker pod needs it.
# The pool has one zone ($ZONE), so the per-zone and the total bounds are the same; the total
# ones are used, as the flex-start pool did before Spot and on-demand were autoscaled.
FROM_ZERO = [
    "--enable-autoscaling",
    "--num-nodes=0",
    "--total-min-nodes=0",
    "--total-max-nodes={nodes}",
    "--location-policy=ANY",  # [CA] needs autoscaling and 0 initial nodes; the Spot default
]
PROVISIONING_FLAGS = {
    "spot": ["--spot", *FROM_ZERO],
    "on-demand": [*FROM_ZERO],
    # Fixed at the group's nodes: the reservation is paid for whether its VMs run or not [RES], so
    # removing idle nodes saves nothing but their boot disks, and nodes kept up keep the image pulled.
    "reservation": ["--num-nodes={nodes}", "--reservation-affinity=specific", "--reservation={reservation}"],
    # DWS flex-start: the autoscaler obtains up to the group's nodes [CA].
    "flex-start": ["--flex-start", *FROM_ZERO, "--reservation-affinity=none", "--no-enable-autorepair"],
}

# The comment above a pool in the generated script, so its reader knows what is paid for.
POOL_SIZING = {
    "autoscaled": (
        "# Autoscaled from 0 to {nodes} nodes: the cluster autoscaler adds GPU nodes when the chart's worker\n"
        "# pods cannot be scheduled and removes a node after it has been unneeded for about 10 minutes, so no\n"
        "# GPU node is billed before `helm install` or after the worker pods are gone. Location policy ANY\n"
        "# requires autoscaling and 0 initial nodes. The cluster keeps GKE's default autoscaling profile.\n"
        "# https://docs.cloud.google.com/kubernetes-engine/docs/concepts/cluster-autoscaler\n"
        "# https://github.com/kubernetes/autoscaler/blob/master/cluster-autoscaler/FAQ.md#how-does-scale-down-work\n"
    ),
    "reservation": (
        "# Fixed at {nodes} nodes, not autoscaled: a reservation is billed at the on-demand rate until it is\n"
        "# deleted, whether or not VMs use it, and a VM that consumes it costs nothing more (only its disks).\n"
        "# Removing idle nodes would save almost nothing; kept up, they keep the image pulled. To stop paying\n"
        "# for the GPUs, delete the reservation.\n"
        "# https://docs.cloud.google.com/compute/docs/instances/reservations-overview#reservation-billing\n"
    ),
}


def _q(value: str) -> str:
    return shlex.quote(value)


def _nics_note(o: InfraOptions) -> str:
    if o.dranet:
        return (
            "# Managed DRANET: GKE attaches the RDMA NICs (--accelerator-network-profile=auto) and publishes them\n"
            "# for the workers' mrdma.google.com claims; no additional node networks.\n"
        )
    last = 1 + profile(o.gpu).rdma_nics
    return f"# eth1 on the gVNIC VPC, eth2..eth{last} on the RoCE subnets: the same names as network.* in the values file.\n"


def node_pool(o: InfraOptions, group: GroupSpec) -> str:
    rdma = networks.plan(o.network_prefix, profile(o.gpu).rdma_nics).rdma
    fill = {"nodes": str(group.replicas), "reservation": group.reservation}
    flags = [
        '--project="$PROJECT"',
        '--cluster="$CLUSTER"',
        '--location="$REGION"',
        '--node-locations="$ZONE"',
        '--machine-type="$MACHINE_TYPE"',
        '--accelerator="type=$ACCELERATOR,count=$GPUS_PER_NODE,gpu-driver-version=latest"',
        *(
            ["--accelerator-network-profile=auto"]
            if o.dranet
            else [
                '--additional-node-network="network=$GVNIC_VPC,subnetwork=$GVNIC_SUBNET"',
                *(f'--additional-node-network="network=$RDMA_VPC,subnetwork=${{RDMA_SUBNETS[{i}]}}"' for i in range(len(rdma))),
            ]
        ),
        *(_flag(f, fill) for f in PROVISIONING_FLAGS[group.provisioning]),
    ]
    if o.preload_image:
        flags += ["--enable-image-streaming", '--secondary-boot-disk="disk-image=$PRELOAD_IMAGE,mode=CONTAINER_IMAGE_CACHE"']
    lines = " \\\n".join(f"    {f}" for f in flags)
    sizing = POOL_SIZING["reservation" if group.provisioning == "reservation" else "autoscaled"].format(nodes=group.replicas)
    pool = _q(o.pool_name(group))
    return (
        f"# Worker group {group.name}: {group.provisioning}.\n"
        + sizing
        + _nics_note(o)
        + f'if ! exists gcloud container node-pools describe {pool} --project="$PROJECT" --cluster="$CLUSTER" \\\n'
        '    --location="$REGION"; then\n'
        f"  run gcloud container node-pools create {pool} \\\n"
        f"{lines}\n"
        "fi\n"
    )


def _flag(template: str, fill: dict[str, str]) -> str:
    name, eq, value = template.partition("=")
    if not eq or "{" not in value:
        return template
    return f"{name}={_q(value.format(**fill))}"


RDMA_INSTALLER = """\
# Google's NCCL RDMA installer DaemonSet (gIB into /home/kubernetes/bin/gib on GPU nodes), from
# GoogleCloudPlatform/container-engine-accelerators at a pinned commit (--rdma-installer-commit),
# never from a moving branch: at the default commit it runs gIB %(pinned)s.
if ! exists kubectl get daemonset nccl-rdma-installer --namespace="$RDMA_INSTALLER_NAMESPACE"; then
  run kubectl apply -f "$RDMA_INSTALLER_URL"
%(set_image)sfi
%(objects)s"""
NETWORK_OBJECTS_NOTE = {
    "rdma": """\
# The GKE Network and GKENetworkParamSet objects (gvnic-1, rdma-0..rdma-%(last)d) are not created here:
# the Helm chart renders them from network.* in the values file (network.createObjects), which
# holds the same VPC and subnet names as this script. One owner keeps them from drifting.
""",
    # GKE's "Set up GKE managed DRANET": no Network or GKENetworkParamSet objects.
    "dranet": """\
# Managed DRANET needs no GKE Network objects: the chart's worker pods claim the NICs GKE publishes
# (a ResourceClaimTemplate of device class mrdma.google.com, network.mode: dranet).
""",
}

SET_GIB_IMAGE = """\
  # --gib-version: another gIB than the manifest's; its init container copies gIB to the node.
  run kubectl set image daemonset/nccl-rdma-installer --namespace="$RDMA_INSTALLER_NAMESPACE" \\
    nccl-rdma-installer="$GIB_IMAGE"
"""

# The Pod Security labels of the release's namespace (the test bed labels its namespaces so too).
NAMESPACE_LABELS = {
    "pod-security.kubernetes.io/enforce": "privileged",
    "pod-security.kubernetes.io/warn": "baseline",
    "pod-security.kubernetes.io/audit": "baseline",
}
_LABEL_ARGS = [f"{k}={v}" for k, v in NAMESPACE_LABELS.items()]
NAMESPACE_STEP = """\
# The release's namespace, at the Pod Security level the chart needs: the GPU workers mount the
# NVIDIA driver and gIB from the node (hostPath), which the baseline level forbids, so enforce
# privileged; warn and audit at baseline report just those two volumes.
if ! exists kubectl get namespace "$NAMESPACE"; then
  run kubectl create namespace "$NAMESPACE"
fi
level=''
query level '' kubectl get namespace "$NAMESPACE" -o jsonpath='{.metadata.labels.pod-security\\.kubernetes\\.io/enforce}'
if [ "$level" != privileged ]; then
  run kubectl label namespace "$NAMESPACE" --overwrite {labels}
else
  echo "    = $NAMESPACE enforces the privileged Pod Security level"
fi
""".replace("{labels}", f"{_LABEL_ARGS[0]} \\\n    {' '.join(_LABEL_ARGS[1:])}")

LUSTRE_ACCESS = """\
# Private services access on the cluster's VPC: Managed Lustre takes its addresses from this range.
if ! exists gcloud compute addresses describe "$LUSTRE_RANGE" --global --project="$PROJECT"; then
  run gcloud compute addresses create "$LUSTRE_RANGE" --global --project="$PROJECT" --purpose=VPC_PEERING \\
    --prefix-length=%(prefix)d --network="$CLUSTER_VPC" --description="$OWNER_MARK"
fi
if ! exists gcloud compute firewall-rules describe "$LUSTRE_FIREWALL" --project="$PROJECT"; then
  cidr=''
  query cidr RANGE_CIDR gcloud compute addresses describe "$LUSTRE_RANGE" --global --project="$PROJECT" \\
    --format='value[separator=/](address,prefixLength)'
  run gcloud compute firewall-rules create "$LUSTRE_FIREWALL" --project="$PROJECT" --network="$CLUSTER_VPC" \\
    --allow=tcp:988 --source-ranges="$cidr" --description="$OWNER_MARK"
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
# In the GPU nodes' zone, on the cluster's VPC, on Lustre's own port (no --gke-support-enabled).
if ! exists gcloud lustre instances describe "$LUSTRE_INSTANCE" --project="$PROJECT" --location="$ZONE"; then
  run gcloud lustre instances create "$LUSTRE_INSTANCE" --project="$PROJECT" --location="$ZONE" \\
    --network="projects/$PROJECT/global/networks/$CLUSTER_VPC" \\
    --capacity-gib="$LUSTRE_CAPACITY_GIB" --per-unit-storage-throughput="$LUSTRE_THROUGHPUT" \\
    --filesystem="$LUSTRE_FS" --description="$OWNER_MARK" --labels="$OWNER_LABEL"
fi
"""


def generate_command(o: InfraOptions) -> str:
    """The values-generator command with the options this script shares with it."""
    argv = ["python", "-m", "generator", "--gpu", o.gpu]
    if o.mode != "standard":
        argv += ["--mode", o.mode]
    if o.groups:
        argv += [
            "--groups",
            ",".join(str(GroupSpec(g.name, g.replicas, g.provisioning, reservation_name(g.reservation))) for g in o.groups),
        ]
    else:
        argv += ["--nodes", str(o.nodes), "--provisioning", o.provisioning]
        if o.reservation:
            # Pods select the reservation by its name (cloud.google.com/reservation-name), also when
            # the node pool was given its full path.
            argv += ["--reservation", reservation_name(o.reservation)]
            if (owner := reservation_project(o.reservation)) and owner != o.project:
                argv += ["--reservation-project", owner]
    if o.dranet:
        argv += ["--network", "dranet"]
    elif o.network_prefix != networks.DEFAULT_PREFIX:
        argv += ["--network-prefix", o.network_prefix]
    if o.kueue:
        argv += ["--kueue-queue", o.kueue_queue]
    return shlex.join(argv)


def _quota_step(o: InfraOptions) -> Step | None:
    need: dict[str, int] = {}
    gpus = profile(o.gpu).gpus_per_node
    for g in o.worker_groups:
        if g.provisioning == "reservation":
            continue  # the reservation holds its GPUs already
        metric = ("PREEMPTIBLE_" if g.provisioning in ("spot", "flex-start") else "") + profile(o.gpu).quota_metric
        need[metric] = need.get(metric, 0) + g.replicas * gpus
    if not need:
        return None
    calls = "".join(f"need_gpus {m} {n}\n" for m, n in need.items())
    needs = ", ".join(f"{m}: {n}" for m, n in need.items())
    return Step("GPU quota", QUOTA_CHECK % {"needs": needs, "calls": calls})


def _version_step(o: InfraOptions) -> Step:
    floors = "".join(f"#   {f.version}  {f.what} ({f.source})\n" for f in versions.floors(profile(o.gpu), _flex(o), o.network_mode))
    return Step("GKE version floor", CLUSTER_VERSION % {"floors": floors.rstrip("\n")})


def _cluster_step(o: InfraOptions) -> Step:
    if o.mode == "standard":
        # Managed DRANET attaches the RDMA NICs itself: the cluster needs Dataplane V2 only, not
        # multi-networking (GKE's "Set up GKE managed DRANET").
        multi = "" if o.dranet else "    --enable-multi-networking \\\n"
        what = "Dataplane V2 for managed DRANET" if o.dranet else "multi-networking"
        return Step(
            f"GKE Standard cluster ({what}, Ray operator, Lustre CSI driver)",
            LUSTRE_PORT_NOTE + STANDARD_CLUSTER % {"multi": multi},
        )
    return Step(
        "GKE Autopilot cluster (multi-networking, Ray operator, Lustre CSI driver)",
        LUSTRE_PORT_NOTE + AUTOPILOT_CLUSTER,
    )


def _flex(o: InfraOptions) -> bool:
    return any(g.provisioning == "flex-start" for g in o.worker_groups)


def _installer_step(o: InfraOptions) -> Step:
    set_image = SET_GIB_IMAGE if o.gib_version != GIB_VERSION else ""
    objects = NETWORK_OBJECTS_NOTE[o.network_mode] % {"last": profile(o.gpu).rdma_nics - 1}
    return Step("NCCL RDMA installer", RDMA_INSTALLER % {"pinned": GIB_VERSION, "set_image": set_image, "objects": objects})


def bring_up_steps(o: InfraOptions) -> list[Step]:
    p = profile(o.gpu)
    steps = [Step("Enable the Google Cloud APIs", ENABLE_APIS)]
    if quota := _quota_step(o):
        steps.append(quota)
    steps.append(Step("Cluster VPC (eth0, Managed Lustre)", CLUSTER_NETWORK))
    if not o.dranet:  # managed DRANET: GKE attaches the RDMA NICs, no VPC of ours
        steps += [
            Step("gVNIC VPC, subnet and firewall (eth1)", GVNIC_NETWORK % {"source": GVNIC_FIREWALL_SOURCE}),
            Step(f"RoCE VPC and its RDMA subnets (eth2..eth{1 + p.rdma_nics})", RDMA_NETWORK),
        ]
    steps += [_version_step(o), _cluster_step(o), Step("Cluster credentials for kubectl", CREDENTIALS)]
    if o.mode == "standard":
        steps += [Step(f"GPU node pool {o.pool_name(g)}", node_pool(o, g)) for g in o.worker_groups]
    steps.append(_installer_step(o))
    if dra.needed(p, o.mode):
        nodes = sum(g.replicas for g in o.worker_groups)
        steps.append(Step(f"NVIDIA DRA driver {dra.CHART_VERSION} (ComputeDomain)", dra.install_step(p, nodes)))
    steps.append(Step("Namespace and its Pod Security level", NAMESPACE_STEP))
    if o.kueue:
        steps += [Step("Kueue", kueue.INSTALL)]
        if kueue.dra_needed(o):
            steps.append(Step("Kueue's DRA device classes", kueue.dra_config_step()))
        steps.append(Step("Kueue queues", kueue.config_step(o)))
    steps += [
        Step("Managed Lustre: private services access", LUSTRE_ACCESS % {"prefix": LUSTRE_PSA_PREFIX_LENGTH}),
        Step("Managed Lustre instance", LUSTRE_INSTANCE),
        Step("Values overlay for the chart", overlay.step(o, generate_command(o))),
    ]
    return steps


# --- teardown -------------------------------------------------------------------------------


def _owned(describe: str, delete: str, what: str, mark: str) -> str:
    """Delete a resource only when it exists and carries this cluster's mark (`mark`: FORMAT WANT of `owned`)."""
    return (
        f"if exists {describe}; then\n"
        f"  if owned {mark} {describe}; then\n"
        f"    run {delete}\n"
        "  else\n"
        f'    echo "    ! kept {what}: this script did not create it"\n'
        "  fi\n"
        "fi\n"
    )


LABEL = "'value(resourceLabels.nemo-rl-gke-infra)' \"$CLUSTER\""
LUSTRE_LABEL = "'value(labels.nemo-rl-gke-infra)' \"$CLUSTER\""
DESCRIPTION = "'value(description)' \"$OWNER_MARK\""

TEARDOWN_LUSTRE = _owned(
    'gcloud lustre instances describe "$LUSTRE_INSTANCE" --project="$PROJECT" --location="$ZONE"',
    'gcloud lustre instances delete "$LUSTRE_INSTANCE" --project="$PROJECT" --location="$ZONE" --quiet',
    "Managed Lustre instance $LUSTRE_INSTANCE",
    LUSTRE_LABEL,
)

TEARDOWN_LUSTRE_ACCESS = (
    """\
keep_range=0
if exists gcloud compute addresses describe "$LUSTRE_RANGE" --global --project="$PROJECT" &&
  ! owned 'value(description)' "$OWNER_MARK" gcloud compute addresses describe "$LUSTRE_RANGE" --global --project="$PROJECT"; then
  echo "    ! kept range $LUSTRE_RANGE and its peering: this script did not create it"
  keep_range=1
fi
ranges=''
query ranges "$LUSTRE_RANGE" gcloud services vpc-peerings list --project="$PROJECT" --network="$CLUSTER_VPC" \\
  --service=servicenetworking.googleapis.com --flatten=reservedPeeringRanges --format='value(reservedPeeringRanges)'
if [ "$keep_range" = 0 ] && [ "$ranges" = "$LUSTRE_RANGE" ]; then
  # Can be refused for a while after the instance is deleted; run the teardown again later.
  run gcloud services vpc-peerings delete --project="$PROJECT" --network="$CLUSTER_VPC" \\
    --service=servicenetworking.googleapis.com --quiet
elif has_line "$ranges" "$LUSTRE_RANGE"; then
  echo "    ! the private services connection of $CLUSTER_VPC also serves other ranges: it and $LUSTRE_RANGE are kept"
  keep_range=1
fi
"""
    + _owned(
        'gcloud compute firewall-rules describe "$LUSTRE_FIREWALL" --project="$PROJECT"',
        'gcloud compute firewall-rules delete "$LUSTRE_FIREWALL" --project="$PROJECT" --quiet',
        "firewall rule $LUSTRE_FIREWALL",
        DESCRIPTION,
    )
    + """\
if [ "$keep_range" = 0 ]; then
"""
    + "".join(
        f"  {line}\n"
        for line in _owned(
            'gcloud compute addresses describe "$LUSTRE_RANGE" --global --project="$PROJECT"',
            'gcloud compute addresses delete "$LUSTRE_RANGE" --global --project="$PROJECT" --quiet',
            "range $LUSTRE_RANGE",
            DESCRIPTION,
        ).splitlines()
    )
    + "fi\n"
)

TEARDOWN_CLUSTER = "# With the cluster go everything inside it: %(inside)s.\n" + _owned(
    'gcloud container clusters describe "$CLUSTER" --project="$PROJECT" --location="$REGION"',
    'gcloud container clusters delete "$CLUSTER" --project="$PROJECT" --location="$REGION" --quiet',
    "cluster $CLUSTER",
    LABEL,
)

TEARDOWN_RDMA_NETWORK = (
    """\
for (( i = ${#RDMA_SUBNETS[@]} - 1; i >= 0; i-- )); do
"""
    + "".join(
        f"  {line}\n"
        for line in _owned(
            'gcloud compute networks subnets describe "${RDMA_SUBNETS[$i]}" --project="$PROJECT" --region="$REGION"',
            'gcloud compute networks subnets delete "${RDMA_SUBNETS[$i]}" --project="$PROJECT" --region="$REGION" --quiet',
            "subnet ${RDMA_SUBNETS[$i]}",
            DESCRIPTION,
        ).splitlines()
    )
    + "done\n"
    + _owned(
        'gcloud compute networks describe "$RDMA_VPC" --project="$PROJECT"',
        'gcloud compute networks delete "$RDMA_VPC" --project="$PROJECT" --quiet',
        "VPC $RDMA_VPC",
        DESCRIPTION,
    )
)

TEARDOWN_GVNIC_NETWORK = (
    _owned(
        'gcloud compute firewall-rules describe "$GVNIC_FIREWALL" --project="$PROJECT"',
        'gcloud compute firewall-rules delete "$GVNIC_FIREWALL" --project="$PROJECT" --quiet',
        "firewall rule $GVNIC_FIREWALL",
        DESCRIPTION,
    )
    + _owned(
        'gcloud compute networks subnets describe "$GVNIC_SUBNET" --project="$PROJECT" --region="$REGION"',
        'gcloud compute networks subnets delete "$GVNIC_SUBNET" --project="$PROJECT" --region="$REGION" --quiet',
        "subnet $GVNIC_SUBNET",
        DESCRIPTION,
    )
    + _owned(
        'gcloud compute networks describe "$GVNIC_VPC" --project="$PROJECT"',
        'gcloud compute networks delete "$GVNIC_VPC" --project="$PROJECT" --quiet',
        "VPC $GVNIC_VPC",
        DESCRIPTION,
    )
)

TEARDOWN_CLUSTER_NETWORK = "# A VPC that existed before the bring-up (such as the project's default) carries no mark and stays.\n" + _owned(
    'gcloud compute networks describe "$CLUSTER_VPC" --project="$PROJECT"',
    'gcloud compute networks delete "$CLUSTER_VPC" --project="$PROJECT" --quiet',
    "VPC $CLUSTER_VPC",
    DESCRIPTION,
)

_TEARDOWN_SUMMARY = """\
  - Managed Lustre instance $LUSTRE_INSTANCE in $ZONE, with all its data
  - private services access range $LUSTRE_RANGE (and its peering if nothing else uses it), firewall rule $LUSTRE_FIREWALL
  - GKE cluster $CLUSTER in $REGION, with everything running in it
%(vpcs)s  - VPC $CLUSTER_VPC
Each only if this script created it (it carries the mark "$OWNER_MARK" or the label $OWNER_LABEL);
anything else, such as a VPC that existed before, is kept.
"""


TEARDOWN_VPCS = """\
  - VPC $RDMA_VPC and its ${#RDMA_SUBNETS[@]} subnets
  - VPC $GVNIC_VPC, its subnet $GVNIC_SUBNET and firewall rule $GVNIC_FIREWALL
"""


def teardown_summary(o: InfraOptions) -> str:
    return _TEARDOWN_SUMMARY % {"vpcs": "" if o.dranet else TEARDOWN_VPCS}


def teardown_steps(o: InfraOptions) -> list[Step]:
    inside = (
        "the GPU node pools, the NCCL RDMA installer, the namespace" if o.mode == "standard" else ("the NCCL RDMA installer, the namespace")
    )
    if o.kueue:
        inside += ", Kueue and its queues"
    if dra.needed(profile(o.gpu), o.mode):
        inside += ", the NVIDIA DRA driver"
    steps = [
        Step("Managed Lustre instance", TEARDOWN_LUSTRE),
        Step("Managed Lustre: private services access", TEARDOWN_LUSTRE_ACCESS),
        Step("GKE cluster", TEARDOWN_CLUSTER % {"inside": inside}),
    ]
    if not o.dranet:
        steps += [
            Step("RoCE VPC and its RDMA subnets", TEARDOWN_RDMA_NETWORK),
            Step("gVNIC VPC, subnet and firewall", TEARDOWN_GVNIC_NETWORK),
        ]
    return [*steps, Step("Cluster VPC", TEARDOWN_CLUSTER_NETWORK)]
