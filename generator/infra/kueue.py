"""Kueue for the infra script: the pinned release it installs and the queue it configures for the
chart's RayCluster (`kueue.enabled`, `kueue.queueName`): a ResourceFlavor per provisioning type of
the GPU pools (their node labels are those the chart's worker pods select), one for the CPU head,
a ClusterQueue over them and the LocalQueue in the release's namespace; with topology-aware
scheduling also the Topology over GKE's node labels.

Sources: Kueue v0.19.2's manifests and the `kueue.x-k8s.io/v1beta2` Topology and ResourceFlavor
with the levels cloud.google.com/gce-topology-block, -subblock, -host and kubernetes.io/hostname,
as GKE's NCCL guide sets them up ("Run NCCL on custom GKE clusters that use A3 Mega or A3 High",
https://docs.cloud.google.com/ai-hypercomputer/docs/nccl/test-gke-custom-a3-mega-high); the pod
annotations kueue.x-k8s.io/podset-preferred-topology and -required-topology are Kueue's
topology-aware scheduling (https://kueue.sigs.k8s.io/docs/concepts/topology_aware_scheduling/).
"""

from __future__ import annotations

from typing import Any

import yaml

from generator.gke import kueue_dra
from generator.gke.profiles import profile
from generator.gke.provisioning import TYPES
from generator.gke.topology import LEVELS
from generator.infra.options import InfraOptions, reservation_name

VERSION = "v0.19.2"  # the Kueue the test bed runs (testbed/go/kueue/go.mod; a test keeps them equal)
MANIFEST = f"https://github.com/kubernetes-sigs/kueue/releases/download/{VERSION}/manifests.yaml"
API = "kueue.x-k8s.io/v1beta2"
CLUSTER_QUEUE = "nemo-rl"
TOPOLOGY = "gke-default"  # its levels: GKE's topology labels, widest first (generator/gke/topology.py)
CPU_FLAVOR = "cpu"
# The head's share of the queue: it requests CPU and memory only (head.resources: 6 CPU, 36Gi).
CPU_QUOTA = {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "0"}
# Most specific labels first: Kueue gives a pod set the first flavor that fits and whose labels do
# not conflict with the pods' own node selector.
FLAVOR_ORDER = ("reservation", "flex-start", "spot", "on-demand")

INSTALL = f"""\
# Kueue {VERSION} (its release manifests, server-side as its documentation applies them).
if ! exists kubectl get deployment kueue-controller-manager --namespace=kueue-system; then
  run kubectl apply --server-side -f "$KUEUE_MANIFEST"
fi
run kubectl wait deployment/kueue-controller-manager --namespace=kueue-system --for=condition=Available --timeout=300s
"""

CONFIG = """\
# The queue the chart's RayCluster waits in (kueue.queueName: $KUEUE_QUEUE): %(flavors)s.
if ! exists kubectl get clusterqueue "$KUEUE_CLUSTER_QUEUE"; then
  kueue_config="$(
    cat <<'EOF'
%(manifests)sEOF
  )"
  if [ "$DRY_RUN" = 1 ]; then
    printf '%%s\\n' "$kueue_config" | sed 's/^/      | /'
  fi
  run kubectl apply -f - <<<"$kueue_config"
fi
"""


def flavor_name(gpu: str, provisioning: str, reservation: str = "") -> str:
    suffix = f"-{reservation}" if provisioning == "reservation" else ""
    return f"{gpu}-{provisioning}{suffix}"[:63]


def _flavor_labels(node_label: str, provisioning: str, reservation: str) -> dict[str, str]:
    """The labels of the pool's nodes the chart's worker pods select (gke/provisioning.TYPES)."""
    return {"cloud.google.com/gke-accelerator": node_label} | TYPES[provisioning].node_labels(reservation)


def manifests(o: InfraOptions) -> list[dict[str, Any]]:
    """The Kueue objects, in the order they are applied."""
    p = profile(o.gpu)
    tas = o.topology != "none"
    dra = kueue_dra.needed(p.compute_domain, o.network_mode)
    covered = ["cpu", "memory", "nvidia.com/gpu", *(m.resource for m in dra)]
    docs: list[dict[str, Any]] = []
    if tas:
        docs.append(
            {
                "apiVersion": API,
                "kind": "Topology",
                "metadata": {"name": TOPOLOGY},
                "spec": {"levels": [{"nodeLabel": lv} for lv in LEVELS]},
            }
        )
    docs.append({"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": CPU_FLAVOR}, "spec": {}})
    cpu = CPU_QUOTA | dict.fromkeys((m.resource for m in dra), "0")
    quotas: list[dict[str, Any]] = [{"name": CPU_FLAVOR, "resources": [{"name": k, "nominalQuota": v} for k, v in cpu.items()]}]
    seen: dict[str, int] = {}
    for g in sorted(o.worker_groups, key=lambda g: FLAVOR_ORDER.index(g.provisioning)):
        res = reservation_name(g.reservation)
        name = flavor_name(p.key, g.provisioning, res)
        if name in seen:
            seen[name] += g.replicas
            continue
        seen[name] = g.replicas
        spec: dict[str, Any] = {"nodeLabels": _flavor_labels(p.node_label, g.provisioning, res)}
        if tas:
            spec["topologyName"] = TOPOLOGY
        docs.append({"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec})
    for name, nodes in seen.items():
        quotas.append(
            {
                "name": name,
                "resources": [
                    {"name": "cpu", "nominalQuota": str(nodes * p.host_vcpus)},
                    {"name": "memory", "nominalQuota": f"{nodes * p.host_memory_gib}Gi"},
                    {"name": "nvidia.com/gpu", "nominalQuota": str(nodes * p.gpus_per_node)},
                    # The DRA devices each worker claims (one worker per node), by Kueue's mapping.
                    *({"name": m.resource, "nominalQuota": str(nodes * m.per_worker(p))} for m in dra),
                ],
            }
        )
    docs.append(
        {
            "apiVersion": API,
            "kind": "ClusterQueue",
            "metadata": {"name": CLUSTER_QUEUE},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [{"coveredResources": covered, "flavors": quotas}],
            },
        }
    )
    docs.append(
        {
            "apiVersion": API,
            "kind": "LocalQueue",
            "metadata": {"name": o.kueue_queue, "namespace": o.namespace},
            "spec": {"clusterQueue": CLUSTER_QUEUE},
        }
    )
    return docs


DRA_CONFIG = """\
# Kueue from 0.18 counts the workers' DRA claims against the ClusterQueue's quota and holds a
# workload whose DeviceClass its configuration does not map (resources.deviceClassMappings;
# kubernetes-sigs/kueue v0.19.2 pkg/dra/claims.go): map the classes the workers claim
# (%(classes)s) in Kueue's own configuration, then restart Kueue to read it.
query kueue_cfg "" kubectl get configmap %(config_map)s --namespace=kueue-system -o "jsonpath={.data.%(key)s}"
if ! grep -q 'deviceClassMappings' <<<"$kueue_cfg"; then
  if grep -q '^resources:' <<<"$kueue_cfg"; then
    die "Kueue's configuration (ConfigMap kueue-system/%(config_map)s) has a resources block of its own:" \\
      "add to it deviceClassMappings %(inline)s, then run this script again"
  fi
  kueue_cfg+=$'\\n'"$(
    cat <<'EOF'
%(block)sEOF
  )"
  kueue_cm="$(printf 'apiVersion: v1\\nkind: ConfigMap\\nmetadata:\\n  name: %%s\\n  namespace: kueue-system\\n' %(config_map)s)"
  kueue_cm+=$'\\n'"data:"$'\\n'"  %(plain_key)s: |"
  kueue_cm+=$'\\n'"    ${kueue_cfg//$'\\n'/$'\\n    '}"
  if [ "$DRY_RUN" = 1 ]; then
    printf '%%s\\n' "$kueue_cm" | sed 's/^/      | /'
  fi
  run kubectl apply -f - <<<"$kueue_cm"
  run kubectl rollout restart deployment/kueue-controller-manager --namespace=kueue-system
  run kubectl rollout status deployment/kueue-controller-manager --namespace=kueue-system --timeout=300s
fi
"""


def dra_needed(o: InfraOptions) -> bool:
    """The release's workers claim DRA devices Kueue must map (a ComputeDomain channel, DRANET NICs)."""
    return bool(kueue_dra.needed(profile(o.gpu).compute_domain, o.network_mode))


def dra_config_step() -> str:
    """Kueue's configuration with the one table's deviceClassMappings (generator/gke/kueue_dra.py)."""
    resources = kueue_dra.configuration()
    inline = ", ".join(f"{m['name']}: {m['deviceClassNames'][0]}" for m in resources["deviceClassMappings"])
    return DRA_CONFIG % {
        "classes": ", ".join(m.device_class for m in kueue_dra.MAPPINGS),
        "config_map": kueue_dra.CONFIG_MAP,
        "key": kueue_dra.CONFIG_KEY.replace(".", "\\."),
        "plain_key": kueue_dra.CONFIG_KEY,
        "inline": f"({inline})",
        "block": yaml.safe_dump({"resources": resources}, sort_keys=False),
    }


def config_step(o: InfraOptions) -> str:
    docs = manifests(o)
    text = "---\n".join(yaml.safe_dump(d, sort_keys=False) for d in docs)
    flavors = ", ".join(d["metadata"]["name"] for d in docs if d["kind"] == "ResourceFlavor")
    if o.topology != "none":
        flavors += f"; topology {TOPOLOGY} over {', '.join(LEVELS)}"
    return CONFIG % {"flavors": f"flavors {flavors}", "manifests": text}
