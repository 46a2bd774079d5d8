"""Class 11 of issue 25, the run's lifecycle (generator/validate/rules/lifecycle.py): the launcher
releases the GPUs only when it follows the run; a non-root preparation Job leaves files the root
Ray containers can write only with DAC_OVERRIDE. Each rule across its variants, and the legitimate
neighbours it must accept."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from generator.core.paths import ROOT
from generator.validate.findings import ERROR, WARNING
from generator.validate.rules.lifecycle import may_override_file_modes
from generator.validate.values import validate_values
from generator.values.build import Options, build

EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
KEYS = ("launcher.releaseGpus", "prepare.runAsUser")


def findings(values: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """values key -> (level, message) of the lifecycle keys."""
    return {f.key: (f.level, f.message) for f in validate_values(values) if f.key in KEYS}


@pytest.fixture(scope="module")
def base() -> dict[str, Any]:
    return build(Options(gpu="h200"))


def changed(base: dict[str, Any], **parts: dict[str, Any]) -> dict[str, Any]:
    v = copy.deepcopy(base)
    for part, fields in parts.items():
        v[part].update(fields)
    return v


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_the_examples_have_no_lifecycle_finding(path: Path) -> None:
    assert findings(yaml.safe_load(path.read_text())) == {}


# --- launcher.releaseGpus needs launcher.follow ---------------------------------------------------


@pytest.mark.parametrize("gpu", ["h200", "b200", "gb200"])
def test_release_gpus_without_following_the_run_is_a_warning_naming_the_cost(gpu: str) -> None:
    values = build(Options(gpu=gpu, reservation="a4x-r1" if gpu == "gb200" else ""))  # A4X: reservation only
    values["launcher"].update(follow=False, releaseGpus=True)
    level, message = findings(values)["launcher.releaseGpus"]
    assert level == WARNING
    assert "launcher.follow false" in message and "never sees it end" in message and "billed" in message


@pytest.mark.parametrize(
    ("follow", "release", "grpo"),
    [(True, True, True), (False, False, True), (True, False, True), (False, True, False)],
    ids=["follows-and-releases", "keeps-gpus-on-purpose", "follows-keeps", "no-launcher-rendered"],
)
def test_release_gpus_is_accepted_where_it_works_or_is_not_asked(base, follow: bool, release: bool, grpo: bool) -> None:
    values = changed(base, launcher={"follow": follow, "releaseGpus": release}, grpo={"enabled": grpo})
    assert "launcher.releaseGpus" not in findings(values)


# --- a non-root preparation user and the root Ray containers --------------------------------------

DROP_ALL = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"], "add": []}}


def with_dac(add: bool) -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"], "add": ["DAC_OVERRIDE"] if add else []}}


@pytest.mark.parametrize("user", [1000, 65534])
def test_a_non_root_prepare_user_with_the_charts_default_ray_containers_is_refused(base, user: int) -> None:
    level, message = findings(changed(base, prepare={"runAsUser": user}))["prepare.runAsUser"]
    assert level == ERROR
    assert f"as user {user}" in message and "(head, worker)" in message and "cannot write" in message


@pytest.mark.parametrize(
    ("head", "worker", "lacking"),
    [
        (with_dac(True), with_dac(False), "(worker)"),
        (with_dac(False), with_dac(True), "(head)"),
        (with_dac(True), {"capabilities": {"drop": ["DAC_OVERRIDE"]}}, "(worker)"),  # dropped by name
        ({"capabilities": {"drop": ["ALL"], "add": ["CHOWN", "FOWNER"]}}, with_dac(True), "(head)"),  # not the one that writes
    ],
    ids=["head-only", "worker-only", "worker-drops-it-by-name", "head-other-capabilities"],
)
def test_each_ray_container_without_dac_override_is_named(base, head, worker, lacking: str) -> None:
    values = changed(base, prepare={"runAsUser": 1000}, head={"securityContext": head}, worker={"securityContext": worker})
    level, message = findings(values)["prepare.runAsUser"]
    assert level == ERROR and lacking in message


@pytest.mark.parametrize(
    ("prepare", "head", "worker"),
    [
        ({"runAsUser": 0}, DROP_ALL, DROP_ALL),  # root writes, root reads
        ({"runAsUser": 1000}, with_dac(True), with_dac(True)),  # as values.yaml says to
        ({"runAsUser": 1000}, {"capabilities": {"add": ["ALL"]}}, {"capabilities": {"drop": []}}),  # ALL; the runtime's default set
        ({"runAsUser": 1000, "enabled": False}, DROP_ALL, DROP_ALL),  # no preparation Job
        ({"runAsUser": 1000}, with_dac(True), {"privileged": True, "allowPrivilegeEscalation": True}),
    ],
    ids=["root", "dac-override-added", "all-and-runtime-default", "no-prepare-job", "privileged-worker"],
)
def test_a_prepare_user_the_ray_containers_can_follow_is_accepted(base, prepare, head, worker) -> None:
    values = changed(base, prepare=prepare, head={"securityContext": head}, worker={"securityContext": worker})
    assert "prepare.runAsUser" not in findings(values)


def test_dac_override_follows_the_capability_rules() -> None:
    assert may_override_file_modes({}) is True  # the runtime's default set has it
    assert may_override_file_modes({"capabilities": {"drop": ["ALL"]}}) is False
    assert may_override_file_modes({"capabilities": {"drop": ["ALL"], "add": ["DAC_OVERRIDE"]}}) is True
    assert may_override_file_modes({"capabilities": {"drop": ["NET_RAW"]}}) is True
    assert may_override_file_modes({"privileged": True, "capabilities": {"drop": ["ALL"]}}) is True
