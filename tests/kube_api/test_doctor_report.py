"""doctor's verdict and advice, apart from the cluster: "ready" only when every check ran, the
permission a refused read needed as RBAC names it, the Lustre fix is what infra.sh does, and the
values key a dry run's refusal traces to.
(Against the real API server's 403s: tests/cluster/test_doctor.py.)"""

from __future__ import annotations

import pytest

from generator.cluster import report
from generator.cluster.checks import dry_run, storage
from generator.cluster.kube import permission_of
from generator.infra import steps
from generator.validate.objects import Pod

RAN = [report.passed("api", "answers"), report.passed("storage", "registered")]
UNREAD = report.skipped("gpu-nodes", "nodes is forbidden", "list nodes (cluster-scoped)")


@pytest.mark.parametrize(
    ("results", "verdict", "failing"),
    [
        (RAN, "ready", False),
        ([*RAN, UNREAD], "not checked", True),
        ([*RAN, UNREAD, report.failed("quotas", "over", "fix")], "not ready", True),
        ([*RAN, report.warned("gpu-nodes", "no node yet")], "ready", False),
    ],
)
def test_ready_only_when_every_check_ran(results, verdict, failing):
    assert report.verdict(results) == verdict
    assert report.failing(results) is failing


def test_the_summary_names_what_was_not_checked():
    text = report.summary([*RAN, UNREAD])
    assert text == (
        "doctor: not checked: 2 passed, 0 failed, 0 warning(s), 1 not checked (gpu-nodes): doctor could not read what they check"
    )
    assert UNREAD.line() == (
        "skip  gpu-nodes: not checked: nodes is forbidden (you may not list nodes (cluster-scoped)) - fix: ask for list nodes "
        "(cluster-scoped) (kubectl auth can-i list nodes), or run doctor as someone who has it"
    )


@pytest.mark.parametrize(
    ("path", "permission"),
    [
        ("/api/v1/nodes", "list nodes (cluster-scoped)"),
        ("/api/v1/namespaces/ns1", "get namespaces ns1 (cluster-scoped)"),
        ("/api/v1/namespaces/ns1/secrets/tok", "get secrets tok in namespace ns1"),
        ("/api/v1/namespaces/ns1/resourcequotas", "list resourcequotas in namespace ns1"),
        ("/apis/apps/v1/namespaces/kube-system/daemonsets/x", "get daemonsets.apps x in namespace kube-system"),
        (
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/rayclusters.ray.io",
            "get customresourcedefinitions.apiextensions.k8s.io rayclusters.ray.io (cluster-scoped)",
        ),
        ("/apis/apps/v1/deployments", "list deployments.apps (cluster-scoped)"),
        ("/api/v1/namespaces/ns1/services/http:h:8265/proxy/api/jobs/", "get services/proxy http:h:8265 in namespace ns1"),
    ],
)
def test_a_refused_read_names_the_rbac_permission(path, permission):
    assert permission_of(path) == permission


@pytest.mark.parametrize("mode", ["standard", "autopilot"])
def test_the_lustre_fix_is_the_flag_infra_sh_creates_the_cluster_with_and_not_the_legacy_port(mode):
    fix = storage.enable_driver(mode)
    flag = storage.ENABLE_DRIVER[mode]
    script = steps.STANDARD_CLUSTER if mode == "standard" else steps.AUTOPILOT_CLUSTER
    creates_with = flag.replace("--update-addons=LustreCsiDriver=ENABLED", "LustreCsiDriver")
    assert creates_with in script
    assert flag in fix and "legacy-lustre-port" not in fix
    assert "legacy-lustre-port" not in script


# The API server's refusals as the test bed's kube-apiserver (v1.34) words them, and the values key
# each traces to (generator/cluster/checks/dry_run.py values_key).
WORKER = Pod("RayCluster/nemo-rl workerGroupSpecs[0]", {}, {}, "worker", "workerGroups[0]", ray="worker", group=0)
LAUNCHER = Pod("Job/nemo-rl-run-1", {}, {}, "launcher", "launcher")
HEAD = Pod("RayCluster/nemo-rl head", {}, {}, "head", "head", ray="head")


NO = 'pods "p" is forbidden: '
QUOTA = NO + "exceeded quota: q, requested: "
RESTRICTED = NO + 'violates PodSecurity "restricted:latest": runAsNonRoot != true'


@pytest.mark.parametrize(
    ("pod", "message", "key"),
    [
        (WORKER, QUOTA + "requests.memory=2500Gi, used: requests.memory=0, limited: ...", "worker.resources.requests.memory"),
        (WORKER, QUOTA + "limits.cpu=215, used: limits.cpu=0, limited: limits.cpu=100", "worker.resources.limits.cpu"),
        (WORKER, QUOTA + "requests.nvidia.com/gpu=8, used: requests.nvidia.com/gpu=0, ...", "accelerator.gpusPerNode"),
        (WORKER, QUOTA + "pods=1, used: pods=3, limited: pods=3", "workerGroups[0].replicas"),
        (LAUNCHER, NO + "failed quota: q: must specify limits.cpu for: launcher", "launcher.resources.limits.cpu"),
        (WORKER, NO + "[maximum memory usage per Container is 1000Gi, but limit is 2740Gi, ...]", "worker.resources.limits.memory"),
        (HEAD, NO + "minimum cpu usage per Container is 2, but request is 1", "head.resources.requests.cpu"),
        (LAUNCHER, RESTRICTED + ' (pod or container "launcher" must set securityContext.runAsNonRoot=true)', "launcher.runAsUser"),
        (HEAD, RESTRICTED, ""),  # the image's root: no values key sets it
        (HEAD, NO + 'error looking up service account ns/training: serviceaccount "training" not found', "serviceAccount.name"),
    ],
)
def test_a_refusal_traces_to_the_values_key_of_its_field(pod, message, key):
    s = dry_run.Submission(f"Pod from {pod.where}", "", "pods", True, "/api/v1/namespaces/ns/pods", {}, pod)
    assert dry_run.values_key(s, message) == key


@pytest.mark.parametrize(("what", "key"), [("Network/rdma-0", "network"), ("PersistentVolume/x", "storage"), ("RayCluster/x", "")])
def test_a_refused_object_names_the_values_map_it_comes_from(what, key):
    s = dry_run.Submission(what, "", "x", True, "/x", {})
    assert dry_run.values_key(s, "admission webhook denied the request") == key
