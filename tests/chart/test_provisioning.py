"""The chart's worker scheduling renders exactly the provisioning table (gke/provisioning.TYPES),
the one home of which labels each provisioning type's nodes carry and which taints its pods
tolerate; `validate` and the infra script's Kueue flavors read the same table."""

from __future__ import annotations

from conftest import one, render, values_for

from generator.gke.provisioning import GPU_TOLERATION, TYPES
from generator.helm import runner as helm_mod
from generator.infra import kueue
from generator.infra.options import InfraOptions
from generator.validate.objects import _chart_worker_selector
from generator.values.worker_groups import GroupSpec

GROUPS = tuple(GroupSpec(f"g-{key}", 1, key, "res-a" if key == "reservation" else "") for key in TYPES)
ACCELERATOR = "cloud.google.com/gke-accelerator"


def _workers() -> tuple[dict, dict]:
    values = values_for(groups=GROUPS)
    rc = one(render(helm_mod.pinned(helm_mod.PINS[0]), [values]), "RayCluster")
    return values, {g["groupName"]: g["template"]["spec"] for g in rc["spec"]["workerGroupSpecs"]}


def test_each_group_selects_the_labels_of_its_provisioning_type_and_tolerates_its_taints():
    values, specs = _workers()
    for group in GROUPS:
        kind = TYPES[group.provisioning]
        spec = specs[group.name]
        want_selector = {ACCELERATOR: values["accelerator"]["nodeLabel"]} | kind.node_labels(group.reservation)
        assert spec["nodeSelector"] == want_selector, group.provisioning
        want = [GPU_TOLERATION.as_dict(), *(t.as_dict() for t in kind.tolerations)]
        assert spec["tolerations"] == want, group.provisioning


def test_every_taint_a_provisioning_type_puts_on_its_nodes_is_tolerated_by_its_pods():
    for kind in TYPES.values():
        for taint in kind.taints:
            assert any(
                t.key == taint.key and (t.operator == "Exists" or t.value == taint.value) and t.effect in ("", taint.effect)
                for t in kind.tolerations
            ), f"{kind.key}: {taint} is not tolerated"


def test_validate_and_the_kueue_flavors_use_the_labels_the_chart_renders():
    values, specs = _workers()
    for i, group in enumerate(GROUPS):
        assert _chart_worker_selector(values, values["workerGroups"][i]) == specs[group.name]["nodeSelector"], group.provisioning
    o = InfraOptions(gpu="h200", project="p", region="us-central1", zone="us-central1-b", groups=GROUPS, kueue=True)
    flavors = {
        d["metadata"]["name"]: d["spec"]["nodeLabels"]
        for d in kueue.manifests(o)
        if d["kind"] == "ResourceFlavor" and d["metadata"]["name"] != "cpu"
    }
    for group in GROUPS:
        labels = next(v for k, v in flavors.items() if group.provisioning in k)
        assert labels == specs[group.name]["nodeSelector"], group.provisioning
