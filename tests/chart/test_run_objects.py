"""The rendered launcher and preparation Jobs, their ConfigMap and the `helm test` Pod."""

from __future__ import annotations

import json

import pytest
from conftest import kinds, one, pod_specs, render, values_for, with_changes


def jobs(objs):
    return {j["metadata"]["labels"]["app.kubernetes.io/component"]: j for j in kinds(objs, "Job")}


def launch_json(objs):
    cm = next(c for c in kinds(objs, "ConfigMap") if "launch.json" in c["data"])
    return json.loads(cm["data"]["launch.json"])


def test_launcher_job_is_a_plain_job_annotated_with_its_run(helm):
    objs = render(helm)
    job = jobs(objs)["launcher"]
    spec = launch_json(objs)
    assert job["metadata"]["name"].startswith("nemo-rl-run-")
    assert job["metadata"]["annotations"]["nemo-rl-gke/submission-id"] == spec["submission_id"]
    assert "helm.sh/hook" not in job["metadata"].get("annotations", {})


def test_the_launcher_knows_the_ray_version_of_the_release_image(helm):
    for release, ray_version in (("v0.5.0", "2.49.2"), ("v0.7.0", "2.55.1")):
        values = values_for(release=release)
        assert launch_json(render(helm, [values]))["ray_version"] == values["rayVersion"] == ray_version


# A Job's pod template is immutable: `helm upgrade` can only keep a Job unchanged or replace it by
# one with another name. Each change below alters some Job's template or none.
UPGRADES = {
    "launcher knob": {"launcher.maxRestarts": 9},
    "launcher resources": {"launcher.resources.requests.cpu": "500m"},
    "prepare resources": {"prepare.resources.requests.cpu": "3"},
    "pull policy": {"image.pullPolicy": "Always"},
    "hf home": {"storage.hfHome": "/data/hf-cache"},
    "run": {"grpo.extraOverrides": ["grpo.max_num_steps=600"]},
}


@pytest.mark.parametrize("change", sorted(UPGRADES))
def test_a_job_keeps_its_name_exactly_when_its_pod_template_is_unchanged(helm, change):
    before = jobs(render(helm, [values_for()]))
    after = jobs(render(helm, [with_changes(values_for(), UPGRADES[change])]))
    assert set(before) == set(after) == {"launcher", "prepare"}
    for component in before:
        same_template = before[component]["spec"]["template"] == after[component]["spec"]["template"]
        same_name = before[component]["metadata"]["name"] == after[component]["metadata"]["name"]
        assert same_name == same_template, (component, change)


def test_a_changed_launcher_setting_starts_a_new_launcher_of_the_same_run(helm):
    # After a timeout the launcher Job has failed: raising the timeout must bring a new one (which
    # finds the run by its submission id) instead of only editing a ConfigMap nobody reads.
    base = values_for()
    before = render(helm, [base])
    after = render(helm, [with_changes(base, {"launcher.timeouts.gpusSeconds": 20000})])
    assert launch_json(after)["timeouts"]["gpus_s"] == 20000
    assert launch_json(after)["submission_id"] == launch_json(before)["submission_id"]
    old_job, new_job = jobs(before)["launcher"], jobs(after)["launcher"]
    assert new_job["metadata"]["name"] != old_job["metadata"]["name"]
    (cm,) = (c for c in kinds(after, "ConfigMap") if "launch.json" in c["data"])
    mounted = {v["configMap"]["name"] for v in new_job["spec"]["template"]["spec"]["volumes"] if "configMap" in v}
    assert mounted == {cm["metadata"]["name"]}
    assert cm["metadata"]["name"] not in {c["metadata"]["name"] for c in kinds(before, "ConfigMap")}


def test_same_spec_same_names_changed_spec_new_names(helm):
    base = values_for()
    a, b = launch_json(render(helm, [base])), launch_json(render(helm, [base]))
    assert a["submission_id"] == b["submission_id"]
    steps = [o if not o.startswith("grpo.max_num_steps=") else "grpo.max_num_steps=500" for o in base["grpo"]["overrides"]]
    changed = render(helm, [with_changes(base, {"grpo.overrides": steps})])
    assert launch_json(changed)["submission_id"] != a["submission_id"]
    assert jobs(changed)["launcher"]["metadata"]["name"] != jobs(render(helm, [base]))["launcher"]["metadata"]["name"]
    # Launcher knobs are not part of the run: same submission id (a new launcher Job follows it).
    knob = render(helm, [with_changes(base, {"launcher.maxRestarts": 9})])
    assert launch_json(knob)["submission_id"] == a["submission_id"] and launch_json(knob)["max_restarts"] == 9


def test_job_names_fit_63_characters(helm):
    objs = render(helm, release="r" * 53)
    for o in kinds(objs, "Job") + kinds(objs, "ConfigMap") + kinds(objs, "Pod"):
        assert len(o["metadata"]["name"]) <= 63, o["metadata"]["name"]


def test_job_pod_templates_carry_only_stable_labels(helm):
    for name, tpl in pod_specs(render(helm)):
        if name.startswith("job:"):
            assert set(tpl["metadata"]["labels"]) == {
                "app.kubernetes.io/name",
                "app.kubernetes.io/instance",
                "app.kubernetes.io/component",
                "app.kubernetes.io/part-of",
                "app.kubernetes.io/managed-by",
            }


def test_launcher_reads_the_shared_volume_read_only_and_writes_only_its_outcome_folder(helm):
    objs = render(helm, [values_for(wandb=True)])
    tpl = jobs(objs)["launcher"]["spec"]["template"]
    (c,) = tpl["spec"]["containers"]
    assert {e["name"] for e in c.get("env", [])} == {"PYTHONUNBUFFERED", "HOME", "PYTHONDONTWRITEBYTECODE"}  # HOME: /tmp, read-only root
    assert c["command"] == ["python", "/etc/nemo-rl-gke/launcher.py", "/etc/nemo-rl-gke/launch.json"]
    shared = [m for m in c["volumeMounts"] if m["name"] == "shared-data"]
    assert shared == [
        {"name": "shared-data", "mountPath": "/data", "readOnly": True},
        # the run's folder is the checkpoint folder's parent: /data/nemo-rl/<run>/checkpoints
        {"name": "shared-data", "mountPath": "/var/lib/nemo-rl-gke/outcome", "subPath": "nemo-rl/gemma3-27b-gsm8k/launcher"},
    ]
    claim = next(v for v in tpl["spec"]["volumes"] if v["name"] == "shared-data")["persistentVolumeClaim"]
    assert claim == {"claimName": "nemo-rl-data"}
    spec = launch_json(objs)
    assert spec["outcome_dir"] == "/var/lib/nemo-rl-gke/outcome"
    assert spec["outcome_volume_dir"] == "/data/nemo-rl/gemma3-27b-gsm8k/launcher"
    assert "nvidia.com/gpu" not in json.dumps(c["resources"])


@pytest.mark.parametrize("checkpoints", ["/tmp/checkpoints", "/database/checkpoints", "/data/../etc/checkpoints"])
def test_no_outcome_folder_without_a_checkpoint_folder_on_the_volume(helm, checkpoints):
    v = values_for()
    v["grpo"]["extraOverrides"] = [f"checkpointing.checkpoint_dir={checkpoints}"]
    objs = render(helm, [v])
    (c,) = jobs(objs)["launcher"]["spec"]["template"]["spec"]["containers"]
    assert [m["mountPath"] for m in c["volumeMounts"] if m["name"] == "shared-data"] == ["/data"]
    assert "outcome_dir" not in launch_json(objs)


def test_a_checkpoint_folder_at_the_volumes_top_keeps_its_outcome_there(helm):
    v = values_for()
    v["grpo"]["extraOverrides"] = ["checkpointing.checkpoint_dir=/data/checkpoints"]
    objs = render(helm, [v])
    (c,) = jobs(objs)["launcher"]["spec"]["template"]["spec"]["containers"]
    assert [m.get("subPath") for m in c["volumeMounts"] if m["name"] == "shared-data"] == [None, "launcher"]
    assert launch_json(objs)["outcome_volume_dir"] == "/data/launcher"


def test_prepare_job_gets_only_the_hf_token_and_writes_the_cache(helm):
    objs = render(helm, [values_for(wandb=True)])
    tpl = jobs(objs)["prepare"]["spec"]["template"]
    (c,) = tpl["spec"]["containers"]
    env = {e["name"]: e for e in c["env"]}
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "nemo-rl-tokens", "key": "HF_TOKEN"}
    assert "WANDB_API_KEY" not in env
    assert env["HF_HOME"]["value"] == "/data/huggingface"
    assert not any(m.get("readOnly") for m in c["volumeMounts"] if m["name"] == "shared-data")
    assert "nvidia.com/gpu" not in json.dumps(c["resources"])


def test_prepare_and_launcher_agree_on_the_marker(helm):
    objs = render(helm)
    cm = next(c for c in kinds(objs, "ConfigMap") if "prepare.json" in c["data"])
    prep = json.loads(cm["data"]["prepare.json"])
    assert launch_json(objs)["wait_for_files"] == [prep["marker"]]
    assert prep["model"] == "google/gemma-3-27b-it"
    volumes = jobs(objs)["prepare"]["spec"]["template"]["spec"]["volumes"]
    assert {"name": "run-files", "configMap": {"name": cm["metadata"]["name"]}} in volumes
    assert {"launcher.py", "prepare.py", "launch.json", "prepare.json"} <= set(cm["data"])


def test_preparation_can_be_switched_off(helm):
    objs = render(helm, [with_changes(values_for(), {"prepare.enabled": False})])
    assert set(jobs(objs)) == {"launcher"}
    assert launch_json(objs)["wait_for_files"] == []


def test_grpo_disabled_renders_only_the_ray_cluster_side(helm):
    objs = render(helm, [with_changes(values_for(), {"grpo.enabled": False})])
    assert kinds(objs, "Job") == kinds(objs, "Pod") == []
    assert not [c for c in kinds(objs, "ConfigMap") if "launch.json" in c["data"]]
    one(objs, "RayCluster")


def test_helm_test_pod_checks_the_cluster(helm):
    objs = render(helm)
    pod = one(objs, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["spec"]["containers"][0]["command"][-2:] == ["--check", "/etc/nemo-rl-gke/launch.json"]
    spec = launch_json(objs)
    assert spec["expected_nodes"] == 3 and spec["expected_gpus"] == 16


def test_tcp_mode_expects_no_rdma_interfaces(helm):
    assert "expected_interfaces" not in launch_json(render(helm, [with_changes(values_for(), {"network.mode": "tcp"})]))


@pytest.mark.parametrize("nodes", [1, 4])
def test_expected_gpus_follow_the_worker_groups(helm, nodes):
    spec = launch_json(render(helm, [values_for(nodes=nodes)]))
    assert spec["expected_gpus"] == nodes * 8 and spec["expected_nodes"] == nodes + 1


def test_job_pods_are_unprivileged_without_api_token_but_the_launchers(helm):
    for name, tpl in pod_specs(render(helm)):
        if name.startswith(("job:", "pod:")):
            launcher = tpl["metadata"]["labels"]["app.kubernetes.io/component"] == "launcher"
            assert tpl["spec"]["automountServiceAccountToken"] is launcher, name
            for c in tpl["spec"]["containers"]:
                assert c["securityContext"]["allowPrivilegeEscalation"] is False
                assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]


def test_the_entrypoint_never_holds_a_token(helm):
    spec = launch_json(render(helm, [values_for(wandb=True)]))
    assert "HF_TOKEN" not in spec["entrypoint"] and "WANDB" not in spec["entrypoint"]
    assert "runtime_env" not in spec


def test_the_head_service_is_named_so_every_kuberay_version_creates_what_the_launcher_calls(helm):
    # KubeRay before 1.4 cuts a generated "<name>-head-svc" over 50 characters from the front;
    # a name given in headService is used as it is by every version.
    release = "nemo-rl-gemma3-27b-gsm8k-h200-spot-experiment1"
    objs = render(helm, release=release, namespace="ml")
    svc = one(objs, "RayCluster")["spec"]["headGroupSpec"]["headService"]["metadata"]
    assert svc["name"] == f"{release}-head-svc"
    assert svc["labels"]["app.kubernetes.io/instance"] == release
    assert launch_json(objs)["address"] == f"http://{release}-head-svc.ml.svc.cluster.local:8265"
    longest = render(helm, release="r" * 53)
    assert len(one(longest, "RayCluster")["spec"]["headGroupSpec"]["headService"]["metadata"]["name"]) <= 63


def test_an_override_repeated_in_extra_overrides_is_read_as_nemo_rl_reads_it(helm):
    # The last value wins; it once rendered both glued together ("/data/a/checkpoints/data/b").
    values = with_changes(
        values_for(),
        {"grpo.extraOverrides": ["++checkpointing.checkpoint_dir=/data/nemo-rl/other/checkpoints", "policy.model_name=Qwen/Qwen2.5-1.5B"]},
    )
    objs = render(helm, [values])
    assert launch_json(objs)["checkpoint_dir"] == "/data/nemo-rl/other/checkpoints"
    (cm,) = (c for c in kinds(objs, "ConfigMap") if "prepare.json" in c["data"])
    assert json.loads(cm["data"]["prepare.json"])["model"] == "Qwen/Qwen2.5-1.5B"


def test_the_launch_spec_carries_the_winning_max_num_steps(helm):
    # The launcher tells a save-deadline stop (SUCCEEDED short of it) from the run's end.
    assert launch_json(render(helm, [values_for()]))["max_num_steps"] > 0
    values = with_changes(values_for(), {"grpo.extraOverrides": ["++grpo.max_num_steps=7"]})
    assert launch_json(render(helm, [values]))["max_num_steps"] == 7


def test_a_final_launcher_exit_fails_the_job_at_once_and_an_eviction_is_not_counted(helm):
    # A timeout exits 3: retried 4 times, a 4 h wait for the preparation marker became 20 h.
    policy = jobs(render(helm))["launcher"]["spec"]["podFailurePolicy"]["rules"]
    fail = next(r for r in policy if r["action"] == "FailJob")
    assert fail["onExitCodes"] == {"containerName": "launcher", "operator": "In", "values": [2, 3]}
    ignore = next(r for r in policy if r["action"] == "Ignore")
    assert ignore["onPodConditions"] == [{"type": "DisruptionTarget", "status": "True"}]
