"""The chart, rendered by both pinned Helm majors, object by object."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from conftest import CHART, CI_DIR, kinds, one, pod_specs, ray_pod_specs, render, render_text, values_for, with_changes

from generator.helm.runner import HelmError
from generator.render.manifests import validate_documents
from generator.validate.values import validate_values

SCENARIOS = sorted(CI_DIR.glob("*.yaml"))
SCENARIO_IDS = [p.stem for p in SCENARIOS]


def raycluster(objs):
    return one(objs, "RayCluster")


def workers(objs):
    return raycluster(objs)["spec"]["workerGroupSpecs"]


def head(objs):
    return raycluster(objs)["spec"]["headGroupSpec"]


def container(template, name):
    return next(c for c in template["spec"]["containers"] if c["name"] == name)


def env_of(c):
    return {e["name"]: e for e in c.get("env", [])}


# --- everything rendered is valid ---------------------------------------------------------


def test_chart_defaults_render_a_complete_valid_h200_setup(helm):
    objs = render(helm)
    got = sorted(o["kind"] for o in objs)
    assert got == sorted(
        ["GKENetworkParamSet"] * 9
        + ["Network"] * 9
        + ["PersistentVolume", "PersistentVolumeClaim", "RayCluster", "ServiceAccount", "ConfigMap", "Job", "Job", "Pod"]
        + ["ServiceAccount", "Role", "RoleBinding"]  # the launcher's, to release the GPU workers
        + ["NetworkPolicy", "PodDisruptionBudget"]
    )
    assert validate_documents(objs) == []
    assert workers(objs)[0]["template"]["spec"]["nodeSelector"]["cloud.google.com/gke-accelerator"] == "nvidia-h200-141gb"


@pytest.mark.parametrize("scenario", SCENARIOS, ids=SCENARIO_IDS)
def test_every_scenario_renders_and_validates(helm, scenario):
    objs = render(helm, [scenario])
    findings = validate_documents(objs)
    assert findings == [], "\n".join(map(str, findings))


@pytest.mark.parametrize("scenario", [None, *SCENARIOS], ids=["defaults", *SCENARIO_IDS])
def test_helm_lint_strict_passes(helm_major, scenario):
    out = helm_major.lint([scenario] if scenario else [])
    assert "0 chart(s) failed" in out


def test_both_helm_majors_render_identically(helms):
    a, b = (render_text(h, [CI_DIR / "h200-multi-group-values.yaml"]) for h in helms)
    assert a == b


def test_generated_b200_file_renders_b200(helm, tmp_path):
    objs = render(helm, [CI_DIR / "b200-values.yaml"])
    w = workers(objs)[0]["template"]
    assert w["spec"]["nodeSelector"]["cloud.google.com/gke-accelerator"] == "nvidia-b200"
    env = env_of(container(w, "ray-worker"))
    assert env["NCCL_TUNER_CONFIG_PATH"]["value"] == "/usr/local/gib/configs/tuner_config_a4.txtpb"
    assert validate_documents(objs) == []


# --- labels and names ---------------------------------------------------------------------

REQUIRED_LABELS = {
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/component",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
}


@pytest.mark.parametrize("scenario", SCENARIOS, ids=SCENARIO_IDS)
def test_every_object_and_pod_carries_the_standard_labels(helm, scenario):
    objs = render(helm, [scenario])
    for o in objs:
        labels = o["metadata"].get("labels", {})
        assert labels.keys() >= REQUIRED_LABELS, o["metadata"]["name"]
        assert labels["app.kubernetes.io/instance"] == "nemo-rl"
    for name, tpl in pod_specs(objs):
        assert {"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component"} <= tpl["metadata"][
            "labels"
        ].keys(), name


def test_common_labels_reach_objects_and_pods(helm):
    objs = render(helm, [CI_DIR / "h200-multi-group-values.yaml"])
    assert all(o["metadata"]["labels"]["cost-center"] == "ml-research" for o in objs)
    assert all(t["metadata"]["labels"]["cost-center"] == "ml-research" for _, t in pod_specs(objs))
    # A Job is named by a hash of its pod template: no label there changes with the chart's version.
    for name, t in pod_specs(objs):
        if name.startswith("job:"):
            assert "helm.sh/chart" not in t["metadata"]["labels"] and "app.kubernetes.io/version" not in t["metadata"]["labels"], name


def test_the_version_label_is_the_nemo_rl_release_running(helm):
    objs = render(helm, [values_for(release="v0.5.0")])
    assert {o["metadata"]["labels"]["app.kubernetes.io/version"] for o in objs} == {"v0.5.0"}
    long_tag = "v0.7.0-" + "a" * 55 + "._b" + "c" * 40  # a valid image tag; its first 63 characters end in "."
    objs = render(helm, [with_changes(values_for(), {"image.tag": long_tag})])
    assert {o["metadata"]["labels"]["app.kubernetes.io/version"] for o in objs} == {"v0.7.0-" + "a" * 55}


@pytest.mark.parametrize("release", ["nemo-rl", "team-b-grpo"])
def test_names_derive_from_the_release(helm, release):
    objs = render(helm, release=release)
    assert raycluster(objs)["metadata"]["name"] == release
    assert one(objs, "PersistentVolumeClaim")["metadata"]["name"] == f"{release}-data"
    assert one(objs, "PersistentVolume")["metadata"]["name"] == f"default-{release}-lustre"
    assert sorted(sa["metadata"]["name"] for sa in kinds(objs, "ServiceAccount")) == [release, f"{release}-launcher"]
    for _, tpl in ray_pod_specs(objs):
        claims = [v["persistentVolumeClaim"]["claimName"] for v in tpl["spec"]["volumes"] if "persistentVolumeClaim" in v]
        assert claims == [f"{release}-data"]
        assert tpl["spec"]["serviceAccountName"] == release
    assert all(j["metadata"]["name"].startswith(f"{release}-") for j in kinds(objs, "Job"))


def test_fluent_bit_configmap_name_follows_the_release(helm):
    objs = render(helm, [CI_DIR / "h200-multi-group-values.yaml"], release="exp7")
    (cm,) = [c for c in kinds(objs, "ConfigMap") if c["metadata"]["labels"]["app.kubernetes.io/component"] == "logging"]
    assert cm["metadata"]["name"] == "exp7-fluent-bit"
    assert "[INPUT]" in cm["data"]["fluent-bit.conf"]
    for _, tpl in ray_pod_specs(objs):
        vols = {v["name"]: v for v in tpl["spec"]["volumes"]}
        assert vols["fluent-bit-config"]["configMap"]["name"] == "exp7-fluent-bit"
        assert [c["name"] for c in tpl["spec"]["containers"]][1] == "fluent-bit"


def test_fullname_override_names_the_cluster(helm):
    objs = render(helm, [CI_DIR / "h200-shared-networks-values.yaml"], release="whatever")
    assert raycluster(objs)["metadata"]["name"] == "grpo-flex"


@pytest.mark.parametrize(
    ("release", "override", "needle"),
    [
        ("nemo-rl", "x" * 54, "fullnameOverride"),  # the schema's maxLength
        ("nemo.rl", None, "not a DNS-1035 label"),  # Helm accepts dots in release names
        ("9lives", None, "not a DNS-1035 label"),
    ],
)
def test_bad_cluster_names_fail_with_a_clear_message(helm, release, override, needle):
    sets = [f"fullnameOverride={override}"] if override else []
    with pytest.raises(HelmError, match=re.escape(needle)):
        render_text(helm, release=release, set_values=sets)


def test_template_checks_the_length_even_without_the_schema(helm):
    with pytest.raises(HelmError, match="is 54 characters; KubeRay allows at most 53"):
        helm.template(set_values=["fullnameOverride=" + "x" * 54], extra=["--skip-schema-validation"])


def test_53_character_name_is_accepted(helm):
    objs = render(helm, release="a" * 53)
    assert raycluster(objs)["metadata"]["name"] == "a" * 53


# --- RayCluster: head and workers ---------------------------------------------------------


def test_head_is_a_small_cpu_pod_with_no_pool_pin(helm):
    objs = render(helm)
    h = head(objs)
    spec = h["template"]["spec"]
    assert "nodeSelector" not in spec  # no default-pool pin
    c = container(h["template"], "ray-head")
    assert int(c["resources"]["requests"]["cpu"]) <= 16
    assert int(c["resources"]["limits"]["cpu"]) >= 1  # Ray CPUs on the head (>= 1 for v0.5/v0.6)
    assert "nvidia.com/gpu" not in c["resources"]["requests"]
    assert h["rayStartParams"]["dashboard-host"] == "0.0.0.0"
    assert spec["containers"][0]["name"] == "ray-head"


def test_head_can_be_placed_on_a_tainted_system_pool(helm):
    objs = render(helm, [CI_DIR / "h200-tcp-existing-claim-values.yaml"])
    spec = head(objs)["template"]["spec"]
    assert spec["nodeSelector"] == {"cloud.google.com/gke-nodepool": "system"}
    assert spec["tolerations"][0]["key"] == "components.gke.io/gke-managed-components"


@pytest.mark.parametrize("nodes", [1, 3, 64])
def test_workers_have_8_gpus_and_replicas_from_values(helm, nodes):
    objs = render(helm, [values_for("h200", nodes=nodes)])
    (g,) = workers(objs)
    assert g["replicas"] == g["minReplicas"] == g["maxReplicas"] == nodes
    c = container(g["template"], "ray-worker")
    assert c["resources"]["requests"]["nvidia.com/gpu"] == 8
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert g["template"]["spec"]["containers"][0]["name"] == "ray-worker"


def test_worker_groups_are_a_list_with_their_own_labels_and_scheduling(helm):
    objs = render(helm, [CI_DIR / "h200-multi-group-values.yaml"])
    groups = {g["groupName"]: g for g in workers(objs)}
    assert list(groups) == ["reserved", "spot"]
    res, spot = groups["reserved"]["template"], groups["spot"]["template"]
    assert res["spec"]["nodeSelector"]["cloud.google.com/reservation-name"] == "h200-res-a"
    assert res["spec"]["nodeSelector"]["cloud.google.com/reservation-affinity"] == "specific"
    assert "cloud.google.com/gke-spot" not in res["spec"]["nodeSelector"]
    assert spot["spec"]["nodeSelector"]["cloud.google.com/gke-spot"] == "true"
    assert spot["metadata"]["labels"]["team"] == "rl"
    assert "team" not in res["metadata"]["labels"]
    tol_keys = {t["key"] for t in spot["spec"]["tolerations"]}
    assert {"nvidia.com/gpu", "cloud.google.com/impending-node-termination", "cloud.google.com/gke-spot"} <= tol_keys


def test_flex_start_and_on_demand_scheduling(helm):
    flex = workers(render(helm, [CI_DIR / "h200-shared-networks-values.yaml"]))[0]["template"]["spec"]
    assert flex["nodeSelector"]["cloud.google.com/gke-flex-start"] == "true"
    assert {"key": "cloud.google.com/gke-queued", "operator": "Exists", "effect": "NoSchedule"} in flex["tolerations"]
    od = workers(render(helm, [CI_DIR / "h200-tcp-existing-claim-values.yaml"]))[0]["template"]["spec"]
    assert "cloud.google.com/gke-spot" not in od["nodeSelector"]
    term = od["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert term["matchExpressions"] == [{"key": "cloud.google.com/gke-spot", "operator": "NotIn", "values": ["true"]}]
    assert od["nodeSelector"]["cloud.google.com/gke-nodepool"] == "gpu-pool"


def test_reservation_without_a_name_fails(helm):
    v = with_changes(values_for(), {"workerGroups": [{"name": "r", "replicas": 1, "provisioning": "reservation"}]})
    with pytest.raises(HelmError, match="reservationName is required"):
        render_text(helm, [v])


def test_duplicate_group_names_fail(helm):
    g = {"name": "gpu", "replicas": 1, "provisioning": "spot"}
    with pytest.raises(HelmError, match="used twice"):
        render_text(helm, [with_changes(values_for(), {"workerGroups": [g, g]})])


def test_kueue_label_is_on_the_raycluster_not_only_pods(helm):
    objs = render(helm, [CI_DIR / "h200-multi-group-values.yaml"])
    assert raycluster(objs)["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue"
    assert "kueue.x-k8s.io/queue-name" not in raycluster(render(helm))["metadata"]["labels"]


def test_ray_version_and_image_follow_values(helm):
    objs = render(helm, [values_for(release="v0.5.0")])
    rc = raycluster(objs)
    assert rc["spec"]["rayVersion"] == "2.49.2"
    for _, tpl in ray_pod_specs(objs):
        assert tpl["spec"]["containers"][0]["image"] == "nvcr.io/nvidia/nemo-rl:v0.5.0"
        assert tpl["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"


# --- RDMA networking ----------------------------------------------------------------------


def _interfaces(template):
    ann = template["metadata"]["annotations"]
    assert ann["networking.gke.io/default-interface"] == "eth0"
    return json.loads(ann["networking.gke.io/interfaces"])


def test_worker_interface_annotation_names_exactly_the_rendered_networks(helm):
    objs = render(helm)
    ifs = _interfaces(workers(objs)[0]["template"])
    assert [i["interfaceName"] for i in ifs] == [f"eth{n}" for n in range(10)]
    assert ifs[0]["network"] == "default"
    networks = {o["metadata"]["name"] for o in kinds(objs, "Network")}
    params = {o["metadata"]["name"] for o in kinds(objs, "GKENetworkParamSet")}
    assert {i["network"] for i in ifs[1:]} == networks == params
    assert [i["network"] for i in ifs[1:]] == ["gvnic-1"] + [f"rdma-{n}" for n in range(8)]


def test_network_objects_pair_up_with_vpcs_from_values(helm):
    objs = render(helm, [values_for(network_prefix="team9")])
    params = {o["metadata"]["name"]: o["spec"] for o in kinds(objs, "GKENetworkParamSet")}
    assert params["gvnic-1"] == {"vpc": "team9-gvnic-net", "vpcSubnet": "team9-gvnic-sub", "deviceMode": "NetDevice"}
    assert params["rdma-3"] == {"vpc": "team9-rdma-net", "vpcSubnet": "team9-rdma-sub-3", "deviceMode": "RDMA"}
    for n in kinds(objs, "Network"):
        assert n["spec"]["type"] == "Device"
        assert n["spec"]["parametersRef"] == {"group": "networking.gke.io", "kind": "GKENetworkParamSet", "name": n["metadata"]["name"]}
        assert n["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_existing_network_objects_are_not_rendered_but_still_used(helm):
    objs = render(helm, [CI_DIR / "h200-shared-networks-values.yaml"])
    assert kinds(objs, "Network") == kinds(objs, "GKENetworkParamSet") == []
    assert len(_interfaces(workers(objs)[0]["template"])) == 10


def test_every_gpu_worker_group_gets_the_interfaces(helm):
    objs = render(helm, [CI_DIR / "h200-multi-group-values.yaml"])
    assert all(len(_interfaces(g["template"])) == 10 for g in workers(objs))


def test_tcp_mode_has_no_rdma_wiring(helm):
    objs = render(helm, [CI_DIR / "h200-tcp-existing-claim-values.yaml"])
    assert kinds(objs, "Network") == []
    tpl = workers(objs)[0]["template"]
    assert "networking.gke.io/interfaces" not in (tpl["metadata"].get("annotations") or {})
    c = container(tpl, "ray-worker")
    assert "gib" not in {m["name"] for m in c["volumeMounts"]}
    assert "NCCL_NET" not in env_of(c)
    assert "set_nccl_env.sh" not in c["args"][0]


# --- NCCL / gIB wiring --------------------------------------------------------------------


@pytest.mark.parametrize(("gpu", "tuner"), [("h200", "tuner_config_a3u.txtpb"), ("b200", "tuner_config_a4.txtpb")])
def test_nccl_env_per_accelerator(helm, gpu, tuner):
    objs = render(helm, [values_for(gpu)])
    env = env_of(container(workers(objs)[0]["template"], "ray-worker"))
    expect = {
        "NCCL_NET": "gIB",
        "NCCL_CROSS_NIC": "0",
        "NCCL_NET_GDR_LEVEL": "PIX",
        "NCCL_SOCKET_IFNAME": "eth0",
        "GLOO_SOCKET_IFNAME": "eth0",
        "TP_SOCKET_IFNAME": "eth0",
        "NCCL_TUNER_CONFIG_PATH": f"/usr/local/gib/configs/{tuner}",
    }
    assert {k: env[k]["value"] for k in expect} == expect
    assert "NCCL_IB_GID_INDEX" not in env  # the seed's unsourced setting is not carried over


def test_worker_start_script_sources_gib_then_execs_ray(helm):
    c = container(workers(render(helm))[0]["template"], "ray-worker")
    assert c["command"] == ["/bin/bash", "-c", "--"]
    script = c["args"][0]
    lines = [ln.strip() for ln in script.splitlines() if ln.strip()]
    assert lines[0] == "set -euo pipefail"
    assert lines[-1] == "exec ${KUBERAY_GEN_RAY_START_CMD}"
    src = script.index('. "$gib_env"')
    assert script.index("set_nccl_env.sh") < src < script.index("export LD_LIBRARY_PATH=") < script.index("exec ${KUBERAY")
    assert 'export LD_LIBRARY_PATH="/usr/local/gib/lib64:' in script
    assert raycluster(render(helm))["metadata"]["annotations"]["ray.io/overwrite-container-cmd"] == "true"


def test_chart_nccl_values_win_over_set_nccl_env(helm):
    objs = render(helm, [CI_DIR / "h200-multi-group-values.yaml"])
    script = container(workers(objs)[0]["template"], "ray-worker")["args"][0]
    saved = re.search(r"declare -px ([A-Z0-9_ ]+) 2>", script).group(1).split()
    assert {"NCCL_TUNER_CONFIG_PATH", "NCCL_TUNER_PLUGIN", "NCCL_DEBUG", "NCCL_SOCKET_IFNAME"} <= set(saved)
    assert script.index("declare -px") < script.index('. "$gib_env"') < script.index('eval "$chart_nccl"')


def test_gib_and_driver_host_paths_are_mounted_read_only(helm):
    tpl = workers(render(helm))[0]["template"]
    mounts = {m["name"]: m for m in container(tpl, "ray-worker")["volumeMounts"]}
    vols = {v["name"]: v for v in tpl["spec"]["volumes"]}
    assert vols["gib"]["hostPath"]["path"] == "/home/kubernetes/bin/gib"
    assert mounts["gib"] == {"name": "gib", "mountPath": "/usr/local/gib", "readOnly": True}
    assert vols["nvidia-driver"]["hostPath"]["path"] == "/home/kubernetes/bin/nvidia"
    assert mounts["nvidia-driver"] == {"name": "nvidia-driver", "mountPath": "/usr/local/nvidia", "readOnly": True}


def test_shm_is_memory_backed_and_sized_from_values(helm):
    tpl = workers(render(helm))[0]["template"]
    vols = {v["name"]: v for v in tpl["spec"]["volumes"]}
    assert vols["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "240Gi"}
    mounts = {m["mountPath"] for m in container(tpl, "ray-worker")["volumeMounts"]}
    assert "/dev/shm" in mounts


@pytest.mark.parametrize("scenario", SCENARIOS, ids=SCENARIO_IDS)
def test_head_and_workers_share_the_same_environment(helm, scenario):
    objs = render(helm, [scenario])
    envs = [container(head(objs)["template"], "ray-head")["env"]]
    envs += [container(g["template"], "ray-worker")["env"] for g in workers(objs)]
    assert all(e == envs[0] for e in envs)


def test_nccl_debug_and_extra_env(helm):
    objs = render(helm, [CI_DIR / "h200-multi-group-values.yaml"])
    env = env_of(container(head(objs)["template"], "ray-head"))
    assert env["NCCL_DEBUG"]["value"] == "INFO"
    assert env["NCCL_TUNER_PLUGIN"]["value"] == "none"
    assert env["RAY_DEDUP_LOGS"]["value"] == "0"


NO_INSTALL = re.compile(r"\b(apt-get|apt|pip|pip3|uv\s+venv|uv\s+pip|git\s+(pull|clone|checkout)|sed\s+-i|curl|wget|conda)\b")


@pytest.mark.parametrize("scenario", SCENARIOS, ids=SCENARIO_IDS)
def test_nothing_is_installed_or_patched_at_pod_start(helm, scenario):
    for name, tpl in pod_specs(render(helm, [scenario])):
        for c in tpl["spec"]["containers"] + tpl["spec"].get("initContainers", []):
            text = " ".join(c.get("command", []) + c.get("args", []))
            assert not NO_INSTALL.search(text), f"{name}/{c['name']}: {NO_INSTALL.search(text).group(0)}"


@pytest.mark.parametrize("scenario", SCENARIOS, ids=SCENARIO_IDS)
def test_no_privileged_or_host_network_unless_asked(helm, scenario):
    for name, tpl in pod_specs(render(helm, [scenario])):
        assert not tpl["spec"].get("hostNetwork"), name
        for c in tpl["spec"]["containers"]:
            assert not (c.get("securityContext") or {}).get("privileged"), f"{name}/{c['name']}"


def test_privileged_only_by_value(helm):
    v = with_changes(values_for(), {"worker.securityContext": {"privileged": True}})
    c = container(workers(render(helm, [v]))[0]["template"], "ray-worker")
    assert c["securityContext"] == {"privileged": True}


@pytest.mark.parametrize("scenario", [None, *SCENARIOS], ids=["defaults", *SCENARIO_IDS])
def test_no_image_uses_latest_or_always(helm, scenario):
    for _, tpl in pod_specs(render(helm, [scenario] if scenario else [])):
        for c in tpl["spec"]["containers"]:
            assert not c["image"].endswith(":latest") and ":" in c["image"]
            assert c.get("imagePullPolicy") != "Always"


def test_own_probes_avoid_wget(helm):
    objs = render(helm)
    hc = container(head(objs)["template"], "ray-head")
    wc = container(workers(objs)[0]["template"], "ray-worker")
    assert hc["readinessProbe"]["httpGet"] == {"path": "/api/gcs_healthz", "port": 8265}
    assert wc["readinessProbe"]["httpGet"] == {"path": "/api/local_raylet_healthz", "port": 52365}
    assert "exec" not in hc["livenessProbe"] and "exec" not in wc["livenessProbe"]


# --- storage ------------------------------------------------------------------------------


def test_static_lustre_volume_and_claim(helm):
    objs = render(helm)
    pv, pvc = one(objs, "PersistentVolume"), one(objs, "PersistentVolumeClaim")
    assert pv["spec"]["csi"]["driver"] == "lustre.csi.storage.gke.io"
    assert pv["spec"]["csi"]["volumeHandle"] == "PROJECT_ID/ZONE/nemo-rl-lustre"
    assert set(pv["spec"]["csi"]["volumeAttributes"]) == {"ip", "filesystem"}
    assert pv["spec"]["accessModes"] == pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    assert pv["spec"]["claimRef"] == {"namespace": "default", "name": pvc["metadata"]["name"]}
    assert pv["spec"]["capacity"]["storage"] == "9000Gi"
    assert pv["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_existing_claim_renders_no_volume_objects(helm):
    objs = render(helm, [CI_DIR / "h200-tcp-existing-claim-values.yaml"])
    assert kinds(objs, "PersistentVolume") == kinds(objs, "PersistentVolumeClaim") == []
    for _, tpl in ray_pod_specs(objs):
        claims = [v["persistentVolumeClaim"]["claimName"] for v in tpl["spec"]["volumes"] if "persistentVolumeClaim" in v]
        assert claims == ["team-lustre"]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=SCENARIO_IDS)
def test_shared_volume_at_the_same_path_everywhere_and_hf_home_on_it(helm, scenario):
    objs = render(helm, [scenario])
    for name, tpl in ray_pod_specs(objs):
        ray = tpl["spec"]["containers"][0]
        mounts = {m["name"]: m["mountPath"] for m in ray["volumeMounts"]}
        assert mounts["shared-data"] == "/data", name
        assert env_of(ray)["HF_HOME"]["value"].startswith("/data/"), name


# --- secrets ------------------------------------------------------------------------------


def test_tokens_come_only_from_secret_references(helm):
    objs = render(helm, [CI_DIR / "h200-multi-group-values.yaml"])
    for name, tpl in ray_pod_specs(objs):
        env = env_of(tpl["spec"]["containers"][0])
        assert env["HF_TOKEN"] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "rl-tokens", "key": "HF_TOKEN"}}}, name
        assert env["WANDB_API_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "rl-tokens", "key": "WANDB_API_KEY"}
    assert kinds(objs, "Secret") == []


def test_no_secret_reference_without_an_existing_secret(helm):
    v = with_changes(values_for(), {"secrets.source": "none", "secrets.existingSecret": "", "secrets.hfTokenKey": ""})
    for _, tpl in pod_specs(render(helm, [v])):
        env = env_of(tpl["spec"]["containers"][0])
        assert "HF_TOKEN" not in env and "WANDB_API_KEY" not in env


def test_service_accounts_mount_no_token_and_only_the_launcher_asks_for_one(helm):
    objs = render(helm)
    assert {sa["metadata"]["name"]: sa["automountServiceAccountToken"] for sa in kinds(objs, "ServiceAccount")} == {
        "nemo-rl": False,
        "nemo-rl-launcher": False,
    }
    for name, tpl in pod_specs(objs):
        launcher = tpl["metadata"]["labels"]["app.kubernetes.io/component"] == "launcher"
        assert tpl["spec"]["automountServiceAccountToken"] is launcher, name


def test_workload_identity_annotation(helm):
    v = with_changes(values_for(), {"serviceAccount.annotations": {"iam.gke.io/gcp-service-account": "rl@p.iam.gserviceaccount.com"}})
    (sa,) = [sa for sa in kinds(render(helm, [v]), "ServiceAccount") if sa["metadata"]["name"] == "nemo-rl"]
    assert sa["metadata"]["annotations"] == {"iam.gke.io/gcp-service-account": "rl@p.iam.gserviceaccount.com"}


# Strings that YAML would read as numbers, booleans or null, in every field a user names: each must
# render as the same string (unquoted, "1234" became a number and the object was invalid).
NUMBER_LIKE = {
    "secrets.existingSecret": "1234",
    "secrets.hfTokenKey": "0",
    "secrets.wandbApiKeyKey": "2",
    "storage.existingClaim": "0x10",
    "serviceAccount.name": "true",
    "nameOverride": "123",
    "kueue.enabled": True,
    "kueue.queueName": "1234",
    "extraEnv": [{"name": "true", "value": "x"}],
}
NUMBER_LIKE_EXTERNAL = {
    "secrets.source": "external",
    "secrets.existingSecret": "",
    "secrets.hfTokenKey": "0",
    "secrets.external.storeName": "1234",
    "secrets.external.hfTokenRemoteKey": "42",
}


@pytest.mark.parametrize(("wandb", "changes"), [(True, NUMBER_LIKE), (False, NUMBER_LIKE_EXTERNAL)], ids=["names", "external-secret"])
def test_number_like_strings_render_as_strings(helm, wandb, changes):
    values = with_changes(values_for(wandb=wandb), changes)
    values["network"]["rdma"][0]["name"] = "true"
    assert [f for f in validate_values(values) if f.level == "error"] == []
    objs = render(helm, [values])
    assert validate_documents(objs) == []
    text = json.dumps(objs)
    for key, value in changes.items():
        if isinstance(value, str) and value and key != "secrets.source":
            assert json.dumps(value) in text, key
    assert '"name": "true"' in text  # the first RDMA network, in its objects and the pod annotation


# --- NOTES --------------------------------------------------------------------------------


def test_notes_explain_how_to_watch_and_reach_the_dashboard(helms):
    # NOTES.txt is only rendered by `helm install`; Helm 3.17's --dry-run=client still dials the
    # cluster, so this uses the pinned Helm 4, which renders client-side.
    helm = next(h for h in helms if h.major == 4)
    out = helm.run(["install", "nemo-rl", str(CHART), "--dry-run=client", "--namespace", "ml"])
    notes = out.split("NOTES:", 1)[1]
    assert "kubectl get raycluster nemo-rl -n ml -w" in notes
    assert "kubectl port-forward -n ml service/nemo-rl-head-svc 8265:8265" in notes
    assert "2 x a3-ultragpu-8g (16 x H200 GPUs)" in notes
    assert "placeholder instance" in notes
    assert "This release owns the cluster-wide GKE network objects (gvnic-1, rdma-0..rdma-7)" in notes
    assert "--existing-networks" in notes
    # How to follow the run and when to run helm test; the launcher Job's name is the rendered one.
    job = next(o for o in render(helm, [], namespace="ml") if o["kind"] == "Job" and "-run-" in o["metadata"]["name"])
    assert f"kubectl logs -n ml -f job/{job['metadata']['name']}" in notes
    assert "one line per training step (step of max steps, mean reward," in notes
    assert "python -m generator status nemo-rl -n ml --watch" in notes
    assert "Run `helm test nemo-rl -n ml` once the 2 GPU worker(s) are Ready" in notes and "GPUs, and eth0..eth9 on each worker." in notes
    assert "suspends the RayCluster (under Kueue: scales its GPU worker groups to 0)" in notes
    quiet = helm.run(["install", "nemo-rl", str(CHART), "--dry-run=client", "--set", "network.createObjects=false"])
    assert "owns the cluster-wide" not in quiet.split("NOTES:", 1)[1]
    kept = helm.run(["install", "nemo-rl", str(CHART), "--dry-run=client", "--set", "launcher.releaseGpus=false"])
    assert "the GPU workers stay up until `helm uninstall`" in kept.split("NOTES:", 1)[1]
    # Under Kueue, how to upgrade (tests/cluster/test_launcher_release.py shows why)
    assert "--server-side=false" not in notes
    queued = helm.run(["install", "nemo-rl", str(CHART), "--dry-run=client", "--set", "kueue.enabled=true", "--set", "kueue.queueName=q"])
    assert "Under Kueue, upgrade with Helm 4's `--server-side=false`" in queued.split("NOTES:", 1)[1]


def test_rendered_yaml_is_plain(helm):
    # Every document parses on its own and nothing renders as an empty mapping line.
    text = render_text(helm, [CI_DIR / "h200-multi-group-values.yaml"])
    for doc in text.split("\n---\n"):
        parsed = yaml.safe_load(doc)
        if parsed["kind"] != "ConfigMap":  # file contents may hold blank lines
            assert not re.search(r"^\s+$", doc, re.M), parsed["kind"]


def test_a_shared_reservation_is_selected_by_its_project_too(helm):
    v = values_for(provisioning="reservation", reservation="res-a", reservation_project="other-proj")
    assert v["workerGroups"][0]["reservationProject"] == "other-proj"
    rc = one(render(helm, [v]), "RayCluster")
    selector = rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["nodeSelector"]
    assert selector["cloud.google.com/reservation-name"] == "res-a"
    assert selector["cloud.google.com/reservation-project"] == "other-proj"
    own = one(render(helm, [values_for(provisioning="reservation", reservation="res-a")]), "RayCluster")
    assert "cloud.google.com/reservation-project" not in own["spec"]["workerGroupSpecs"][0]["template"]["spec"]["nodeSelector"]
    assert values_for(reservation_project="other-proj")["workerGroups"][0]["reservationProject"] == ""  # Spot: nothing to select


def test_an_image_digest_pins_every_pod_of_the_release(helm):
    digest = "sha256:" + "ab" * 32
    objs = render(helm, [with_changes(values_for(), {"image.digest": digest})])
    images = {c["image"] for _, tpl in pod_specs(objs) for c in tpl["spec"]["containers"]}
    assert images == {f"nvcr.io/nvidia/nemo-rl:v0.7.0@{digest}"}


@pytest.mark.parametrize("mode", ["preferred", "required"])
def test_kueue_topology_places_each_worker_group_with_kueues_annotation(helm, mode):
    v = with_changes(
        values_for(kueue_queue="gpu-queue"), {"kueue.topology": {"mode": mode, "level": "cloud.google.com/gce-topology-subblock"}}
    )
    rc = one(render(helm, [v]), "RayCluster")
    for g in rc["spec"]["workerGroupSpecs"]:
        assert (
            g["template"]["metadata"]["annotations"][f"kueue.x-k8s.io/podset-{mode}-topology"] == "cloud.google.com/gce-topology-subblock"
        )
    assert not any("kueue.x-k8s.io/podset" in k for k in rc["spec"]["headGroupSpec"]["template"]["metadata"].get("annotations", {}))
    off = one(render(helm, [values_for(kueue_queue="gpu-queue")]), "RayCluster")
    assert not any("podset" in k for g in off["spec"]["workerGroupSpecs"] for k in g["template"]["metadata"].get("annotations", {}))
    findings = validate_values(with_changes(values_for(), {"kueue.topology.mode": mode}))
    assert [f.key for f in findings if f.level == "warning" and f.key.startswith("kueue")] == ["kueue.topology.mode"]
