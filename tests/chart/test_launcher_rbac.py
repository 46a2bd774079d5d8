"""The launcher's identity (launcher.releaseGpus): its own ServiceAccount, a Role that may only get
and patch this release's RayCluster, the binding, which pods mount a token, and what the launch
spec tells the launcher about the cluster it releases."""

from __future__ import annotations

import json

import pytest
from conftest import kinds, one, pod_specs, render, values_for, with_changes

from generator.values.worker_groups import GroupSpec

SA_FOLDER = "/var/run/secrets/kubernetes.io/serviceaccount"


def launch_json(objs):
    cm = next(c for c in kinds(objs, "ConfigMap") if "launch.json" in c["data"])
    return json.loads(cm["data"]["launch.json"])


def component(tpl):
    return tpl["metadata"]["labels"]["app.kubernetes.io/component"]


def test_the_role_may_only_get_and_patch_this_releases_raycluster(helm):
    objs = render(helm, release="team-a")
    role = one(objs, "Role")
    assert role["metadata"]["name"] == "team-a-launcher"
    rule = {"apiGroups": ["ray.io"], "resources": ["rayclusters"], "resourceNames": ["team-a"], "verbs": ["get", "patch"]}
    assert role["rules"] == [rule]
    assert one(objs, "RayCluster")["metadata"]["name"] == "team-a"
    assert kinds(objs, "ClusterRole") == [] and kinds(objs, "ClusterRoleBinding") == []


def test_the_binding_gives_the_role_to_the_launchers_account_only(helm):
    objs = render(helm, release="team-a", namespace="rl")
    binding = one(objs, "RoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "team-a-launcher"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "team-a-launcher", "namespace": "rl"}]
    account = next(sa for sa in kinds(objs, "ServiceAccount") if sa["metadata"]["name"] == "team-a-launcher")
    assert account["automountServiceAccountToken"] is False  # only the pod that asks gets a token


def test_only_the_launcher_pod_runs_as_the_launcher_with_a_token(helm):
    for name, tpl in pod_specs(render(helm)):
        spec = tpl["spec"]
        if component(tpl) == "launcher":
            assert (spec["serviceAccountName"], spec["automountServiceAccountToken"]) == ("nemo-rl-launcher", True)
        else:
            assert (spec["serviceAccountName"], spec["automountServiceAccountToken"]) == ("nemo-rl", False), name


def test_the_launch_spec_names_the_cluster_its_groups_and_the_token_folder(helm):
    objs = render(helm, [values_for()], namespace="rl")
    assert launch_json(objs)["gpu_release"] == {
        "raycluster": "nemo-rl",
        "namespace": "rl",
        "groups": {"gpu": 2},
        "kueue": False,
        "service_account_dir": SA_FOLDER,
    }


def test_under_kueue_the_launcher_scales_every_group(helm):
    groups = (GroupSpec.parse("train=4:reservation:r1"), GroupSpec.parse("generate=4:spot"))
    values = values_for(groups=groups, kueue_queue="gpu-queue")
    release = launch_json(render(helm, [values]))["gpu_release"]
    assert release["groups"] == {"train": 4, "generate": 4}
    assert release["kueue"] is True


@pytest.mark.parametrize("changes", [{"launcher.releaseGpus": False}, {"grpo.enabled": False}])
def test_no_token_and_no_rbac_without_the_release(helm, changes):
    objs = render(helm, [with_changes(values_for(), changes)])
    assert kinds(objs, "Role") == [] and kinds(objs, "RoleBinding") == []
    assert [sa["metadata"]["name"] for sa in kinds(objs, "ServiceAccount")] == ["nemo-rl"]
    for name, tpl in pod_specs(objs):
        assert tpl["spec"]["automountServiceAccountToken"] is False, name
    if changes.get("grpo.enabled", True):
        assert "gpu_release" not in launch_json(objs)


def test_the_chart_never_renders_what_the_launcher_patches(helm):
    # Helm 3 patches a custom resource with the difference between its old and new manifests, and
    # Helm 4's server-side apply sends only the fields the chart renders: an unchanged upgrade
    # leaves spec.suspend as the launcher set it.
    cluster = one(render(helm), "RayCluster")
    assert "suspend" not in cluster["spec"]
    assert all("suspend" not in group for group in cluster["spec"]["workerGroupSpecs"])
