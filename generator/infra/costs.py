"""What the bring-up script lists before it asks: each resource it may create, the costly ones with
what they cost per hour where Google publishes a fixed figure and where Google publishes the
price otherwise (GPU VM prices vary by region, provisioning model and, for Spot, over time).

Sources:
- GKE: "a cluster management fee of $0.10 per cluster per hour" for Standard and Autopilot
  clusters alike (https://cloud.google.com/kubernetes-engine/pricing).
- Compute Engine VM prices by machine type and region (https://cloud.google.com/compute/vm-instance-pricing),
  Spot prices (https://cloud.google.com/spot-vms/pricing); a reservation is billed at the
  on-demand rate whether or not VMs use it (docs/install-on-gke.md cites the page).
- Managed Lustre: priced per GiB of capacity by performance tier; the script gives the capacity and
  tier and points to Google Cloud's pricing calculator (https://cloud.google.com/products/calculator).
"""

from __future__ import annotations

from generator.gke.profiles import profile
from generator.infra import dra, kueue
from generator.infra.options import InfraOptions

GKE_FEE = "USD 0.10 per hour (GKE's cluster management fee, https://cloud.google.com/kubernetes-engine/pricing)"
VM_PRICES = "https://cloud.google.com/compute/vm-instance-pricing"
SPOT_PRICES = "https://cloud.google.com/spot-vms/pricing"
CALCULATOR = "https://cloud.google.com/products/calculator"
WHEN = {
    "spot": f"Spot, 0 nodes until the worker pods ask, billed while they run; price: {SPOT_PRICES}",
    "on-demand": f"on-demand, 0 nodes until the worker pods ask, billed while they run; price: {VM_PRICES}",
    "flex-start": f"flex-start (DWS), 0 nodes until the worker pods ask, billed while they run; price: {VM_PRICES}",
    "reservation": "from the reservation, billed with it (at the on-demand rate) whether used or not",
}


def _gpu_lines(o: InfraOptions) -> list[str]:
    p = profile(o.gpu)
    if o.mode == "autopilot":
        return [
            f"GPU nodes: none created here; Autopilot adds {p.machine_type} nodes for the worker pods,"
            f" billed while they run; price: {VM_PRICES}"
        ]
    lines = []
    for g in o.worker_groups:
        count = f"{g.replicas}" if g.provisioning == "reservation" else f"0 to {g.replicas}"
        lines.append(
            f"GPU node pool {o.pool_name(g)}: {count} x {p.machine_type} ({p.gpus_per_node} x {p.display_name}), {WHEN[g.provisioning]}"
        )
    return lines


def plan_summary(o: InfraOptions) -> str:
    """The list shown before the question, one '  - ' line per item (bash heredoc text: $NAMES expand)."""
    mode = "Standard" if o.mode == "standard" else "Autopilot"
    cluster = f"GKE {mode} cluster $CLUSTER in $REGION: {GKE_FEE}"
    if o.mode == "standard":
        cluster += f"; one {'$CPU_MACHINE_TYPE'} CPU node, price: {VM_PRICES}"
    vpcs = "VPC $CLUSTER_VPC (MTU $LUSTRE_MTU, auto subnets) unless it exists"
    if o.dranet:
        vpcs += " (managed DRANET attaches the RDMA NICs: no VPC of its own): no charge of its own"
    else:
        vpcs += (
            "; VPC $GVNIC_VPC with one subnet and a firewall rule;"
            " VPC $RDMA_VPC (RoCE) with ${#RDMA_SUBNETS[@]} subnets: no charge of their own"
        )
    items = [
        "the Compute Engine, GKE, Service Networking and Managed Lustre APIs",
        vpcs,
        cluster,
        *_gpu_lines(o),
        f"NCCL RDMA installer (gIB {o.gib_version}) and namespace $NAMESPACE (Pod Security enforce=privileged)",
        *(
            [f"NVIDIA DRA driver (Helm chart {dra.CHART_VERSION}) in namespace $DRA_NAMESPACE"]
            if dra.needed(profile(o.gpu), o.mode)
            else []
        ),
        *([f"Kueue {kueue.VERSION}, its ClusterQueue $KUEUE_CLUSTER_QUEUE and LocalQueue $KUEUE_QUEUE"] if o.kueue else []),
        "private services access range $LUSTRE_RANGE on $CLUSTER_VPC and a firewall rule for Lustre (port 988)",
        f"Managed Lustre $LUSTRE_INSTANCE in $ZONE: $LUSTRE_CAPACITY_GIB GiB at $LUSTRE_THROUGHPUT MB/s per TiB,"
        f" billed per GiB until it is deleted; price: {CALCULATOR}",
    ]
    return "".join(f"  - {item}\n" for item in items)
