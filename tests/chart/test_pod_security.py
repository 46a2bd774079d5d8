"""Pod Security: the rendered Ray pods meet Kubernetes' baseline level but for the two documented
host paths (the NVIDIA driver and gIB), the helm test pod meets restricted, and the launcher and
preparation pods meet restricted but for running as root (launcher.runAsUser, prepare.runAsUser:
another id meets it whole). The checks are those of k8s.io/pod-security-admission (pod_security.py)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from conftest import CI_DIR, pod_specs, render, values_for, with_changes
from pod_security import BASELINE, RESTRICTED, violations

from generator.sync import EXAMPLES_DIR

SCENARIOS = sorted(CI_DIR.glob("*.yaml")) + sorted(EXAMPLES_DIR.glob("*.yaml"))
HOST_PATHS = {"nvidia-driver": "/home/kubernetes/bin/nvidia", "gib": "/home/kubernetes/bin/gib"}


def _split(objs):
    ray, jobs, tests = [], [], []
    for name, tpl in pod_specs(objs):
        component = tpl["metadata"]["labels"]["app.kubernetes.io/component"]
        (ray if name == "head" or name.startswith("worker:") else tests if component == "test" else jobs).append((name, tpl))
    return ray, jobs, tests


def _check(level, tpl):
    return violations(level, tpl["metadata"], tpl["spec"])


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_rendered_pods_meet_their_pod_security_level(helm, path: Path):
    ray, jobs, tests = _split(render(helm, [path]))
    assert ray and jobs and tests
    for name, tpl in ray:
        found = _check("baseline", tpl)
        if name == "head":
            assert found == {}, name
        else:  # the documented exception: the driver and gIB from the host, read-only
            assert set(found) == {"hostPathVolumes"}, (name, found)
            hostpaths = {v["name"]: v["hostPath"]["path"] for v in tpl["spec"]["volumes"] if "hostPath" in v}
            assert hostpaths.items() <= HOST_PATHS.items() and "nvidia-driver" in hostpaths
            mounts = [m for c in tpl["spec"]["containers"] for m in c.get("volumeMounts", []) if m["name"] in hostpaths]
            assert mounts and all(m.get("readOnly") for m in mounts)
    for name, tpl in jobs:
        assert set(_check("restricted", tpl)) == {"runAsNonRoot"}, name  # root by default: launcher.runAsUser says why
    for name, tpl in tests:
        assert _check("restricted", tpl) == {}, name


def test_jobs_meet_restricted_whole_with_a_non_root_user(helm):
    v = with_changes(values_for(), {"launcher.runAsUser": 1000, "prepare.runAsUser": 1000})
    _, jobs, _ = _split(render(helm, [v]))
    assert len(jobs) == 2
    for name, tpl in jobs:
        assert _check("restricted", tpl) == {}, name
        assert tpl["spec"]["securityContext"]["fsGroup"] == 1000


def test_every_container_has_a_read_only_root_but_ray(helm):
    v = with_changes(values_for(), {"logging.fluentBit.enabled": True})
    ray, jobs, tests = _split(render(helm, [v]))
    for name, tpl in jobs + tests:
        for c in tpl["spec"]["containers"]:
            assert c["securityContext"]["readOnlyRootFilesystem"] is True, name
            assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]
            assert {"name": "HOME", "value": "/tmp"} in c["env"]
    for name, tpl in ray:
        sidecar = next(c for c in tpl["spec"]["containers"] if c["name"] == "fluent-bit")
        hardened = {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
        assert sidecar["securityContext"] == hardened
        assert sidecar["resources"]["limits"]["cpu"] == "500m"
        assert _check("baseline", tpl).keys() <= {"hostPathVolumes"}, name


def test_ray_pods_run_seccomp_runtime_default_without_escalation_or_capabilities(helm):
    ray, _, _ = _split(render(helm))
    for name, tpl in ray:
        assert tpl["spec"]["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}, name
        (c,) = tpl["spec"]["containers"]
        assert c["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}, name


def test_capabilities_can_be_added_back_within_baseline(helm):
    v = with_changes(values_for(), {"worker.securityContext.capabilities.add": ["DAC_OVERRIDE", "IPC_LOCK"]})
    ray, _, _ = _split(render(helm, [v]))
    worker = dict(ray)["worker:gpu"]
    assert worker["spec"]["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["DAC_OVERRIDE", "IPC_LOCK"]}
    assert set(_check("baseline", worker)) == {"hostPathVolumes", "capabilities_baseline"}  # IPC_LOCK is beyond baseline
    assert _check("baseline", dict(ray)["head"]) == {}


def test_privileged_workers_leave_out_what_the_api_server_refuses_beside_it(helm):
    v = with_changes(values_for(), {"worker.securityContext.privileged": True})
    ray, _, _ = _split(render(helm, [v]))
    worker = dict(ray)["worker:gpu"]
    assert worker["spec"]["containers"][0]["securityContext"] == {"privileged": True}
    assert set(_check("baseline", worker)) == {"hostPathVolumes", "privileged"}


# --- the checks themselves, against the upstream definitions ---------------------------------

COMPLIANT = {
    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [
        {
            "name": "c",
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            "ports": [{"containerPort": 8080}],
        }
    ],
    "volumes": [{"name": "v", "emptyDir": {}}],
}
C = "containers.0.securityContext"
BREAKS = [
    # (change to COMPLIANT, level, the one check ID it trips)
    ({"hostNetwork": True}, "baseline", "hostNetwork"),
    ({f"{C}.privileged": True}, "baseline", "privileged"),
    ({f"{C}.capabilities.add": ["NET_ADMIN"]}, "baseline", "capabilities_baseline"),
    ({"volumes": [{"name": "h", "hostPath": {"path": "/"}}]}, "baseline", "hostPathVolumes"),
    ({"containers.0.ports": [{"containerPort": 80, "hostPort": 80}]}, "baseline", "hostPorts"),
    ({"containers.0.readinessProbe": {"httpGet": {"port": 1, "host": "10.0.0.1"}}}, "baseline", "hostProbesAndHostLifecycle"),
    ({f"{C}.appArmorProfile": {"type": "Unconfined"}}, "baseline", "appArmorProfile"),
    ({f"{C}.seLinuxOptions": {"type": "spc_t"}}, "baseline", "seLinuxOptions"),
    ({f"{C}.procMount": "Unmasked"}, "baseline", "procMount"),
    ({f"{C}.seccompProfile": {"type": "Unconfined"}}, "baseline", "seccompProfile_baseline"),
    ({"securityContext.sysctls": [{"name": "kernel.msgmax", "value": "1"}]}, "baseline", "sysctls"),
    ({f"{C}.windowsOptions": {"hostProcess": True}}, "baseline", "windowsHostProcess"),
    ({"volumes": [{"name": "n", "nfs": {"server": "s", "path": "/"}}]}, "restricted", "restrictedVolumes"),
    ({f"{C}.allowPrivilegeEscalation": True}, "restricted", "allowPrivilegeEscalation"),
    ({"securityContext.runAsNonRoot": False}, "restricted", "runAsNonRoot"),
    ({f"{C}.runAsUser": 0}, "restricted", "runAsUser"),
    ({"securityContext.seccompProfile": None}, "restricted", "seccompProfile_restricted"),
    ({f"{C}.capabilities.add": ["CHOWN"]}, "restricted", "capabilities_restricted"),
    ({f"{C}.procMount": "Unmasked"}, "restricted", "procMount_restricted"),
]


def _changed(changes):
    spec = copy.deepcopy(COMPLIANT)
    for dotted, value in changes.items():
        node, parts = spec, dotted.split(".")
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        if value is None:
            node.pop(parts[-1])
        else:
            node[parts[-1]] = value
    return spec


def test_the_compliant_pod_passes_both_levels():
    assert violations("baseline", {}, COMPLIANT) == violations("restricted", {}, COMPLIANT) == {}


@pytest.mark.parametrize(("changes", "level", "check_id"), BREAKS, ids=[b[2] for b in BREAKS])
def test_each_check_forbids_what_its_upstream_definition_forbids(changes, level, check_id):
    found = violations(level, {}, _changed(changes))
    expected = "hostNamespaces" if check_id == "hostNetwork" else check_id
    assert list(found) == [expected], found


def test_restricted_replaces_the_baseline_checks_it_overrides():
    found = violations("restricted", {}, _changed({f"{C}.capabilities.add": ["SYS_ADMIN"]}))
    assert list(found) == ["capabilities_restricted"]
    assert set(BASELINE) | {k for k in RESTRICTED} >= {"hostPathVolumes", "restrictedVolumes"}


def test_user_namespaces_relax_the_root_checks_and_proc_mount_at_baseline():
    spec = _changed({"securityContext.runAsNonRoot": False, f"{C}.runAsUser": 0, f"{C}.procMount": "Unmasked"})
    spec["hostUsers"] = False
    assert violations("baseline", {}, spec) == {}
    assert list(violations("restricted", {}, spec)) == ["procMount_restricted"]


def test_apparmor_annotations_are_checked():
    meta = {"annotations": {"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}}
    assert list(violations("baseline", meta, COMPLIANT)) == ["appArmorProfile"]
    meta = {"annotations": {"container.apparmor.security.beta.kubernetes.io/c": "runtime/default"}}
    assert violations("baseline", meta, COMPLIANT) == {}
