"""doctor's verdict and advice, apart from the cluster: "ready" only when every check ran, the
permission a refused read needed as RBAC names it, and the Lustre fix is what infra.sh does.
(Against the real API server's 403s: tests/cluster/test_doctor.py.)"""

from __future__ import annotations

import pytest

from generator.cluster import report
from generator.cluster.checks import storage
from generator.cluster.kube import permission_of
from generator.infra import steps

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
