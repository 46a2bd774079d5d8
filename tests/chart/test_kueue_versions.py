"""Kueue's worker-group limit by Kueue version (`kueue.version`): the one table in
generator/gke/kueue_versions.py, read by `validate` and, through the template scripts/sync.sh
generates from it, by the chart's own guard; both stop at the same count for every version."""

from __future__ import annotations

import json

import pytest
from conftest import render_text, values_for, with_changes

from generator.core.paths import CHART_DIR, ROOT
from generator.gke import kueue_versions
from generator.helm.runner import HelmError
from generator.validate.values import validate_values

# (kueue.version, worker groups allowed): the table's rows and their edges.
CASES = [("", 7), ("v0.16.5", 7), ("0.17.9", 7), ("v0.18.0", 9), ("0.18", 9), ("v0.19.2", 17), ("0.19", 17), ("v1.0.0", 17)]


@pytest.mark.parametrize(("version", "limit"), CASES)
def test_the_table_gives_each_version_its_limit(version, limit):
    assert kueue_versions.max_worker_groups(version) == limit


@pytest.mark.parametrize("version", ["v0", "0.18.x", "latest", "18"])
def test_a_version_that_is_no_kueue_version_is_refused(version):
    with pytest.raises(ValueError, match="is not a Kueue version"):
        kueue_versions.max_worker_groups(version)


def test_the_chart_template_is_the_one_generated_from_the_table():
    assert (CHART_DIR / "templates" / "_kueue_limits.tpl").read_text() == kueue_versions.template()


def _groups(n: int, version: str) -> dict:
    base = values_for(kueue_queue="gpu-queue")
    group = base["workerGroups"][0]
    values = with_changes(base, {"kueue.version": version})
    values["workerGroups"] = [{**group, "name": f"g{i}", "replicas": 1} for i in range(n)]
    return values


def _group_errors(values: dict) -> list[str]:
    return [f.message for f in validate_values(values) if f.level == "error" and f.key in ("workerGroups", "kueue.version")]


@pytest.mark.parametrize(("version", "limit"), [("", 7), ("v0.17.4", 7), ("v0.18.2", 9)])
def test_validate_and_the_chart_stop_at_the_same_count(helms, version, limit):
    at_limit, over = _groups(limit, version), _groups(limit + 1, version)
    assert _group_errors(at_limit) == []
    [message] = _group_errors(over)
    assert f"{limit + 1} worker groups" in message and f"at most {limit} groups" in message
    for helm in helms:
        assert "kind: RayCluster" in render_text(helm, [at_limit])
        with pytest.raises(HelmError, match=rf"at most {limit} worker groups; {limit + 1} given"):
            render_text(helm, [over])


def test_under_kueue_0_19_the_schemas_most_groups_are_admitted(helm):
    # Kueue >= 0.19 admits 17 worker groups (18 PodSets, the head's one of them): the values schema's
    # workerGroups.maxItems is that, generated from the table; one more is refused by the schema itself.
    most = kueue_versions.MOST_WORKER_GROUPS
    assert most == 17
    for schema in (ROOT / "schemas" / "values.schema.json", CHART_DIR / "values.schema.json"):
        assert json.loads(schema.read_text())["properties"]["workerGroups"]["maxItems"] == most
    values = _groups(most, "v0.19.2")
    assert _group_errors(values) == []
    assert "kind: RayCluster" in render_text(helm, [values])
    over = _groups(most + 1, "v0.19.2")
    assert [f.key for f in validate_values(over) if f.level == "error"] == ["workerGroups"]  # the schema's maxItems
    with pytest.raises(HelmError, match="workerGroups"):
        render_text(helm, [over])


def test_the_limit_applies_only_with_kueue_enabled(helm):
    values = _groups(9, "")
    values["kueue"].update(enabled=False, queueName="")
    assert _group_errors(values) == []
    assert "kind: RayCluster" in render_text(helm, [values])
