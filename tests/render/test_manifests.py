"""The rendered-output validator itself: CRD conversion, strictness, unknown kinds."""

from __future__ import annotations

import copy

import pytest
from conftest import one, render
from jsonschema import Draft202012Validator

from generator.render import manifests
from generator.render.crd_schema import convert


def test_int_or_string_accepts_both():
    v = Draft202012Validator(convert({"type": "object", "properties": {"p": {"x-kubernetes-int-or-string": True}}}))
    assert v.is_valid({"p": 8265}) and v.is_valid({"p": "dashboard"})
    assert not v.is_valid({"p": 1.5}) and not v.is_valid({"p": None})


def test_declared_objects_become_strict_unless_preserving_unknown_fields():
    strict = Draft202012Validator(convert({"type": "object", "properties": {"a": {"type": "string"}}}))
    assert not strict.is_valid({"a": "x", "b": 1})
    loose = Draft202012Validator(
        convert({"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {"a": {"type": "string"}}})
    )
    assert loose.is_valid({"a": "x", "b": 1})


def test_nullable_allows_null():
    v = Draft202012Validator(convert({"type": "object", "properties": {"a": {"type": "string", "nullable": True}}}))
    assert v.is_valid({"a": None}) and not v.is_valid({"a": 3})


@pytest.fixture(scope="module")
def default_objects(helms):
    return render(helms[0])


def test_rendered_defaults_have_no_findings(default_objects):
    assert manifests.validate_documents(default_objects) == []


def test_unknown_raycluster_field_fails_under_both_crd_sets(default_objects):
    rc = copy.deepcopy(one(default_objects, "RayCluster"))
    rc["spec"]["workerGroupSpecs"][0]["replica"] = 2
    checkers = {f.checker for f in manifests.validate_object(rc)}
    assert checkers == {"kuberay-v1.3.2", "kuberay-v1.7.0"}


def test_field_only_newer_kuberay_knows_is_caught_by_the_older_set(default_objects):
    rc = copy.deepcopy(one(default_objects, "RayCluster"))
    rc["spec"]["workerGroupSpecs"][0]["resources"] = {"CPU": "1"}  # 1.7.0 only
    findings = manifests.validate_object(rc)
    assert [f.checker for f in findings] == ["kuberay-v1.3.2"]
    assert findings[0].path == "spec.workerGroupSpecs[0]"


def test_v1_3_requires_worker_ray_start_params(default_objects):
    rc = copy.deepcopy(one(default_objects, "RayCluster"))
    del rc["spec"]["workerGroupSpecs"][0]["rayStartParams"]
    assert [f.checker for f in manifests.validate_object(rc)] == ["kuberay-v1.3.2"]


def test_builtin_kinds_are_strict_in_every_supported_version(default_objects):
    pvc = copy.deepcopy(one(default_objects, "PersistentVolumeClaim"))
    pvc["spec"]["storageClass"] = "x"
    findings = manifests.validate_object(pvc)
    assert {f.checker for f in findings} == {f"k8s-{v}" for v in manifests.KUBE_VERSIONS}


def test_network_objects_are_checked_against_the_documented_fields(default_objects):
    params = copy.deepcopy(next(o for o in default_objects if o["kind"] == "GKENetworkParamSet"))
    params["spec"]["deviceMode"] = "Rdma"
    params["spec"]["vpcSubnets"] = ["x"]
    messages = " ".join(f.message for f in manifests.validate_object(params))
    assert "'Rdma' is not one of" in messages and "vpcSubnets" in messages


def test_a_kind_without_schema_is_a_finding():
    (f,) = manifests.validate_object({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}})
    assert f.message == "no schema for example.com/v1 Widget"


def test_the_compiled_crd_schemas_are_those_of_the_vendored_crds():
    # render reads schemas/kuberay/ (converted once by scripts/sync.sh) instead of 4.3 MB of YAML:
    # each vendored CRD file it came from is named with its checksum, and the conversion is redone here.
    import json

    from generator.render.crd_schema import INDEX, compiled
    from generator.vendored import DRA_DRIVER, KUBERAY, checksum_text

    index = json.loads(INDEX.read_text())
    listed = {f"{sha}  {name}" for name, sha in index["sources"].items()}
    dra = {line.replace("  ", "  dra-driver-", 1) for line in checksum_text(DRA_DRIVER.root).splitlines()}
    assert listed == set(checksum_text(KUBERAY.root).splitlines()) | dra
    stale = [path.name for path, text in compiled().items() if path.read_text() != text]
    assert stale == [], "run scripts/sync.sh"
