"""`python -m generator doctor` against the Kubernetes API stand-in: the official client over HTTPS
through a kubeconfig, a healthy cluster that passes, one broken in each way the issue lists, each
reported with its fix; never a write."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import clusters
import pytest
from clusters import CLUSTER_ADMIN, NAMESPACE, READ_EVERYTHING, healthy, kubeconfig

from generator.cli import main
from generator.cluster.checks.access import RESOURCES
from generator.cluster.release import Rendered, render
from generator.paths import ROOT
from generator.values.layers import configurations
from tests.kube_api.stand_in import ApiStandIn

RELEASE = "nemo-rl"
TUTORIAL = ROOT / "examples" / "tutorial-h200.yaml"  # 2 H200 nodes, RDMA, Spot, an existing token Secret
KUEUE = ("--set", "kueue.enabled=true", "--set", "kueue.queueName=gpu-queue")
EXISTING_NETWORKS = ("--set", "network.createObjects=false")


def rendered_for(*sets: str) -> Rendered:
    pairs = [(sets[i], sets[i + 1]) for i in range(0, len(sets), 2)]
    return render(configurations([TUTORIAL], sets=pairs)[0], RELEASE, NAMESPACE)


@pytest.fixture(scope="module")
def tutorial() -> Rendered:
    return rendered_for()


@pytest.fixture
def api(tmp_path: Path, tutorial: Rendered) -> Iterator[ApiStandIn]:
    with ApiStandIn(tmp_path / "api", namespace=NAMESPACE, user="alice@example.com", cluster_rules=CLUSTER_ADMIN, strict_crds=True) as a:
        healthy(a, tutorial)
        yield a


def doctor(api: ApiStandIn, tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["doctor", str(TUTORIAL), "--kubeconfig", str(kubeconfig(api, tmp_path)), *args])
    out, err = capsys.readouterr()
    assert api.writes() == []  # doctor never creates, updates, patches or deletes
    return rc, out, err


def lines_of(out: str) -> dict[str, str]:
    """check name -> its line."""
    return {line.split(":", 1)[0].split()[1]: line for line in out.splitlines()[1:] if line[:4] in ("pass", "fail", "warn")}


def test_a_healthy_cluster_passes_every_check(api, tmp_path, capsys):
    rc, out, err = doctor(api, tmp_path, capsys)
    assert rc == 0, out + err
    checks = lines_of(out)
    assert list(checks) == [
        "api", "permissions", "kuberay-crd", "rdma-installer", "gke-networks", "gpu-nodes",
        "storage", "token-secret", "kueue-queue", "pod-security", "quotas",
    ]  # fmt: skip
    assert all(line.startswith("pass") for line in checks.values()), out
    assert f"api: {api.server} answers (Kubernetes v1.33.2-gke.1111000); context stand-in, namespace {NAMESPACE}" in out
    assert "operator kuberay-system/kuberay-operator runs quay.io/kuberay/operator:v1.7.0" in checks["kuberay-crd"]
    assert "DaemonSet kube-system/nccl-rdma-installer is ready on all 2 GPU node(s)" in checks["rdma-installer"]
    assert "Secret team/nemo-rl-tokens has HF_TOKEN, WANDB_API_KEY" in checks["token-secret"]
    assert "doctor: ready: 11 passed, 0 failed, 0 warning(s)" in err
    # It asked what it may do (SelfSubjectAccessReview, a question: not a write) and read the rest.
    reviews = [r for r in api.requests if r.method == "POST"]
    assert reviews and all(r.path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" for r in reviews)
    assert {r.method for r in api.requests} == {"GET", "POST"}


SCENARIOS = sorted((ROOT / "charts" / "nemo-rl-gke" / "ci").glob("*.yaml")) + sorted((ROOT / "examples").glob("*.yaml"))


@pytest.mark.parametrize("values", SCENARIOS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_scenario_passes_on_a_cluster_made_for_it(tmp_path, capsys, values):
    # Standard and Autopilot, RDMA and TCP, shared networks, an existing claim, Kueue, several groups.
    rendered = render(configurations([values])[0], RELEASE, NAMESPACE)
    assert {(str(o["apiVersion"]).rpartition("/")[0], o["kind"]) for o in rendered.objects} <= set(RESOURCES)
    with ApiStandIn(tmp_path / "api", namespace=NAMESPACE, user="alice@example.com", cluster_rules=CLUSTER_ADMIN, strict_crds=True) as a:
        healthy(a, rendered)
        rc = main(["doctor", str(values), "--kubeconfig", str(kubeconfig(a, tmp_path))])
        out = capsys.readouterr().out
        assert a.writes() == []
    assert rc == 0, out
    assert [line for line in out.splitlines()[1:] if not line.startswith("pass")] == []


def test_the_json_document_has_stable_keys(api, tmp_path, capsys):
    rc, out, _ = doctor(api, tmp_path, capsys, "--format", "json")
    doc = json.loads(out)
    assert rc == 0 and doc["ok"] is True
    assert list(doc) == ["ok", "server", "context", "namespace", "release", "values", "counts", "checks"]
    assert doc["counts"] == {"pass": 11, "fail": 0, "warn": 0}
    assert list(doc["checks"][0]) == ["name", "status", "message", "fix"]
    assert (doc["server"], doc["namespace"], doc["release"], doc["values"]) == (api.server, NAMESPACE, RELEASE, str(TUTORIAL))


Broken = Callable[[ApiStandIn, Rendered], None]


@dataclass(frozen=True)
class Case:
    broken: Broken  # how the healthy cluster is broken
    check: str  # the check that fails
    message: str  # in its message
    fix: str  # in its fix
    flags: tuple[str, ...] = ()  # doctor's extra flags
    name: str = ""

    def __str__(self) -> str:
        return self.name or self.broken.__name__


def _other_subnet(api: ApiStandIn, rendered: Rendered) -> None:
    clusters.with_existing_networks(api, rendered, wrong_subnet="someone-elses-subnet")


BROKEN = [
    Case(clusters.without_kuberay, "kuberay-crd", "KubeRay is not installed", "--update-addons=RayOperator=ENABLED"),
    Case(
        clusters.with_an_older_raycluster_crd,
        "kuberay-crd",
        "spec.headGroupSpec: Additional properties are not allowed ('headService' was unexpected)",
        "upgrade KubeRay",
    ),
    Case(
        clusters.without_the_rdma_installer,
        "rdma-installer",
        "DaemonSet kube-system/nccl-rdma-installer not found",
        "kubectl apply -f https://",
    ),
    Case(clusters.with_the_rdma_installer_not_ready, "rdma-installer", "not ready on 1 of 2 GPU node(s)", "describe daemonset"),
    Case(
        clusters.with_networks_of_another_release,
        "gke-networks",
        "GKENetworkParamSet rdma-3 (release research/other)",
        "--existing-networks",
    ),
    Case(
        _other_subnet,
        "gke-networks",
        "rdma-1: vpcSubnet 'someone-elses-subnet' (values: 'nemo-rl-rdma-sub-1')",
        "network.createObjects true",
        EXISTING_NETWORKS,
        "with_existing_networks_on_other_subnets",
    ),
    Case(clusters.with_small_gpu_nodes, "gpu-nodes", "memory 1000Gi < 2500Gi", "worker.resources.requests"),
    Case(clusters.without_the_lustre_driver, "storage", "no CSIDriver lustre.csi.storage.gke.io", "LustreCsiDriver=ENABLED"),
    Case(clusters.without_the_token_secret, "token-secret", "Secret team/nemo-rl-tokens not found", "kubectl create secret generic"),
    Case(clusters.with_a_token_key_missing, "token-secret", "Secret team/nemo-rl-tokens lacks WANDB_API_KEY", "create it again"),
    Case(clusters.without_the_local_queue, "kueue-queue", "LocalQueue team/gpu-queue not found", "create a LocalQueue gpu-queue", KUEUE),
    Case(
        clusters.with_baseline_pod_security,
        "pod-security",
        "refuses GPU workers (RayCluster/nemo-rl workerGroupSpecs[0]): hostPath volumes nvidia-driver, gib",
        "pod-security.kubernetes.io/enforce=privileged",
    ),
    Case(clusters.with_a_gpu_quota_too_small, "quotas", "requests.nvidia.com/gpu 8 left of 8, the release needs 16", "raise the quota"),
]


@pytest.mark.parametrize("case", BROKEN, ids=str)
def test_each_broken_state_is_reported_with_its_fix(api, tmp_path, capsys, case):
    rendered = rendered_for(*case.flags)
    if rendered.values["kueue"]["enabled"]:
        clusters.add_kueue(api, rendered)
    case.broken(api, rendered)
    rc, out, err = doctor(api, tmp_path, capsys, *case.flags)
    assert rc == 1, out + err
    line = lines_of(out)[case.check]
    assert line.startswith("fail"), line
    assert case.message in line and " - fix: " in line and case.fix in line.split(" - fix: ", 1)[1], line
    others = [x for name, x in lines_of(out).items() if name != case.check and not x.startswith("pass")]
    assert others == [], others  # only what was broken
    assert "doctor: not ready: " in err


def test_no_gpu_node_on_standard_is_a_warning_that_names_what_was_not_seen(api, tmp_path, capsys, tutorial):
    clusters.without_gpu_nodes(api, tutorial)
    rc, out, _ = doctor(api, tmp_path, capsys)
    line = lines_of(out)["gpu-nodes"]
    assert rc == 0 and line.startswith("warn")
    assert "the Kubernetes API does not show node pools" in line and "gcloud container node-pools list" in line
    assert lines_of(out)["rdma-installer"].startswith("pass") and "no GPU node is up yet" in lines_of(out)["rdma-installer"]
    assert main(["doctor", str(TUTORIAL), "--kubeconfig", str(kubeconfig(api, tmp_path)), "--strict"]) == 1


def test_existing_networks_that_match_the_values_pass(api, tmp_path, capsys):
    clusters.with_existing_networks(api, rendered_for(*EXISTING_NETWORKS))
    rc, out, _ = doctor(api, tmp_path, capsys, *EXISTING_NETWORKS)
    assert rc == 0, out
    assert "all 9 existing Network/GKENetworkParamSet pairs name the values' VPCs and subnets" in lines_of(out)["gke-networks"]


def test_a_user_without_cluster_wide_rights_is_told_what_helm_install_needs(api, tmp_path, capsys):
    api.cluster_rules = READ_EVERYTHING  # may read everything, and write only in the namespace
    api.rules = CLUSTER_ADMIN
    rc, out, _ = doctor(api, tmp_path, capsys)
    line = lines_of(out)["permissions"]
    assert rc == 1 and line.startswith("fail")
    assert "create persistentvolumes (cluster-scoped)" in line and "create gkenetworkparamsets.networking.gke.io (cluster-scoped)" in line
    assert "create rayclusters" not in line


def test_what_the_user_may_not_read_is_named_not_checked(api, tmp_path, capsys):
    groups = ["", "apps", "apiextensions.k8s.io", "storage.k8s.io", "networking.gke.io"]
    resources = ["namespaces", "pods", "secrets", "resourcequotas", "persistentvolumes", "daemonsets", "deployments"]
    resources += ["customresourcedefinitions", "csidrivers", "networks", "gkenetworkparamsets"]
    everything_but_nodes = [{"apiGroups": groups, "resources": resources, "verbs": ["get", "list"]}]
    api.cluster_rules = everything_but_nodes
    rc, out, _ = doctor(api, tmp_path, capsys)
    checks = lines_of(out)
    assert checks["gpu-nodes"].startswith("warn")
    assert (
        'not checked: nodes is forbidden: User "alice@example.com" cannot list resource "nodes" in API group "" at the cluster scope'
        in checks["gpu-nodes"]
    )
    assert "readiness on the GPU nodes not checked (you may not list nodes)" in checks["rdma-installer"]
    assert checks["permissions"].startswith("fail")  # and it says what helm install needs
    assert rc == 1


def doctor_process(config: Path) -> subprocess.CompletedProcess[str]:
    """doctor as a whole process, as a user runs it."""
    args = [sys.executable, "-m", "generator", "doctor", str(TUTORIAL), "--kubeconfig", str(config)]
    return subprocess.run(args, capture_output=True, text=True, cwd=ROOT, check=False)


def test_an_unreachable_api_server_is_one_line_naming_it(api, tmp_path):
    proc = doctor_process(kubeconfig(api, tmp_path, server="https://127.0.0.1:9"))  # nothing listens on port 9
    assert proc.returncode == 2
    assert proc.stderr == "error: cannot reach the Kubernetes API server at https://127.0.0.1:9 (context stand-in): connection refused\n"
    assert proc.stdout == ""


def test_refused_credentials_are_one_line_naming_the_server(api, tmp_path):
    proc = doctor_process(kubeconfig(api, tmp_path, token="expired-token"))  # noqa: S106 - not a credential anywhere
    assert proc.returncode == 2
    assert proc.stderr.startswith(
        f"error: the Kubernetes API server at {api.server} refused the credentials of context stand-in (401 Unauthorized)"
    )
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_a_missing_kubeconfig_and_a_bad_values_file_are_usage_errors(api, tmp_path, capsys):
    assert main(["doctor", str(TUTORIAL), "--kubeconfig", str(tmp_path / "none")]) == 2
    assert "error: cannot load " in capsys.readouterr().err
    assert main(["doctor", str(tmp_path / "missing.yaml"), "--kubeconfig", str(kubeconfig(api, tmp_path))]) == 2
    assert "missing.yaml" in capsys.readouterr().err


def test_layered_values_merge_as_validate_merges_them(api, tmp_path, capsys):
    # -f and --set: the same configuration validate checks (Helm merges it); here Kueue comes on.
    more = tmp_path / "kueue.yaml"
    more.write_text("kueue:\n  enabled: true\n")
    rc, out, _ = doctor(api, tmp_path, capsys, "-f", str(more), "--set", "kueue.queueName=gpu-queue")
    assert rc == 1
    assert "LocalQueue" not in lines_of(out)["kueue-queue"] and "Kueue is not installed" in lines_of(out)["kueue-queue"]
    assert f"doctor: {TUTORIAL} -f {more} --set kueue.queueName=... as release nemo-rl" in out


def test_pod_security_levels_judge_each_rendered_pod_by_the_standards_controls(tutorial):
    from generator.cluster.checks.pod_security import refused

    pods = {pod.where: pod.spec for pod in tutorial.pods()}
    worker = pods["RayCluster/nemo-rl workerGroupSpecs[0]"]
    launcher = next(spec for where, spec in pods.items() if where.startswith("Job/nemo-rl-run-"))
    assert refused("privileged", worker) == []
    assert refused("baseline", worker) == ["hostPath volumes nvidia-driver, gib"]
    assert refused("baseline", pods["RayCluster/nemo-rl head"]) == [] and refused("baseline", launcher) == []
    # The Jobs drop every capability, forbid privilege escalation and use RuntimeDefault seccomp;
    # restricted also wants runAsNonRoot.
    assert refused("restricted", launcher) == ["container launcher without runAsNonRoot: true"]
    privileged = {"containers": [{"name": "c", "securityContext": {"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}}}]}
    assert refused("baseline", privileged | {"hostNetwork": True}) == [
        "hostNetwork",
        "privileged container c",
        "container c adds capabilities SYS_ADMIN",
    ]
