"""Hardening: tokens never leak, access is limited, data survives, upgrades are safe, bad input
is refused cleanly."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import CHART, kinds, load_chart_program, one, pod_specs, render, render_text, values_for, with_changes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from generator.helm.runner import HelmError
from generator.nemo_rl.recipe_config import apply_overrides, parse_entrypoint

ROOT = Path(__file__).resolve().parents[2]
HF = "hf_FAKE_TOKEN_0123456789abcdef"
WANDB = "wandbFAKEKEY0123456789abcdefabcdef01234567"


def _token_forms(token: str) -> list[str]:
    return [token, base64.b64encode(token.encode()).decode()]


def _where(objs, needle: str) -> list[str]:
    """Every place (object and dotted path) whose text contains needle."""
    found = []

    def walk(node, path):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{path}.{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}[{i}]")
        elif needle in str(node):
            found.append(path)

    for o in objs:
        walk(o, f"{o['kind']}/{o['metadata']['name']}")
    return found


@pytest.fixture
def token_files(tmp_path):
    hf, wb = tmp_path / "hf_token", tmp_path / "wandb_key"
    hf.write_text(HF + "\n")
    wb.write_text(WANDB + "\n")
    return hf, wb


WAYS = ["existing-secret", "set-file", "set", "external"]


def _render_with_tokens(helm, way, token_files, tmp_path):
    base = values_for(wandb=True)
    if way == "existing-secret":
        return render(helm, [base], tmp_dir=tmp_path)
    if way == "external":
        v = with_changes(
            base,
            {
                "secrets.source": "external",
                "secrets.existingSecret": "",
                "secrets.external": {
                    **base["secrets"]["external"],
                    "storeName": "gcp-sm",
                    "hfTokenRemoteKey": "hf",
                    "wandbApiKeyRemoteKey": "wb",
                },
            },
        )
        return render(helm, [v], tmp_dir=tmp_path)
    v = with_changes(base, {"secrets.source": "files", "secrets.existingSecret": ""})
    values_file = tmp_path / "v.yaml"
    values_file.write_text(yaml.safe_dump(v))
    hf, wb = token_files
    if way == "set-file":
        extra = ["--set-file", f"secrets.fromFiles.hfToken={hf}", "--set-file", f"secrets.fromFiles.wandbApiKey={wb}"]
    else:
        extra = ["--set", f"secrets.fromFiles.hfToken={HF}", "--set", f"secrets.fromFiles.wandbApiKey={WANDB}"]
    from generator.render.manifests import parse_documents

    return parse_documents(helm.template([values_file], extra=extra))


@pytest.mark.parametrize("way", WAYS)
def test_tokens_appear_only_in_the_secret_itself(helm, way, token_files, tmp_path):
    objs = _render_with_tokens(helm, way, token_files, tmp_path)
    for token in (HF, WANDB):
        for form in _token_forms(token):
            places = _where(objs, form)
            assert all(p.startswith("Secret/") for p in places), places
    if way in ("set-file", "set"):
        secret = one(objs, "Secret")
        assert secret["metadata"]["name"] == "nemo-rl-tokens"
        assert base64.b64decode(secret["data"]["HF_TOKEN"]).decode() == HF  # trimmed of the file's newline
        assert base64.b64decode(secret["data"]["WANDB_API_KEY"]).decode() == WANDB
    else:
        assert kinds(objs, "Secret") == []
    # Pods reference the Secret by key, never by value.
    for name, tpl in pod_specs(objs):
        for c in tpl["spec"]["containers"]:
            for e in c.get("env", []):
                if e["name"] in ("HF_TOKEN", "WANDB_API_KEY"):
                    assert "value" not in e and "secretKeyRef" in e["valueFrom"], f"{name}/{c['name']}"


def test_external_secret_is_rendered_and_valid(helm, token_files, tmp_path):
    from generator.render.manifests import validate_documents

    objs = _render_with_tokens(helm, "external", token_files, tmp_path)
    es = one(objs, "ExternalSecret")
    assert es["spec"]["target"]["name"] == "nemo-rl-tokens"
    assert {d["secretKey"] for d in es["spec"]["data"]} == {"HF_TOKEN", "WANDB_API_KEY"}
    assert validate_documents(objs) == []


def test_files_source_without_the_file_fails_with_the_flag_to_use(helm):
    v = with_changes(values_for(), {"secrets.source": "files", "secrets.existingSecret": ""})
    with pytest.raises(HelmError, match=r"--set-file secrets\.fromFiles\.hfToken=FILE"):
        render_text(helm, [v])


# --- access -------------------------------------------------------------------------------


def _matches(selector: dict, labels: dict) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        if expr["operator"] == "In" and labels.get(expr["key"]) not in expr["values"]:
            return False
    return True


def test_network_policy_admits_only_the_releases_own_pods(helm):
    objs = render(helm)
    np = one(objs, "NetworkPolicy")
    pods = dict(pod_specs(objs))
    ray = [n for n in pods if n == "head" or n.startswith("worker:")]
    others = [n for n in pods if n not in ray]
    assert all(_matches(np["spec"]["podSelector"], pods[n]["metadata"]["labels"]) for n in ray)
    assert not any(_matches(np["spec"]["podSelector"], pods[n]["metadata"]["labels"]) for n in others)
    (rule,) = np["spec"]["ingress"]
    (peer,) = rule["from"]
    assert "ports" not in rule  # the release's pods may use any port (Ray, NCCL bootstrap)
    assert all(_matches(peer["podSelector"], pods[n]["metadata"]["labels"]) for n in pods)  # launcher, prepare, test pod too
    assert not _matches(peer["podSelector"], {**pods["head"]["metadata"]["labels"], "app.kubernetes.io/instance": "other"})
    assert "namespaceSelector" not in peer  # same namespace only


def test_allow_list_reaches_only_the_ray_ports(helm):
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    np = one(render(helm, [with_changes(values_for(), {"access.networkPolicy.allowFrom": [peer]})]), "NetworkPolicy")
    extra = np["spec"]["ingress"][1]
    assert extra["from"] == [peer]
    assert sorted(p["port"] for p in extra["ports"]) == [6379, 8265, 10001]


def test_network_policy_can_be_switched_off(helm):
    assert kinds(render(helm, [with_changes(values_for(), {"access.networkPolicy.enabled": False})]), "NetworkPolicy") == []


def test_dashboard_is_not_exposed_outside_the_cluster(helm):
    objs = render(helm)
    assert one(objs, "RayCluster")["spec"]["headGroupSpec"]["serviceType"] == "ClusterIP"
    assert kinds(objs, "Service") == kinds(objs, "Ingress") == []


# --- data safety --------------------------------------------------------------------------


def test_pod_disruption_budget_holds_every_ray_pod(helm):
    objs = render(helm)
    pdb = one(objs, "PodDisruptionBudget")
    assert "maxUnavailable" not in pdb["spec"], "a RayCluster has no scale subresource: only an integer minAvailable works"
    rc = one(objs, "RayCluster")
    assert pdb["spec"]["minAvailable"] == 1 + sum(g["replicas"] for g in rc["spec"]["workerGroupSpecs"])
    pods = dict(pod_specs(objs))
    assert _matches(pdb["spec"]["selector"], pods["head"]["metadata"]["labels"])
    assert _matches(pdb["spec"]["selector"], pods["worker:gpu"]["metadata"]["labels"])
    assert not any(_matches(pdb["spec"]["selector"], t["metadata"]["labels"]) for n, t in pods.items() if n.startswith(("job:", "pod:")))


def test_uninstall_keeps_checkpoints(helm):
    objs = render(helm)
    for kind in ("PersistentVolume", "PersistentVolumeClaim"):
        assert one(objs, kind)["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert one(objs, "PersistentVolume")["spec"]["persistentVolumeReclaimPolicy"] == "Retain"


def test_flex_start_saves_before_the_7_day_limit(helm):
    v = values_for(provisioning="flex-start")
    assert "checkpointing.checkpoint_must_save_by=06:22:00:00" in v["grpo"]["overrides"]
    cm = next(c for c in kinds(render(helm, [v]), "ConfigMap") if "launch.json" in c["data"])
    cmd = parse_entrypoint(json.loads(cm["data"]["launch.json"])["entrypoint"])
    from generator.vendored import load_release_recipe

    cfg = apply_overrides(load_release_recipe("v0.7.0", cmd.recipe), cmd.overrides)
    assert cfg["checkpointing"]["checkpoint_must_save_by"] == "06:22:00:00"


def test_save_by_option_is_checked():
    assert "checkpointing.checkpoint_must_save_by=00:12:00:00" in values_for(save_by="00:12:00:00")["grpo"]["overrides"]
    from generator.nemo_rl.run_spec import SpecError

    with pytest.raises(SpecError, match="DD:HH:MM:SS"):
        values_for(save_by="12h")


def test_the_launcher_cannot_write_the_shared_volume_but_its_outcome_folder(helm):
    job = next(j for j in kinds(render(helm), "Job") if j["metadata"]["labels"]["app.kubernetes.io/component"] == "launcher")
    (c,) = job["spec"]["template"]["spec"]["containers"]
    writable = [m for m in c["volumeMounts"] if m["name"] == "shared-data" and not m.get("readOnly")]
    assert [(m["mountPath"], m["subPath"]) for m in writable] == [("/var/lib/nemo-rl-gke/outcome", "nemo-rl/gemma3-27b-gsm8k/launcher")]


# --- upgrade and rollback -----------------------------------------------------------------


def _ray_and_jobs(objs):
    rc = one(objs, "RayCluster")
    return rc, sorted(j["metadata"]["name"] for j in kinds(objs, "Job"))


def test_upgrade_with_the_same_values_changes_nothing(helm):
    assert render(helm, [values_for()]) == render(helm, [values_for()])


def test_upgrade_of_launcher_settings_keeps_the_ray_pods_and_the_run(helm):
    before = render(helm, [values_for()])
    after = render(helm, [with_changes(values_for(), {"launcher.maxRestarts": 5, "launcher.timeouts.gpusSeconds": 60})])
    (rc1, jobs1), (rc2, jobs2) = _ray_and_jobs(before), _ray_and_jobs(after)
    assert rc1 == rc2  # no Ray pod changes
    assert jobs1 != jobs2  # a new launcher reads the new settings ...
    ids = [
        {j["metadata"]["annotations"]["nemo-rl-gke/submission-id"] for j in kinds(objs, "Job") if "annotations" in j["metadata"]}
        for objs in (before, after)
    ]
    assert ids[0] == ids[1] and len(ids[0]) == 1  # ... of the same run, which it finds and does not submit again


def test_upgrade_with_a_new_run_spec_starts_a_new_launcher_and_rollback_restores(helm):
    a = values_for()
    b = with_changes(a, {"grpo.extraOverrides": ["grpo.max_num_steps=600"]})
    ra, rb, ra_again = render(helm, [a]), render(helm, [b]), render(helm, [a])
    (rc_a, jobs_a), (rc_b, jobs_b) = _ray_and_jobs(ra), _ray_and_jobs(rb)
    assert rc_a == rc_b  # the Ray cluster keeps running
    launch = [n for n in jobs_b if "-run-" in n]
    assert launch and launch[0] not in jobs_a  # a new launcher, not an edit of the immutable Job
    assert ra_again == ra  # rollback renders the previous revision exactly


# --- bad input everywhere -----------------------------------------------------------------


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "generator", *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=60, check=False
    )


def test_yaml_bomb_is_refused_quickly(tmp_path):
    bomb = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        bomb.append(f"{chr(97 + i)}: &{chr(97 + i)} [{', '.join(['*' + chr(96 + i)] * 10)}]")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(bomb) + "\n")
    proc = _cli("validate", str(path), cwd=tmp_path)
    assert proc.returncode == 2
    assert "more than 100000 nodes" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--gpu", "h200", "--name", "my run; rm -rf /"],
        ["--gpu", "h200", "--run-name", "$(reboot)"],
        ["--gpu", "h200", "--nodes", "9" * 30],
        ["--gpu", "h200", "--storage-claim", "../etc"],
        ["--gpu", "h200", "--network-prefix", "a b"],
        ["--gpu", "h200", "--secret", "tok en"],
        ["--gpu", "h200", "--max-steps", "-1"],
    ],
)
def test_the_generator_refuses_malformed_options_without_writing(tmp_path, args):
    proc = _cli(*args, cwd=tmp_path)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr and proc.stderr.strip().count("\n") <= 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "bad",
    [
        ["--project", "My Project"],
        ["--project", "p;rm"],
        ["--zone", "us-east1-b", "--region", "us-central1"],
        ["--nodes", "65"],
        ["--network-prefix", "$(x)"],
    ],
)
def test_infra_refuses_malformed_input_without_writing(tmp_path, bad):
    args = {"--project": "my-proj-1", "--region": "us-central1", "--zone": "us-central1-b"}
    for i in range(0, len(bad), 2):
        args[bad[i]] = bad[i + 1]
    flat = [x for kv in args.items() for x in kv]
    proc = _cli("infra", "--gpu", "h200", *flat, "-o", "infra.sh", cwd=tmp_path)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


launcher_spec = load_chart_program("launcher_spec")
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=10,
)
spec_like = st.fixed_dictionaries(
    {},
    optional={k: json_values for k in launcher_spec.SPEC_KEYS} | {"token": st.text(max_size=5)},
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(json_values, spec_like))
def test_random_spec_files_never_crash_the_launcher_parser(data):
    try:
        spec = launcher_spec.parse_spec(data)
    except launcher_spec.SpecError as e:
        assert str(e) and "\n" not in str(e)
    else:
        assert isinstance(spec.expected_gpus, int)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.binary(max_size=300), json_values.map(lambda v: json.dumps(v).encode())))
def test_random_spec_file_bytes_never_crash_the_launcher(tmp_path, raw):
    path = tmp_path / "launch.json"
    path.write_bytes(raw)
    try:
        launcher_spec.load_spec(str(path))
    except launcher_spec.SpecError as e:
        assert str(e) and "\n" not in str(e)


def test_chart_renders_no_privileged_or_host_network_by_default(helm):
    for name, tpl in pod_specs(render(helm)):
        assert not tpl["spec"].get("hostNetwork"), name
        for c in tpl["spec"]["containers"]:
            assert not (c.get("securityContext") or {}).get("privileged"), name


def test_notes_and_readme_name_the_opt_ins():
    readme = (CHART / "README.md").read_text()
    for key in ("worker.securityContext", "access.networkPolicy.enabled", "dataSafety.podDisruptionBudget"):
        assert f"`{key}" in readme
