"""`python -m generator doctor` against the test bed's real API server: a cluster made as infra.sh
and GKE's controllers make it passes for every scenario, on both KubeRay versions; one broken in
each way the issue lists is reported with its fix, and only that; users with limited rights (a
ServiceAccount's token) are told what they may not do or read; doctor sends only GET requests,
SelfSubjectAccessReviews and server-side dry runs (dryRun=All), and the dry runs store nothing. The
API server's own admission (Pod Security, ResourceQuota, LimitRange) refuses a release through the
dry-run check, each refusal one line naming the object and the values key."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import clusters
import pytest
from bed_helpers import wait_ready
from clusters import Made, installed_release, made_for, rendered_for, unique

from generator.cli import main
from generator.cluster import kube as cluster_kube
from generator.cluster.checks.access import RESOURCES
from generator.core.paths import ROOT
from testbed.kubeconfig import Context
from testbed.kubeconfig import write as write_kubeconfig

TUTORIAL = ROOT / "examples" / "tutorial-h200.yaml"  # 2 H200 nodes, RDMA, Spot, an existing token Secret
TUTORIAL_B200 = ROOT / "examples" / "tutorial-b200.yaml"
NEWEST, OLDEST = "v1.6.2", "v1.3.2"
KUEUE = ("kueue.enabled=true", "kueue.queueName=gpu-queue")
EXISTING_NETWORKS = ("network.createObjects=false",)
TOO_BIG = ("worker.resources.requests.memory=3000Gi", "worker.resources.limits.memory=3240Gi")
ACCESS_REVIEW = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
CHECKS = [
    "api", "permissions", "kuberay-crd", "rdma-installer", "gke-networks", "gpu-nodes", "dra-driver",
    "storage", "token-secret", "kueue-queue", "kueue-version", "pod-security", "quotas", "dry-run",
]  # fmt: skip


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str]]:
    """(method, path, dryRun query) of every request doctor sends, as its client sends it."""
    out: list[tuple[str, str, str]] = []
    call = cluster_kube.Kube._call

    def recorded(self: cluster_kube.Kube, method: str, path: str, query: dict[str, str], body: Any = None) -> str:
        out.append((method, path, query.get("dryRun", "")))
        return call(self, method, path, query, body)

    monkeypatch.setattr(cluster_kube.Kube, "_call", recorded)
    return out


@pytest.fixture
def tutorial(bed) -> Iterator[Made]:
    """A healthy cluster for the tutorial's values, on the newest KubeRay's API server."""
    with made_for(bed.cluster(NEWEST), rendered_for(TUTORIAL, unique("doctor"))) as made:
        yield made


def doctor(
    made: Made, capsys: pytest.CaptureFixture[str], *args: str, values: Path = TUTORIAL, kubeconfig: str = ""
) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["doctor", str(values), "--kubeconfig", kubeconfig or made.cluster.kubeconfig, "-n", made.namespace, *args])
    out, err = capsys.readouterr()
    return rc, out, err


def set_args(sets: tuple[str, ...]) -> list[str]:
    return [a for s in sets for a in ("--set", s)]


def lines_of(out: str) -> dict[str, str]:
    """check name -> its line (the last, for a check of several lines)."""
    return {line.split(":", 1)[0].split()[1]: line for line in out.splitlines()[1:] if line[:4] in ("pass", "fail", "warn", "skip")}


def dry_run_lines(out: str) -> list[str]:
    """The dry-run check's lines: one per refusal, per missing permission, or one pass."""
    return [line for line in out.splitlines() if line[4:].lstrip().startswith("dry-run: ")]


def only_reads(sent: list[tuple[str, str, str]]) -> None:
    """GET, POST of SelfSubjectAccessReviews (a question the API server answers and does not store),
    and POST with dryRun=All (admitted or refused, never stored)."""
    assert sent, "doctor sent nothing"
    others = [(m, p, d) for m, p, d in sent if m != "GET" and (m, p) != ("POST", ACCESS_REVIEW) and (m, d) != ("POST", "All")]
    assert others == [], others


def nothing_stored(made: Made) -> None:
    """The dry runs left no object of the release, nor any pod, in its namespace or cluster-wide."""
    ns = made.namespace
    assert made.kube.list("v1", "Pod", ns) == []
    for obj in made.rendered.objects:
        meta = obj["metadata"]
        if obj["kind"] in ("Network", "GKENetworkParamSet"):
            continue  # another release's may exist on purpose
        where = None if obj["kind"] == "PersistentVolume" else ns
        assert made.kube.get(obj["apiVersion"], obj["kind"], meta["name"], where) is None, obj["kind"]


@pytest.mark.parametrize("version", [NEWEST, OLDEST], ids=lambda v: f"kuberay-{v}")
def test_a_healthy_cluster_passes_every_check_and_doctor_only_reads(bed, capsys, sent, version: str):
    cluster = bed.cluster(version)
    with made_for(cluster, rendered_for(TUTORIAL, unique("doctor"))) as made:
        rc, out, err = doctor(made, capsys)
        nothing_stored(made)
    assert rc == 0, out + err
    checks = lines_of(out)
    assert list(checks) == CHECKS
    assert all(line.startswith("pass") for line in checks.values()), out
    ns = made.namespace
    assert f"api: {cluster.server} answers (Kubernetes {bed.kubernetes}); context admin, namespace {ns}" in out
    # The test bed runs the operator as a process, as GKE's add-on runs it outside the cluster's workloads.
    assert "rayclusters.ray.io serves ray.io/v1" in checks["kuberay-crd"]
    assert "the operator is not among the cluster's Deployments" in checks["kuberay-crd"]
    assert "DaemonSet kube-system/nccl-rdma-installer is ready on all 2 GPU node(s)" in checks["rdma-installer"]
    assert f"Secret {ns}/nemo-rl-tokens has HF_TOKEN, WANDB_API_KEY" in checks["token-secret"]
    assert f"namespace {ns} (pod-security.kubernetes.io/enforce=privileged) admits every pod" in checks["pod-security"]
    # Every rendered object, and one pod per template of the RayCluster (head, 1 group) and the 2 Jobs.
    judged = len(made.rendered.objects) + 4
    assert dry_run_lines(out) == [
        f"pass  dry-run: the API server's admission (webhooks, Pod Security, quotas, LimitRanges) accepts all {judged} objects and pods"
    ]
    assert "doctor: ready: 14 passed, 0 failed, 0 warning(s)" in err
    only_reads(sent)
    assert ("POST", ACCESS_REVIEW, "") in sent
    dry_runs = [p for m, p, d in sent if (m, d) == ("POST", "All")]
    assert dry_runs.count(f"/api/v1/namespaces/{ns}/pods") == 5  # 4 from templates, helm test's Pod
    assert f"/apis/ray.io/v1/namespaces/{ns}/rayclusters" in dry_runs
    assert "/apis/networking.gke.io/v1/gkenetworkparamsets" in dry_runs


def test_the_operators_image_is_named_where_a_deployment_runs_it(tutorial, capsys):
    clusters.with_kuberay_installed_by_its_chart(tutorial, "quay.io/kuberay/operator:v1.6.2")
    rc, out, _ = doctor(tutorial, capsys)
    assert rc == 0, out
    assert "; operator kuberay-system/kuberay-operator runs quay.io/kuberay/operator:v1.6.2" in lines_of(out)["kuberay-crd"]


SCENARIOS = sorted((ROOT / "charts" / "nemo-rl-gke" / "ci").glob("*.yaml")) + sorted((ROOT / "examples").glob("*.yaml"))


@pytest.mark.parametrize("values", SCENARIOS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_scenario_passes_on_a_cluster_made_for_it(bed, capsys, values: Path):
    # Standard and Autopilot, B200, H200 and GB200 (A4X: the DRA driver's kubelet plugin and
    # ComputeDomain slices), RDMA, managed DRANET and TCP, shared networks, an existing claim,
    # Kueue, several groups of several provisioning types.
    rendered = rendered_for(values, unique("scenario"))
    assert {(str(o["apiVersion"]).rpartition("/")[0], o["kind"]) for o in rendered.objects} <= set(RESOURCES)
    with made_for(bed.cluster(NEWEST), rendered) as made:
        rc, out, _ = doctor(made, capsys, values=values)
    assert rc == 0, out
    assert [line for line in out.splitlines()[1:] if not line.startswith("pass")] == []


def test_a_release_doctor_passes_comes_up(bed, capsys):
    """doctor's verdict against what the cluster then does: the scale-out example (Kueue, a
    reservation group and a Spot group) installs, Kueue admits it, every worker becomes ready."""
    values = ROOT / "examples" / "scale-out-h200.yaml"
    with made_for(bed.cluster(NEWEST), rendered_for(values, unique("comes-up"))) as made:
        rc, out, _ = doctor(made, capsys, values=values)
        assert rc == 0, out
        with installed_release(made, values):
            ready = wait_ready(made.kube, "nemo-rl", made.namespace)
    assert ready["status"]["readyWorkerReplicas"] == 8


def test_the_json_document_has_stable_keys(tutorial, capsys):
    rc, out, _ = doctor(tutorial, capsys, "--format", "json")
    doc = json.loads(out)
    assert rc == 0 and doc["ok"] is True
    assert list(doc) == ["ok", "server", "context", "namespace", "release", "values", "verdict", "counts", "checks"]
    assert doc["verdict"] == "ready"
    assert doc["counts"] == {"pass": 14, "fail": 0, "warn": 0, "skip": 0}
    assert [c["name"] for c in doc["checks"]] == CHECKS
    assert list(doc["checks"][0]) == ["name", "status", "message", "fix"]
    assert (doc["server"], doc["context"], doc["namespace"], doc["release"], doc["values"]) == (
        tutorial.cluster.server,
        "admin",
        tutorial.namespace,
        "nemo-rl",
        str(TUTORIAL),
    )


@dataclass(frozen=True)
class Case:
    broken: Callable[[Made], None] | None  # how the healthy cluster is broken (None: only the values differ)
    check: str  # the check that fails
    message: str  # in its message
    fix: str  # in its fix
    sets: tuple[str, ...] = ()  # --set of the values the cluster is made for, and doctor is given
    kuberay: str = NEWEST  # the cluster
    name: str = ""
    also: str = ""  # the dry-run's line too (the API server's own judgement of the same break), in it

    def __str__(self) -> str:
        return self.name or (self.broken.__name__ if self.broken else "?")


BROKEN = [
    # The CRD cases change a cluster-wide object: on the oldest KubeRay's API server, restored after.
    Case(
        clusters.without_kuberay,
        "kuberay-crd",
        "KubeRay is not installed",
        "--update-addons=RayOperator=ENABLED",
        kuberay=OLDEST,
        also="fail  dry-run: RayCluster/nemo-rl not served by the API server (its CRD missing?): 404 page not found",
    ),
    Case(
        clusters.with_an_older_raycluster_crd,
        "kuberay-crd",
        "spec.headGroupSpec: Additional properties are not allowed ('headService' was unexpected)",
        "upgrade KubeRay",
        kuberay=OLDEST,
        also='unknown field "spec.headGroupSpec.headService"',  # strict field validation, as Helm 4 creates
    ),
    Case(
        clusters.without_the_rdma_installer,
        "rdma-installer",
        "DaemonSet kube-system/nccl-rdma-installer not found",
        "kubectl apply -f https://",
    ),
    Case(
        clusters.with_the_rdma_installer_kept_off_a_gpu_node,
        "rdma-installer",
        "not ready on 1 of 2 GPU node(s): gke-nemo-rl-gpu-h200-0 (no installer pod)",
        "describe daemonset",
    ),
    Case(
        clusters.with_networks_of_another_release,
        "gke-networks",
        "GKENetworkParamSet gvnic-1 (release research/other), Network gvnic-1 (release research/other)",
        "--existing-networks",
        also="warn  dry-run: GKENetworkParamSet/gvnic-1, GKENetworkParamSet/rdma-0,",
    ),
    Case(
        clusters.with_existing_networks_on_another_subnet,
        "gke-networks",
        "rdma-1: vpcSubnet 'someone-elses-subnet' (values: 'nemo-rl-rdma-sub-1')",
        "network.createObjects true",
        EXISTING_NETWORKS,
    ),
    Case(
        clusters.with_an_existing_network_missing,
        "gke-networks",
        "the existing objects differ from the values: rdma-3: GKENetworkParamSet missing",
        "network.createObjects true",
        EXISTING_NETWORKS,
    ),
    Case(None, "gpu-nodes", "memory ", "worker.resources.requests", TOO_BIG, name="with_workers_larger_than_the_gpu_nodes"),
    Case(
        clusters.without_the_lustre_driver,
        "storage",
        "no CSIDriver lustre.csi.storage.gke.io",
        "--update-addons=LustreCsiDriver=ENABLED (as infra.sh creates the cluster",
    ),
    Case(clusters.without_the_token_secret, "token-secret", "/nemo-rl-tokens not found", "kubectl create secret generic nemo-rl-tokens"),
    Case(clusters.with_a_token_key_missing, "token-secret", "/nemo-rl-tokens lacks WANDB_API_KEY", "create it again"),
    Case(clusters.without_the_local_queue, "kueue-queue", "/gpu-queue not found", "create a LocalQueue gpu-queue", KUEUE),
    # Kueue marks the LocalQueue inactive for each of these: the ClusterQueue's own state is named.
    Case(clusters.without_the_cluster_queue, "kueue-queue", "ClusterQueue nemo-rl (LocalQueue ", "generator infra --kueue", KUEUE),
    Case(
        clusters.with_a_cluster_queue_over_a_missing_flavor,
        "kueue-queue",
        "is not active: FlavorNotFound: Can't admit new workloads: references missing ResourceFlavor(s): no-such-flavor",
        "kubectl describe clusterqueue nemo-rl",
        KUEUE,
    ),
    Case(
        clusters.with_a_cluster_queue_too_small,
        "kueue-queue",
        "ClusterQueue nemo-rl has 8 nominal nvidia.com/gpu, the release needs 16: Kueue never admits the RayCluster",
        "nominalQuota",
        KUEUE,
    ),
    Case(
        clusters.with_baseline_pod_security,
        "pod-security",
        "refuses GPU workers (RayCluster/nemo-rl workerGroupSpecs[0]): hostPath volumes nvidia-driver, gib",
        "pod-security.kubernetes.io/enforce=privileged",
        also='fail  dry-run: Pod from RayCluster/nemo-rl workerGroupSpecs[0] refused by admission: pods "nemo-rl-worker-',
    ),
    Case(
        clusters.with_a_gpu_quota_too_small,
        "quotas",
        "gpu-quota: requests.nvidia.com/gpu 8 left of 8, the release needs 16",
        "raise the quota",
    ),
]


@pytest.mark.parametrize("case", BROKEN, ids=str)
def test_each_broken_state_is_reported_with_its_fix(bed, capsys, sent, case: Case):
    with made_for(bed.cluster(case.kuberay), rendered_for(TUTORIAL, unique("broken"), *case.sets)) as made:
        if case.broken is not None:
            case.broken(made)
        rc, out, err = doctor(made, capsys, *set_args(case.sets))
    assert rc == 1, out + err
    line = lines_of(out)[case.check]
    assert line.startswith("fail"), line
    assert case.message in line and " - fix: " in line and case.fix in line.split(" - fix: ", 1)[1], line
    others = [x for name, x in lines_of(out).items() if name not in (case.check, "dry-run") and not x.startswith("pass")]
    assert others == [], others  # only what was broken
    dry = dry_run_lines(out)
    if case.also:
        assert [x for x in dry if case.also in x], dry
    else:
        assert [x[:4] for x in dry] == ["pass"], dry
    assert "doctor: not ready: " in err
    only_reads(sent)


def test_no_node_with_the_gpu_label_on_standard_is_a_warning_that_names_what_was_not_seen(bed, capsys):
    # The test bed's GPU pool is H200; the B200 tutorial's label is on no node.
    with made_for(bed.cluster(NEWEST), rendered_for(TUTORIAL_B200, unique("no-gpu")), gpu_nodes=False) as made:
        rc, out, _ = doctor(made, capsys, values=TUTORIAL_B200)
        strict = main(["doctor", str(TUTORIAL_B200), "--kubeconfig", made.cluster.kubeconfig, "-n", made.namespace, "--strict"])
    checks = lines_of(out)
    line = checks["gpu-nodes"]
    assert rc == 0 and line.startswith("warn"), out
    assert "no node has cloud.google.com/gke-accelerator=nvidia-b200 now" in line
    assert "the Kubernetes API does not show node pools" in line and "gcloud container node-pools list" in line
    assert checks["rdma-installer"].startswith("pass") and "no GPU node is up yet" in checks["rdma-installer"]
    assert strict == 1


def test_existing_networks_that_match_the_values_pass(bed, capsys):
    with made_for(bed.cluster(NEWEST), rendered_for(TUTORIAL, unique("networks"), *EXISTING_NETWORKS)) as made:
        rc, out, _ = doctor(made, capsys, *set_args(EXISTING_NETWORKS))
    assert rc == 0, out
    assert "all 9 existing Network/GKENetworkParamSet pairs name the values' VPCs and subnets" in lines_of(out)["gke-networks"]


READ_EVERYTHING = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]}]
EVERYTHING = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]


def test_a_user_without_cluster_wide_rights_is_told_what_helm_install_needs(bed, tutorial, capsys, tmp_path):
    # May read everything, and do anything in the namespace only.
    config = clusters.user_kubeconfig(tutorial, bed, tmp_path, rules=EVERYTHING, cluster_rules=READ_EVERYTHING)
    rc, out, _ = doctor(tutorial, capsys, kubeconfig=str(config))
    checks = lines_of(out)
    line = checks["permissions"]
    assert rc == 1 and line.startswith("fail"), out
    assert "create persistentvolumes (cluster-scoped)" in line and "create gkenetworkparamsets.networking.gke.io (cluster-scoped)" in line
    assert "create rayclusters" not in line
    assert [name for name, x in checks.items() if not x.startswith("pass")] == ["permissions", "dry-run"]
    # What it may not create is not checked, naming the permission; what it may is judged, and passes.
    dry = dry_run_lines(out)
    assert [x[:4] for x in dry] == ["skip"] * len(dry) and len(dry) == 3, dry
    assert any("(you may not create persistentvolumes (cluster-scoped))" in x and "PersistentVolume/" in x for x in dry), dry
    assert any("(you may not create gkenetworkparamsets.networking.gke.io (cluster-scoped))" in x for x in dry), dry
    assert not any("RayCluster/" in x or "Pod from" in x for x in dry), dry


def test_what_the_user_may_not_read_is_named_not_checked(bed, tutorial, capsys, tmp_path):
    groups = ["", "apps", "apiextensions.k8s.io", "storage.k8s.io", "networking.gke.io"]
    resources = ["namespaces", "pods", "secrets", "resourcequotas", "persistentvolumes", "daemonsets", "deployments"]
    resources += ["customresourcedefinitions", "csidrivers", "networks", "gkenetworkparamsets"]
    everything_but_nodes = [{"apiGroups": groups, "resources": resources, "verbs": ["get", "list"]}]
    config = clusters.user_kubeconfig(tutorial, bed, tmp_path, rules=[], cluster_rules=everything_but_nodes)
    user = f"system:serviceaccount:{tutorial.namespace}:{config.stem}"
    rc, out, _ = doctor(tutorial, capsys, kubeconfig=str(config))
    checks = lines_of(out)
    forbidden = f'nodes is forbidden: User "{user}" cannot list resource "nodes" in API group "" at the cluster scope'
    assert checks["gpu-nodes"].startswith(f"skip  gpu-nodes: not checked: {forbidden} (you may not list nodes (cluster-scoped))")
    assert "fix: ask for list nodes (cluster-scoped) (kubectl auth can-i list nodes)" in checks["gpu-nodes"]
    assert "its readiness on the GPU nodes (you may not list nodes (cluster-scoped))" in checks["rdma-installer"]
    assert checks["permissions"].startswith("fail")  # and it says what helm install needs
    assert rc == 1


def test_with_every_read_forbidden_doctor_is_not_ready_and_names_each_permission(bed, tutorial, capsys, tmp_path):
    """A ServiceAccount with no RBAC at all: the real API server answers 403 to every read. doctor
    must not say "ready": each check it could not make says so with the permission it lacked."""
    config = clusters.user_kubeconfig(tutorial, bed, tmp_path, rules=[], cluster_rules=[])
    rc, out, err = doctor(tutorial, capsys, kubeconfig=str(config))
    checks = lines_of(out)
    assert rc == 1, out + err
    assert checks["api"].startswith("pass")  # /version is public
    assert checks["permissions"].startswith("fail")  # asked with SelfSubjectAccessReviews, which anyone may send
    skipped = {name: line for name, line in checks.items() if line.startswith("skip")}
    assert set(skipped) >= {"kuberay-crd", "rdma-installer", "gpu-nodes", "storage", "token-secret", "pod-security", "quotas"}, out
    assert not [
        name
        for name, line in checks.items()
        if line.startswith("pass") and name not in ("api", "kueue-queue", "kueue-version", "dra-driver")
    ], out
    crd = "get customresourcedefinitions.apiextensions.k8s.io rayclusters.ray.io (cluster-scoped)"
    assert f"(you may not {crd})" in skipped["kuberay-crd"]
    assert "kubectl auth can-i get customresourcedefinitions.apiextensions.k8s.io/rayclusters.ray.io" in skipped["kuberay-crd"]
    assert f"(you may not get namespaces {tutorial.namespace} (cluster-scoped))" in skipped["pod-security"]
    assert f"(you may not get secrets nemo-rl-tokens in namespace {tutorial.namespace})" in skipped["token-secret"]
    assert "doctor: not ready:" in err and "not checked (" in err and "doctor could not read what they check" in err
    rc, out, err = doctor(tutorial, capsys, "--format", "json", kubeconfig=str(config))
    doc = json.loads(out)
    assert rc == 1 and doc["ok"] is False and doc["verdict"] == "not ready"
    assert doc["counts"]["skip"] == len(skipped)


def doctor_process(config: Path, namespace: str = "default") -> subprocess.CompletedProcess[str]:
    """doctor as a whole process, as a user runs it."""
    args = [sys.executable, "-m", "generator", "doctor", str(TUTORIAL), "--kubeconfig", str(config), "-n", namespace]
    return subprocess.run(args, capture_output=True, text=True, cwd=ROOT, check=False, timeout=120)


def test_an_unreachable_api_server_is_one_line_naming_it(bed, tmp_path):
    gone = Context("gone", "https://127.0.0.1:9", Path(bed.ca), token="t")  # noqa: S106 - nothing listens on port 9
    config = write_kubeconfig(tmp_path / "kubeconfig", [gone])
    proc = doctor_process(config)
    assert proc.returncode == 2
    assert proc.stderr == "error: cannot reach the Kubernetes API server at https://127.0.0.1:9 (context gone): connection refused\n"
    assert proc.stdout == ""


def test_refused_credentials_are_one_line_naming_the_server(bed, tmp_path):
    server = bed.cluster(NEWEST).server
    expired = Context("expired", server, Path(bed.ca), token="expired-token")  # noqa: S106 - a credential nowhere
    config = write_kubeconfig(tmp_path / "kubeconfig", [expired])
    proc = doctor_process(config)
    assert proc.returncode == 2
    refused = f"error: the Kubernetes API server at {server} refused the credentials of context expired (401 Unauthorized)"
    assert proc.stderr.startswith(refused)
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_a_missing_kubeconfig_and_a_bad_values_file_are_usage_errors(bed, tmp_path, capsys):
    assert main(["doctor", str(TUTORIAL), "--kubeconfig", str(tmp_path / "none")]) == 2
    assert "error: cannot load " in capsys.readouterr().err
    assert main(["doctor", str(tmp_path / "missing.yaml"), "--kubeconfig", bed.cluster(NEWEST).kubeconfig]) == 2
    assert "missing.yaml" in capsys.readouterr().err


def test_layered_values_merge_as_validate_merges_them(tutorial, capsys, tmp_path):
    # -f and --set: the same configuration validate checks (Helm merges it); here Kueue comes on,
    # and the test bed's Kueue has no queue named so in the namespace.
    more = tmp_path / "kueue.yaml"
    more.write_text("kueue:\n  enabled: true\n")
    rc, out, _ = doctor(tutorial, capsys, "-f", str(more), "--set", "kueue.queueName=gpu-queue")
    assert rc == 1
    assert f"LocalQueue {tutorial.namespace}/gpu-queue not found" in lines_of(out)["kueue-queue"]
    assert f"doctor: {TUTORIAL} -f {more} --set kueue.queueName=... as release nemo-rl" in out


def test_pod_security_levels_judge_each_rendered_pod_by_the_standards_controls():
    from generator.cluster.checks.pod_security import refused

    rendered = rendered_for(TUTORIAL, "team")
    pods = {pod.where: pod.spec for pod in rendered.pods()}
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


# --- the API server's own admission, through server-side dry runs ---------------------------------

WORKER = "Pod from RayCluster/nemo-rl workerGroupSpecs[0] refused by admission"


@dataclass(frozen=True)
class Refused:
    broken: Callable[[Made], None]
    lines: tuple[str, ...]  # each in its own dry-run line, in this order
    fix: str  # in a refusal's fix

    def __str__(self) -> str:
        return self.broken.__name__


REFUSED = [
    Refused(
        clusters.with_restricted_pod_security,
        (
            "Pod from Job/nemo-rl-run-",
            'refused by admission (values: launcher.runAsUser): pods "nemo-rl-run-',
            "Pod from Job/nemo-rl-prepare-",
            'refused by admission (values: prepare.runAsUser): pods "nemo-rl-prepare-',
            'Pod from RayCluster/nemo-rl head refused by admission: pods "nemo-rl-head-',
            f"{WORKER}: pods",
            'violates PodSecurity "restricted:latest": restricted volume types',
            '(volumes "nvidia-driver", "gib" use restricted volume type "hostPath")',
        ),
        "",
    ),
    Refused(
        clusters.with_a_memory_quota_below_a_worker,
        (f"{WORKER} (values: worker.resources.requests.memory):", "exceeded quota: memory-quota, requested: requests.memory=2500Gi"),
        "change worker.resources.requests.memory",
    ),
    Refused(
        clusters.with_a_limit_range_below_the_workers,
        (f"{WORKER} (values: worker.resources.limits.memory):", "maximum memory usage per Container is 1000Gi, but limit is 2740Gi"),
        "change worker.resources.limits.memory",
    ),
    Refused(
        clusters.with_a_cpu_limit_quota,
        (
            "Pod from Job/nemo-rl-run-",
            "(values: launcher.resources.limits.cpu):",
            "failed quota: cpu-limits: must specify limits.cpu for: launcher",
        ),
        "change launcher.resources.limits.cpu",
    ),
    Refused(
        clusters.with_a_policy_against_host_paths,
        (f"{WORKER}: ", "ValidatingAdmissionPolicy 'no-host-path", "denied request: no hostPath volumes in this namespace"),
        "ask the cluster admin about the policy the message names",
    ),
]


@pytest.mark.parametrize("case", REFUSED, ids=str)
def test_the_api_servers_admission_refuses_with_the_object_and_values_key(bed, capsys, sent, case: Refused):
    """A namespace the real API server's admission refuses the release in: doctor sends each object
    and the controllers' pods as dry runs, and each refusal is one line naming the object (a pod by
    its template) and the values key the refused field comes from. Nothing is stored."""
    with made_for(bed.cluster(NEWEST), rendered_for(TUTORIAL, unique("refused"))) as made:
        case.broken(made)
        rc, out, err = doctor(made, capsys)
        nothing_stored(made)
    assert rc == 1, out + err
    refusals = [x for x in dry_run_lines(out) if x.startswith("fail")]
    assert refusals, out
    assert all(" - fix: " in x for x in refusals), refusals
    assert any(case.fix in x.split(" - fix: ", 1)[1] for x in refusals), refusals
    text = "\n".join(refusals)
    at = 0
    for piece in case.lines:
        found = text.find(piece, at)
        assert found >= 0, (piece, refusals)
        at = found
    assert not [x for x in dry_run_lines(out) if not x.startswith("fail")], out
    only_reads(sent)
