"""The rendered-object rules (generator/validate/objects.py): the chart's own messages as findings."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from generator.validate.objects import chart_message_key, render_findings
from generator.values.merge import as_helm_sees_it

ROOT = Path(__file__).resolve().parents[2]


def tutorial() -> dict[str, Any]:
    return as_helm_sees_it(yaml.safe_load((ROOT / "examples" / "tutorial-h200.yaml").read_text()))


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (lambda v: v["secrets"].update(source="files"), "secrets.fromFiles.hfToken"),
        (lambda v: v["secrets"].update(source="external"), "secrets.external.storeName"),
        (lambda v: v["workerGroups"][0].update(provisioning="reservation", reservationName=""), "workerGroups[0].reservationName"),
    ],
    ids=["files-token", "external-store", "reservation-name"],
)
def test_the_charts_own_messages_come_back_with_their_values_key(edit, key):
    v = copy.deepcopy(tutorial())
    edit(v)
    findings = render_findings(v, "nemo-rl")
    assert [f.key for f in findings if f.level == "error"] == [key], findings


def test_a_fail_message_names_the_release_override():
    assert chart_message_key('RayCluster name "x" is 60 characters; KubeRay allows at most 53.') == "fullnameOverride"


def test_the_tutorial_renders_with_no_object_finding():
    assert render_findings(tutorial(), "nemo-rl") == []


def test_pull_policy_never_without_a_preloaded_image_is_a_warning():
    v = copy.deepcopy(tutorial())
    v["image"]["pullPolicy"] = "Never"
    findings = render_findings(v, "nemo-rl")
    assert [(f.key, f.level) for f in findings] == [("image.pullPolicy", "warning")]


def test_toleration_seconds_need_no_execute_in_the_launcher_jobs_too():
    v = copy.deepcopy(tutorial())
    v["launcher"]["tolerations"] = [{"key": "pool", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 30}]
    findings = render_findings(v, "nemo-rl")
    assert [f.key for f in findings] == ["launcher.tolerations[0].tolerationSeconds"]
