"""Pod Security as the real API server's admission plugin enforces it: in a namespace labelled as
the infra script labels it every pod of the release is admitted; in one at `baseline` the GPU
workers are refused (their hostPath volumes) as docs/security.md says, KubeRay records
FailedToCreateWorkerPod, and `doctor` said so before the install; the `helm test` pod passes
`restricted`, and so do the Jobs' pods given a non-root user (launcher.runAsUser, prepare.runAsUser),
while by default, as root, they pass `baseline`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from bed_helpers import CHART, Release, events, namespace, ray_pods, remove_cluster_scoped, unique, wait_ready
from kubernetes import client
from kubernetes.client.rest import ApiException

from generator.core.paths import ROOT
from generator.helm import runner as helm_mod
from generator.render.manifests import parse_documents
from testbed.kube import wait_for

TUTORIAL = ROOT / "examples" / "tutorial-h200.yaml"
HELM = helm_mod.pinned(helm_mod.PINS[0])
ENFORCE = "pod-security.kubernetes.io/enforce"


def _cleanup(kube, release: Release) -> None:
    release.uninstall(check=False)
    remove_cluster_scoped(kube, release.name)
    kube.delete("v1", "Namespace", release.namespace)


def _doctor(kubeconfig: str, release: Release) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "generator",
        "doctor",
        str(TUTORIAL),
        "--release",
        release.name,
        "-n",
        release.namespace,
        "--format",
        "json",
    ]
    out = subprocess.run(
        cmd, capture_output=True, text=True, env=dict(os.environ, KUBECONFIG=kubeconfig), cwd=ROOT, timeout=180, check=False
    )
    assert out.stdout.strip(), out.stderr
    return {c["name"]: c for c in json.loads(out.stdout)["checks"]}


def test_the_infra_scripts_level_admits_every_pod_of_the_release(bed):
    cluster = bed.cluster()
    kube = cluster.kube()
    release = Release(HELM, cluster, unique("rl"), namespace(kube, unique("psa-privileged")))
    try:
        release.install([TUTORIAL])
        wait_ready(kube, release.name, release.namespace)
        pods = ray_pods(kube, release.name, release.namespace)
        assert len(pods) == 3
        jobs = kube.list("batch/v1", "Job", release.namespace)
        assert len(jobs) == 2
        for job in jobs:
            done = wait_for(
                f"Job {job['metadata']['name']} complete",
                lambda n=job["metadata"]["name"]: _complete(kube, n, release.namespace),
                120,
            )
            assert done
        refused = [e for e in events(kube, release.namespace) if e.get("reason") in ("FailedCreate", "FailedToCreateWorkerPod")]
        assert not refused, refused
    finally:
        _cleanup(kube, release)


def _complete(kube, name: str, ns: str) -> bool:
    job = kube.get("batch/v1", "Job", name, ns) or {}
    return any(c["type"] == "Complete" and c["status"] == "True" for c in (job.get("status") or {}).get("conditions") or [])


def test_at_baseline_the_workers_are_refused_as_doctor_predicted(bed):
    cluster = bed.cluster()
    kube = cluster.kube()
    labels = {ENFORCE: "baseline"}
    release = Release(HELM, cluster, unique("rl"), namespace(kube, unique("psa-baseline"), labels))
    try:
        before = _doctor(cluster.kubeconfig, release)["pod-security"]
        assert before["status"] == "fail", before
        assert "GPU workers" in before["message"] and "hostPath" in before["message"], before

        release.install([TUTORIAL])

        def refusal() -> str:
            for e in events(kube, release.namespace, release.name):
                if e.get("reason") == "FailedToCreateWorkerPod":
                    return e["message"]
            return ""

        message = wait_for("KubeRay's FailedToCreateWorkerPod event", refusal, 120)
        assert "violates PodSecurity" in message and "hostPath" in message, message
        kinds = {p["metadata"]["labels"]["ray.io/node-type"] for p in ray_pods(kube, release.name, release.namespace)}
        assert kinds == {"head"}, f"only the head is admitted at baseline, found {kinds}"
    finally:
        _cleanup(kube, release)


@pytest.mark.parametrize(
    ("level", "sets"),
    [("restricted", ["launcher.runAsUser=1000", "prepare.runAsUser=1000"]), ("baseline", [])],
    ids=["restricted-non-root", "baseline-root"],
)
def test_the_helm_test_pod_and_the_jobs_pass_their_level(bed, level: str, sets: list[str]):
    cluster = bed.cluster()
    kube = cluster.kube()
    ns = namespace(kube, unique(f"psa-{level}"), {ENFORCE: level})
    try:
        text = HELM.template([TUTORIAL], release="rl", namespace=ns, chart=CHART, set_values=sets)
        objs = parse_documents(text)
        pods = [o for o in objs if o["kind"] == "Pod"]
        pods += [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": o["metadata"]["name"], "namespace": ns},
                "spec": o["spec"]["template"]["spec"],
            }
            for o in objs
            if o["kind"] == "Job"
        ]
        assert len(pods) == 3, [p["metadata"]["name"] for p in pods]
        core = client.CoreV1Api(kube.api)
        for pod in pods:
            pod["metadata"] = {"name": pod["metadata"]["name"], "namespace": ns}
            pod["spec"]["serviceAccountName"] = "default"  # the release's accounts are not installed here
            try:
                core.create_namespaced_pod(ns, pod, dry_run="All")
            except ApiException as e:
                raise AssertionError(f"{pod['metadata']['name']} refused at {level}: {e.body}") from None
    finally:
        kube.delete("v1", "Namespace", ns)
