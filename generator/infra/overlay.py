"""The values overlay the bring-up script writes (`values-infra.yaml`): what it created, in the
chart's keys, for `helm install -f values-<gpu>.yaml -f values-infra.yaml` and `python -m
generator validate values-<gpu>.yaml -f values-infra.yaml`.

Everything but the Lustre instance's address is known when the script is generated, so the
overlay is YAML written here, with two shell variables the script fills from `gcloud lustre
instances describe`. Helm replaces a list whole when it merges values, so the overlay carries
no list the user edits: `workerGroups` (replicas, provisioning, reservations, node selectors,
tolerations) has one home, the user's values file, which the generator writes from the same
options the script prints; the overlay only names the pools it made, in a comment.
`network.rdma` is the script's own (the networks it made) and is written whole.
"""

from __future__ import annotations

from typing import Any

import yaml

from generator.gke.machines import CPU_POOL
from generator.gke.profiles import profile
from generator.gke.provisioning import CPU_POOL_NAME, gpu_node_taints, gpu_pool_labels
from generator.gke.topology import LEVELS
from generator.infra.kueue import VERSION as KUEUE_VERSION
from generator.infra.options import InfraOptions, reservation_name, reservation_project
from generator.values.build import network_values

IP, FILESYSTEM = "@LUSTRE_IP@", "@LUSTRE_FS@"

STEP = """\
mount_point=''
query mount_point "LUSTRE_IP@tcp:/$LUSTRE_FS" gcloud lustre instances describe "$LUSTRE_INSTANCE" \\
  --project="$PROJECT" --location="$ZONE" --format='value(mountPoint)'
case "$mount_point" in
  *@tcp:/*) ;;
  *) die "unexpected mountPoint '$mount_point' of Lustre instance $LUSTRE_INSTANCE (want IP@tcp:/FILESYSTEM)" ;;
esac
lustre_ip="${mount_point%%%%@*}"
lustre_fs="${mount_point##*:/}"
overlay="$(
  cat <<EOF
%(overlay)sEOF
)"
if [ "$DRY_RUN" = 1 ]; then
  printf '\\n%%s would hold:\\n' "$VALUES_OUT"
  printf '%%s\\n' "$overlay" | sed 's/^/    | /'
else
  printf '%%s\\n' "$overlay" >"$VALUES_OUT"
  printf '\\nWrote %%s: the Lustre volume (%%s), networks%(kueue_note)s (your values file keeps the worker groups).\\n' "$VALUES_OUT" \\
    "$PROJECT/$ZONE/$LUSTRE_INSTANCE"
fi
cat <<EOF

%(next)sEOF
"""
NEXT_GENERATED = """\
Next: write the values file, check both together, then install the chart with both:
  %(generate)s
  python -m generator validate %(values_file)s -f $VALUES_OUT
  helm install nemo-rl charts/nemo-rl-gke --namespace=$NAMESPACE -f %(values_file)s -f $VALUES_OUT
"""
# One Standard GPU node: the README's quickstart is the cheapest proof that the cluster works.
NEXT_QUICKSTART = """\
Next: the quickstart (Qwen2.5-1.5B, 20 steps, no token), the cheapest proof that this cluster works:
  python -m generator validate %(quickstart)s -f $VALUES_OUT
  python -m generator doctor %(quickstart)s -f $VALUES_OUT -n $NAMESPACE
  helm install nemo-rl charts/nemo-rl-gke --namespace=$NAMESPACE -f %(quickstart)s -f $VALUES_OUT
A run of your own on this cluster: %(generate)s, then the same with %(values_file)s.
"""


def values(o: InfraOptions) -> dict[str, Any]:
    """The overlay's content, with IP and FILESYSTEM standing for the instance's address."""
    p = profile(o.gpu)
    out: dict[str, Any] = {
        "storage": {
            "lustre": {
                "volumeHandle": f"{o.project}/{o.zone}/{o.cluster}-lustre",
                "ip": IP,
                "filesystem": FILESYSTEM,
                "capacity": f"{o.lustre_capacity_gib}Gi",
            }
        },
        # Managed DRANET: GKE attached the NICs, no network of the script's to name.
        "network": {"mode": "dranet"}
        if o.dranet
        else {k: v for k, v in network_values(o.network_prefix, p.rdma_nics).items() if k in ("gvnic", "rdma")},
    }
    if o.mode == "standard":
        # The pools made, for `validate -f values-infra.yaml` (the chart renders nothing from it).
        out["gke"] = {"nodePools": node_pools(o)}
    if o.kueue:
        # kueue.version: the release installed, which decides how many worker groups Kueue admits.
        out["kueue"] = {"enabled": True, "queueName": o.kueue_queue, "version": KUEUE_VERSION, "topology": topology_values(o)}
    return out


def node_pools(o: InfraOptions) -> list[dict[str, Any]]:
    """The node pools the script creates (Standard): the CPU pool, then one per worker group, each
    with the labels and taints GKE gives its nodes beyond those of every node (gke/provisioning.py)."""
    p = profile(o.gpu)
    pools: list[dict[str, Any]] = [{"name": CPU_POOL_NAME, "machineType": CPU_POOL.machine_type}]
    for g in o.worker_groups:
        owner = reservation_project(g.reservation) if g.provisioning == "reservation" else ""
        labels = gpu_pool_labels(p.node_label, g.provisioning, reservation_name(g.reservation), owner, o.dranet)
        taints = [{"key": t.key, "value": t.value, "effect": t.effect} for t in gpu_node_taints(g.provisioning, p.cpu_arch)]
        pools.append({"name": o.pool_name(g), "machineType": p.machine_type, "labels": labels, "taints": taints})
    return pools


def topology_values(o: InfraOptions) -> dict[str, str]:
    return {"mode": o.topology, "level": LEVELS[0]}


def _pools(o: InfraOptions) -> str:
    """The GPU pools the script made, for the overlay's header (the values file holds the groups)."""
    parts = []
    for g in o.worker_groups:
        how = g.provisioning
        if g.reservation:
            owner = reservation_project(g.reservation)
            how += f" {reservation_name(g.reservation)}" + (f" of project {owner}" if owner and owner != o.project else "")
        parts.append(f"{g.name}={g.replicas} ({how})")
    return ", ".join(parts)


def text(o: InfraOptions) -> str:
    header = (
        "# Written by the nemo-rl-gke infra script: what it created, in the chart's keys.\n"
        f"# Use it after the generator's file: -f values-{o.gpu}.yaml -f {o.values_out}\n"
        f"# GPU pools made: {_pools(o)}. workerGroups is not set here: your values file holds it,\n"
        "# so your edits to it (replicas, tolerations, node selectors) stay when both are installed.\n"
    )
    body = yaml.safe_dump(values(o), sort_keys=False)
    return header + body.replace(IP, "$lustre_ip").replace(FILESYSTEM, "$lustre_fs")


def step(o: InfraOptions, generate: str) -> str:
    fill = {"generate": generate, "values_file": f"values-{o.gpu}.yaml", "quickstart": f"examples/quickstart-{o.gpu}.yaml"}
    quickstart = o.mode == "standard" and not o.groups and o.nodes == 1
    return STEP % {
        "overlay": text(o),
        "next": (NEXT_QUICKSTART if quickstart else NEXT_GENERATED) % fill,
        "kueue_note": ", Kueue queue" if o.kueue else "",
    }
