"""What `status` reads of a release, read-only: its RayCluster and the pods of each group (with the
scheduler's reason for a Pending one), its preparation and launcher Jobs, the run's Ray job through
the API server's service proxy to the head's dashboard (no port-forward), and the run's progress
from that job's log, parsed by the launcher's own parser (files/launcher_progress.py).

How the objects are found: the chart's labels (app.kubernetes.io/instance=RELEASE and
app.kubernetes.io/component: ray-cluster, launcher, prepare), KubeRay's pod labels (ray.io/cluster,
ray.io/node-type, ray.io/group), the launcher Job's annotation nemo-rl-gke/submission-id and its
run ConfigMap's launch.json (grpo.max_num_steps). The Ray Jobs API (the dashboard's
/api/jobs/ and /api/jobs/<submission id>/logs) answers the job's state and log; the launcher names
attempt n > 1 <submission id>-retry<n-1>.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from generator.cluster.kube import ApiError, Forbidden, Kube

INSTANCE = "app.kubernetes.io/instance"
COMPONENT = "app.kubernetes.io/component"
DASHBOARD_PORT = 8265
SUBMISSION = "nemo-rl-gke/submission-id"
KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"


@dataclass
class PodState:
    group: str  # head, a worker group's name, launcher or prepare
    name: str
    phase: str
    ready: bool
    node: str = ""
    reason: str = ""  # why it is not running or not ready: the scheduler's or the kubelet's words


@dataclass
class JobState:
    component: str  # prepare or launcher
    name: str
    state: str  # running, complete, failed
    detail: str = ""


@dataclass
class RayJob:
    submission_id: str
    attempt: int
    status: str
    message: str = ""
    start_time: int | None = None  # ms since the epoch, as the Jobs API gives it
    end_time: int | None = None


@dataclass
class ReleaseState:
    release: str
    namespace: str
    raycluster: dict[str, Any] | None = None  # name, state, detail, suspended, workers_desired, workers_ready
    pods: list[PodState] = field(default_factory=list)
    jobs: list[JobState] = field(default_factory=list)
    events: list[str] = field(default_factory=list)  # the RayCluster's latest Warning events
    ray_job: RayJob | None = None
    progress: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)  # what could not be read, and why
    unread: list[str] = field(default_factory=list)  # the collections that could not be read, e.g. rayclusters

    @property
    def found(self) -> bool:
        return self.raycluster is not None or bool(self.jobs)

    @property
    def unknown(self) -> bool:
        """Nothing found, and what would have shown the release could not be read: not "none"."""
        return not self.found and bool({"rayclusters", "jobs"} & set(self.unread))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def pod_state(pod: dict[str, Any], group: str) -> PodState:
    status = pod.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    ready = (conditions.get("Ready") or {}).get("status") == "True"
    reason = ""
    scheduled = conditions.get("PodScheduled") or {}
    if scheduled.get("status") == "False":
        reason = f"{scheduled.get('reason', 'Unschedulable')}: {scheduled.get('message', '')}".strip(": ")
    else:
        for c in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
            waiting = (c.get("state") or {}).get("waiting")
            if waiting:
                reason = f"{c.get('name')}: {waiting.get('reason', '')} {waiting.get('message', '')}".strip()
                break
    return PodState(
        group, pod["metadata"]["name"], str(status.get("phase", "Unknown")), ready, (pod.get("spec") or {}).get("nodeName", ""), reason
    )


def cluster_state(status: dict[str, Any]) -> tuple[str, str]:
    """(state, detail) of a RayCluster. KubeRay sets `state` (ready, suspended) only once every pod
    has been ready; until then its RayClusterProvisioned condition is False
    (RayClusterPodsProvisioning, "RayCluster Pods are being provisioned for first time"), the
    state shown as `provisioning` with the condition's message as the detail."""
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    provisioned = conditions.get("RayClusterProvisioned") or {}
    if status.get("state"):
        return str(status["state"]), ""
    if provisioned.get("status") == "False":
        return "provisioning", str(provisioned.get("message") or provisioned.get("reason") or "")
    return "(no state yet)", ""


def job_state(job: dict[str, Any]) -> JobState:
    labels = (job.get("metadata") or {}).get("labels") or {}
    status = job.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or [] if c.get("status") == "True"}
    if "Complete" in conditions:
        state, detail = "complete", ""
    elif "Failed" in conditions:
        c = conditions["Failed"]
        state, detail = "failed", f"{c.get('reason', '')}: {c.get('message', '')}".strip(": ")
    else:
        state, detail = "running", f"{status.get('active', 0)} pod(s) active, {status.get('failed', 0)} failed"
    return JobState(str(labels.get(COMPONENT, "?")), job["metadata"]["name"], state, detail)


class Reader:
    """Reads one release's state; a read the caller may not do becomes a problem, not an error."""

    def __init__(self, kube: Kube, release: str, namespace: str) -> None:
        self.kube, self.state = kube, ReleaseState(release, namespace)

    def _items(self, path: str, labels: str = "", fields: str = "") -> list[dict[str, Any]]:
        try:
            return self.kube.items(path, labels, fields)
        except ApiError as e:
            kind = path.rsplit("/", 1)[-1]
            self.state.unread.append(kind)
            lacking = f" (you may not {e.permission})" if isinstance(e, Forbidden) else ""
            self.state.problems.append(f"could not read {kind}{lacking}: {e}")
            return []

    def read(self) -> ReleaseState:
        ns, release = self.state.namespace, self.state.release
        clusters = self._items(f"/apis/ray.io/v1/namespaces/{ns}/rayclusters", f"{INSTANCE}={release},{COMPONENT}=ray-cluster")
        jobs = self._items(f"/apis/batch/v1/namespaces/{ns}/jobs", f"{INSTANCE}={release}")
        jobs.sort(key=lambda j: j["metadata"].get("creationTimestamp") or "")
        self.state.jobs = [job_state(j) for j in jobs]
        rc = clusters[0] if clusters else None
        if rc is not None:
            self._cluster(rc)
        self._job_pods()
        launcher = next((j for j in reversed(jobs) if ((j["metadata"].get("labels") or {}).get(COMPONENT)) == "launcher"), None)
        if rc is not None and launcher is not None:
            if (rc.get("spec") or {}).get("suspend"):
                self.state.problems.append("the run's Ray job is not readable: the RayCluster is suspended, so no Ray head runs")
            else:
                self._run(rc, launcher)
        return self.state

    def _cluster(self, rc: dict[str, Any]) -> None:
        name, status, spec = rc["metadata"]["name"], rc.get("status") or {}, rc.get("spec") or {}
        desired = sum(int(g.get("replicas", 0)) for g in spec.get("workerGroupSpecs") or [])
        state, detail = cluster_state(status)
        if spec.get("suspend") and KUEUE_QUEUE in (rc["metadata"].get("labels") or {}):
            detail = self._admission(name) or detail
        self.state.raycluster = {
            "name": name,
            "state": state,
            "detail": detail,
            "suspended": bool(spec.get("suspend")),
            "workers_desired": 0 if spec.get("suspend") else desired,
            "workers_ready": int(status.get("readyWorkerReplicas", 0) or 0),
        }
        for pod in self._items(f"/api/v1/namespaces/{self.state.namespace}/pods", f"ray.io/cluster={name}"):
            labels = pod["metadata"].get("labels") or {}
            group = "head" if labels.get("ray.io/node-type") == "head" else str(labels.get("ray.io/group", "?"))
            self.state.pods.append(pod_state(pod, group))
        self.state.pods.sort(key=lambda p: (p.group != "head", p.group, p.name))
        fields = f"involvedObject.kind=RayCluster,involvedObject.name={name},type=Warning"
        events = self._items(f"/api/v1/namespaces/{self.state.namespace}/events", fields=fields)
        events.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
        self.state.events = [f"{e.get('reason', '')}: {e.get('message', '')}" for e in events[-3:]]

    def _admission(self, raycluster: str) -> str:
        """Why Kueue holds a suspended RayCluster: its Workload's QuotaReserved condition (Kueue
        suspends the cluster until it reserves quota; v1beta2, else v1beta1 before Kueue 0.15)."""
        ns = self.state.namespace
        workloads: list[dict[str, Any]] | None = None
        for version in ("v1beta2", "v1beta1"):
            try:
                workloads = self.kube.items(f"/apis/kueue.x-k8s.io/{version}/namespaces/{ns}/workloads")
                break
            except ApiError as e:
                if e.code != 404:
                    self.state.problems.append(f"could not read Kueue's workloads: {e}")
                    return ""
        if workloads is None:
            return ""
        owned = [
            w
            for w in workloads
            if any(o.get("kind") == "RayCluster" and o.get("name") == raycluster for o in w["metadata"].get("ownerReferences") or [])
        ]
        if not owned:
            return "Kueue has made no Workload for it yet"
        conditions = {c.get("type"): c for c in (owned[0].get("status") or {}).get("conditions") or []}
        reserved = conditions.get("QuotaReserved") or {}
        if reserved.get("status") == "True":
            return ""
        why = reserved.get("message") or reserved.get("reason") or "no quota reserved yet"
        return f"Kueue has not admitted it: {why}"

    def _job_pods(self) -> None:
        selector = f"{INSTANCE}={self.state.release},{COMPONENT} in (launcher,prepare)"
        for pod in self._items(f"/api/v1/namespaces/{self.state.namespace}/pods", selector):
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Pending", "Unknown") or not phase:  # a finished Job's pods say nothing the Job does not
                self.state.pods.append(pod_state(pod, str((pod["metadata"].get("labels") or {}).get(COMPONENT))))

    def _run(self, rc: dict[str, Any], launcher: dict[str, Any]) -> None:
        sid = ((launcher["metadata"].get("annotations") or {}).get(SUBMISSION)) or ""
        service = head_service(rc)
        base = f"/api/v1/namespaces/{self.state.namespace}/services/http:{service}:{DASHBOARD_PORT}/proxy"
        try:
            jobs = json.loads(self.kube.text(f"{base}/api/jobs/"))
        except (ApiError, ValueError) as e:
            self.state.problems.append(f"the Ray head's Jobs API (service {service}, through the API server's proxy): {_why(e)}")
            return
        attempts = [j for j in jobs if isinstance(j, dict) and attempt_of(sid, str(j.get("submission_id") or "")) is not None]
        if not attempts:
            self.state.problems.append(f"the Ray head has no job {sid} yet (the launcher submits it when the cluster is ready)")
            return
        newest = max(attempts, key=lambda j: attempt_of(sid, j["submission_id"]) or 0)
        self.state.ray_job = RayJob(
            newest["submission_id"],
            attempt_of(sid, newest["submission_id"]) or 1,
            str(newest.get("status", "")),
            str(newest.get("message") or ""),
            newest.get("start_time"),
            newest.get("end_time"),
        )
        self._progress(base, newest["submission_id"], self._max_steps(launcher))

    def _max_steps(self, launcher: dict[str, Any]) -> int:
        volumes = ((launcher.get("spec") or {}).get("template") or {}).get("spec", {}).get("volumes") or []
        name = next((v["configMap"]["name"] for v in volumes if "configMap" in v), "")
        try:
            cm = self.kube.get(f"/api/v1/namespaces/{self.state.namespace}/configmaps/{name}") if name else None
            return int(json.loads(((cm or {}).get("data") or {}).get("launch.json") or "{}").get("max_num_steps") or 0)
        except (ApiError, ValueError, TypeError):
            return 0

    def _progress(self, base: str, job_id: str, max_steps: int) -> None:
        from generator.render.chart_programs import load

        try:
            logs = json.loads(self.kube.text(f"{base}/api/jobs/{job_id}/logs")).get("logs") or ""
        except (ApiError, ValueError, AttributeError) as e:
            self.state.problems.append(f"the run's log: {_why(e)}")
            return
        progress = load("launcher_progress").Progress(max_steps)
        for line in logs.splitlines():
            progress.saw_line(line)
        progress.flush()
        if progress.latest is not None:
            self.state.progress = progress.as_dict()


def head_service(rc: dict[str, Any]) -> str:
    """The head's Service: the chart names it in headGroupSpec.headService; KubeRay reports it."""
    named = ((((rc.get("spec") or {}).get("headGroupSpec") or {}).get("headService") or {}).get("metadata") or {}).get("name")
    reported = ((rc.get("status") or {}).get("head") or {}).get("serviceName")
    return str(named or reported or f"{rc['metadata']['name']}-head-svc")


def attempt_of(submission_id: str, job_id: str) -> int | None:
    """1 for the submission id itself, n for <id>-retry<n-1>, None for another run's job."""
    if not submission_id:
        return None
    if job_id == submission_id:
        return 1
    m = re.fullmatch(re.escape(submission_id) + r"-retry(\d+)", job_id)
    return int(m.group(1)) + 1 if m else None


def _why(e: Exception) -> str:
    if isinstance(e, Forbidden):
        return f"not readable: {e}"
    if isinstance(e, ApiError) and e.code == 503:
        return f"not answering yet ({e})"
    return str(e) or type(e).__name__


def read(kube: Kube, release: str) -> ReleaseState:
    return Reader(kube, release, kube.namespace).read()
