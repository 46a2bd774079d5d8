"""The one table of Kueue's DRA device-class mappings (generator/gke/kueue_dra.py): the infra
script's queue and the test bed's Kueue read it, and it names every class the workers claim."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from generator.core.paths import ROOT
from generator.gke import kueue_dra
from generator.infra import kueue
from generator.infra.options import InfraOptions
from testbed import dra_stand_in, kueue_setup


def test_the_bed_configures_kueue_from_the_same_table() -> None:
    cfg = kueue_setup.config(1, 2, Path("certs"))
    assert cfg["resources"] == kueue_dra.configuration()
    assert [m["deviceClassNames"] for m in cfg["resources"]["deviceClassMappings"]] == [
        [dra_stand_in.CHANNEL_CLASS],
        [dra_stand_in.RDMA_CLASS],
    ]


def test_the_charts_rdma_claim_names_a_mapped_class_with_an_exact_count() -> None:
    template = (ROOT / "charts" / "nemo-rl-gke" / "templates" / "dra.yaml").read_text()
    mapped = {m.device_class for m in kueue_dra.MAPPINGS}
    assert f"deviceClassName: {dra_stand_in.RDMA_CLASS}" in template and dra_stand_in.RDMA_CLASS in mapped
    assert "allocationMode: ExactCount" in template and "allocationMode: All" not in template


@pytest.mark.parametrize(
    ("gpu", "network", "want"),
    [
        ("h200", "rdma", {}),
        ("h200", "dranet", {"google.com/mrdma": "16"}),
        ("gb200", "rdma", {"nvidia.com/compute-domain-channel": "2"}),
        ("gb200", "dranet", {"nvidia.com/compute-domain-channel": "2", "google.com/mrdma": "8"}),
    ],
)
def test_the_cluster_queue_quotas_what_each_worker_claims(gpu: str, network: str, want: dict[str, str]) -> None:
    o = InfraOptions(gpu=gpu, project="p", region="us-central1", zone="us-central1-b", kueue=True, network_mode=network)
    [cq] = [d for d in kueue.manifests(o) if d["kind"] == "ClusterQueue"]
    [group] = cq["spec"]["resourceGroups"]
    assert group["coveredResources"][3:] == list(want)
    for flavor in group["flavors"]:
        quota = {r["name"]: r["nominalQuota"] for r in flavor["resources"]}
        assert [r["name"] for r in flavor["resources"]] == group["coveredResources"]  # Kueue wants every covered resource, in order
        assert {k: v for k, v in quota.items() if k in want} == (dict.fromkeys(want, "0") if flavor["name"] == "cpu" else want)
    assert kueue.dra_needed(o) == bool(want)


def test_the_infra_step_writes_the_tables_mappings_into_kueues_configuration() -> None:
    step = kueue.dra_config_step()
    assert yaml.safe_dump({"resources": kueue_dra.configuration()}, sort_keys=False) in step
    assert f"kubectl get configmap {kueue_dra.CONFIG_MAP} --namespace=kueue-system" in step


def test_kueue_counts_claims_from_0_18() -> None:
    assert not kueue_dra.counts_claims((0, 17)) and kueue_dra.counts_claims((0, 18)) and kueue_dra.counts_claims((1, 0))
