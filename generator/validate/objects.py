"""Rules on the objects the chart renders, as the API server, KubeRay and Kueue check them.

`validate` renders the values with the pinned Helm 4 and runs these rules on every pod the chart
renders (RayCluster head and worker templates, the Jobs, the test Pod) and on every object's
labels: what the OpenAPI schemas (kubernetes-validate, the KubeRay CRDs) do not express. Each
finding names the values key the object's field comes from. The chart's own `required`/`fail`
messages come back as findings with their values key.

API rules follow kubernetes/kubernetes pkg/apis/core/validation/validation.go:
- ValidateTolerations: operator Exists takes no value; operator is Equal or Exists; an empty key
  needs Exists; effect is NoSchedule, PreferNoSchedule or NoExecute; tolerationSeconds only with
  NoExecute.
- ValidateContainerResourceRequirements: a request above its limit is refused ("must be less than or
  equal to ... limit").
- ValidatePodSpec: nodeSelector keys and values are label keys and values (ValidateLabels).
- ValidateObjectMeta: metadata.labels (ValidateLabels, k8s.io/apimachinery
  pkg/util/validation IsQualifiedName / IsValidLabelValue: names 63 characters, prefix a DNS
  subdomain of 253, values 63 characters of [A-Za-z0-9_.-], alphanumeric at both ends).
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from generator.core.paths import CHART_DIR
from generator.core.schema import VALUES_TABLE
from generator.gke.profiles import PROFILES
from generator.gke.provisioning import TYPES
from generator.gke.sizing import parse_quantity
from generator.helm.runner import DEFAULT_NAMESPACE, helm_env
from generator.validate.api_rules import label_key_problem, label_value_problem, mapping, values_at
from generator.validate.findings import Finding, error, warning

TOLERATION_OPERATORS = ("Equal", "Exists")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# No GKE node the chart targets has more vCPUs than the largest GPU host.
MAX_NODE_CPUS = max(p.host_vcpus for p in PROFILES.values())
# Kueue's RayCluster integration names the head's pod set "head": a worker group of that name collides.
KUEUE_RESERVED_GROUP = "head"
SPOT = TYPES["spot"].labels[0][0]  # cloud.google.com/gke-spot


@dataclass(frozen=True)
class Pod:
    """One pod template the chart renders and the values keys its fields come from."""

    where: str  # e.g. RayCluster/x workerGroupSpecs[0]
    spec: dict[str, Any]
    labels: dict[str, Any]
    resources: str  # values prefix of the first container's resources, e.g. "worker"
    scheduling: str  # values prefix of nodeSelector/tolerations, e.g. "workerGroups[0]"
    ray: str = ""  # "head" or "worker" for Ray pods
    group: int | None = None


def _template_pod(where: str, template: dict[str, Any], resources: str, scheduling: str, *, ray: str = "", group: int | None = None) -> Pod:
    return Pod(where, mapping(template, "spec"), mapping(template, "metadata", "labels"), resources, scheduling, ray, group)


def _ray_pods(name: str, spec: dict[str, Any]) -> Iterator[Pod]:
    yield _template_pod(f"RayCluster/{name} head", mapping(spec, "headGroupSpec", "template"), "head", "head", ray="head")
    for i, g in enumerate(spec.get("workerGroupSpecs") or []):
        where = f"RayCluster/{name} workerGroupSpecs[{i}]"
        yield _template_pod(where, mapping(g, "template"), "worker", f"workerGroups[{i}]", ray="worker", group=i)


def pod_templates(objs: list[dict[str, Any]]) -> Iterator[Pod]:
    for o in objs:
        kind, name, spec = o.get("kind"), mapping(o, "metadata").get("name", "?"), mapping(o, "spec")
        if kind == "RayCluster":
            yield from _ray_pods(name, spec)
        elif kind == "Job":
            template = mapping(spec, "template")
            component = str(mapping(template, "metadata", "labels").get("app.kubernetes.io/component", ""))
            resources = "prepare" if "prepare" in component or "prepare" in str(name) else "launcher"
            yield _template_pod(f"Job/{name}", template, resources, "launcher")
        elif kind == "Pod":
            yield Pod(f"Pod/{name}", spec, mapping(o, "metadata", "labels"), "", "")


def _find(values: dict[str, Any], prefixes: list[str], field: str, item: Any) -> str | None:
    """The values key `prefix.field[i]` whose entry equals `item` (a rendered toleration, an env entry)."""
    for prefix in prefixes:
        node = values_at(values, prefix)
        entries = node.get(field) if isinstance(node, dict) else None
        for i, e in enumerate(entries or []):
            if e == item:
                return f"{prefix}.{field}[{i}]"
    return None


def _label_findings(labels: dict[str, Any], keys: list[str], values: dict[str, Any], what: str) -> Iterator[Finding]:
    """Label (or node selector) problems, named by the first values map in `keys` holding the label."""
    for k, val in labels.items():
        owner = next((p for p in keys if k in (values_at(values, p) or {})), None)
        if owner is None:
            continue  # the chart's own label: its tests check those
        if problem := label_key_problem(str(k)):
            yield error(f"{owner}.{k}", f"{what} key {k!r}: the API server refuses it: {problem}", "rename the key")
        elif problem := label_value_problem(str(val)):
            yield error(
                f"{owner}.{k}", f"{what} value {str(val)[:80]!r}: the API server refuses it: {problem}", "shorten or rewrite the value"
            )


def _tolerations(pod: Pod, values: dict[str, Any]) -> Iterator[Finding]:
    for t in pod.spec.get("tolerations") or []:
        key = _find(values, [pod.scheduling], "tolerations", t) if pod.scheduling else None
        if key is None:
            continue  # the chart's own tolerations
        op = t.get("operator") or "Equal"
        if op not in TOLERATION_OPERATORS:
            yield error(
                f"{key}.operator", f"operator {op!r} in {pod.where}: the API server allows only Equal or Exists", "use Equal or Exists"
            )
        elif op == "Exists" and t.get("value"):
            yield error(
                f"{key}.value",
                f"operator Exists with value {t['value']!r} in {pod.where}: the API server refuses a value with Exists",
                "remove the value (Exists matches any value) or use operator: Equal",
            )
        if not t.get("key") and op != "Exists":
            yield error(f"{key}.key", f"an empty key in {pod.where} needs operator Exists", "set a key or operator: Exists")
        effect = t.get("effect")
        if effect and effect not in TAINT_EFFECTS:
            yield error(
                f"{key}.effect",
                f"effect {effect!r} in {pod.where}: not a taint effect",
                f"use one of {', '.join(TAINT_EFFECTS)} or leave it empty",
            )
        if t.get("tolerationSeconds") is not None and effect != "NoExecute":
            yield error(
                f"{key}.tolerationSeconds",
                f"tolerationSeconds in {pod.where} needs effect NoExecute",
                "set effect: NoExecute or drop tolerationSeconds",
            )


def _resources(pod: Pod) -> Iterator[Finding]:
    containers = pod.spec.get("containers") or []
    if not containers or not pod.resources:
        return
    res = containers[0].get("resources") or {}
    req, lim = res.get("requests") or {}, res.get("limits") or {}
    prefix = f"{pod.resources}.resources"
    for name in sorted(set(req) & set(lim)):
        try:
            r, m = parse_quantity(req[name]), parse_quantity(lim[name])
        except ValueError:
            continue
        if m < r:
            yield error(
                f"{prefix}.limits.{name}",
                f"limit {lim[name]} is below the request {req[name]} ({pod.where}): the API server refuses a request above its limit",
                "raise the limit to at least the request",
            )
    for kind, qs in (("requests", req), ("limits", lim)):
        try:
            cpu = parse_quantity(qs["cpu"]) if "cpu" in qs else None
        except ValueError:
            continue
        if cpu is not None and cpu > MAX_NODE_CPUS:
            yield error(
                f"{prefix}.{kind}.cpu",
                f"{qs['cpu']} CPUs ({pod.where}): more than any node has ({MAX_NODE_CPUS} vCPUs); the pod stays Pending",
                f"write millicores with an m (e.g. {qs['cpu']}m) or give whole CPUs",
            )


def _chart_worker_selector(values: dict[str, Any], group: dict[str, Any]) -> dict[str, str]:
    """The node selector the chart itself sets on a worker group (templates/raycluster.yaml, _helpers.tpl)."""
    sel = {"cloud.google.com/gke-accelerator": str(values["accelerator"]["nodeLabel"])}
    if values.get("gke", {}).get("mode") == "autopilot":
        sel["cloud.google.com/gke-accelerator-count"] = str(values["accelerator"]["gpusPerNode"])
    kind = TYPES.get(str(group.get("provisioning")))
    if kind is not None:
        sel |= kind.node_labels(str(group.get("reservationName", "")))
    return sel


def _selectors(values: dict[str, Any]) -> Iterator[Finding]:
    for i, g in enumerate(values.get("workerGroups") or []):
        own = _chart_worker_selector(values, g)
        for k, v in (g.get("nodeSelector") or {}).items():
            if k in own and str(v) != own[k]:
                yield error(
                    f"workerGroups[{i}].nodeSelector.{k}",
                    f"{k}: {v} contradicts the chart's own {k}: {own[k]} for this group (both are rendered; the last one wins silently)",
                    "remove it: the chart sets it from accelerator and provisioning",
                )
            elif k == SPOT and g.get("provisioning") != "spot" and str(v).lower() == "true":
                yield error(
                    f"workerGroups[{i}].nodeSelector.{k}",
                    f"a Spot selector on a {g.get('provisioning')} group: no node is both, the pods stay Pending",
                    "remove it, or set provisioning: spot",
                )


def _env(pod: Pod, values: dict[str, Any]) -> Iterator[Finding]:
    if not pod.ray:
        return
    extra = {e.get("name") for e in values.get("extraEnv") or []}
    for c in (pod.spec.get("containers") or [])[:1]:
        seen: set[str] = set()
        for e in c.get("env") or []:
            name = e.get("name")
            if name in seen and name in extra:
                i = next(j for j, x in enumerate(values["extraEnv"]) if x.get("name") == name)
                fix = "set NCCL variables in nccl.extraEnv" if str(name).startswith("NCCL_") else "remove it: the chart sets it"
                yield error(f"extraEnv[{i}].name", f"{name} is set by the chart too; extraEnv is rendered later and wins silently", fix)
            seen.add(name)


def _ray_params(values: dict[str, Any]) -> Iterator[Finding]:
    gpus = values["accelerator"]["gpusPerNode"]
    for part in ("head", "worker"):
        params = values.get(part, {}).get("rayStartParams") or {}
        if "num-gpus" in params:
            want = 0 if part == "head" else gpus
            try:
                n = int(str(params["num-gpus"]))
            except ValueError:
                n = None
            if n != want:
                what = "the head is a CPU pod" if part == "head" else f"each worker node has {gpus} GPUs"
                yield error(
                    f"{part}.rayStartParams.num-gpus",
                    f"num-gpus {params['num-gpus']} but {what}: Ray schedules GPU work where there is none (or leaves GPUs idle)",
                    "remove it: KubeRay sets it from the container's nvidia.com/gpu limit",
                )
        if "object-store-memory" in params:
            try:
                store, shm = parse_quantity(params["object-store-memory"]), parse_quantity(values[part]["shmSize"])
            except (ValueError, KeyError):
                continue
            if store > shm:
                yield error(
                    f"{part}.rayStartParams.object-store-memory",
                    f"object-store-memory {params['object-store-memory']} bytes exceeds the pod's /dev/shm {values[part]['shmSize']}: "
                    "Ray refuses to start or spills to disk",
                    f"keep it at or below {part}.shmSize (in bytes), or raise {part}.shmSize",
                )


def _groups(values: dict[str, Any]) -> Iterator[Finding]:
    for i, g in enumerate(values.get("workerGroups") or []):
        if g.get("name") == KUEUE_RESERVED_GROUP:
            yield error(
                f"workerGroups[{i}].name",
                "the group name 'head' is the pod set Kueue reserves for the Ray head; the workload is refused",
                "rename the group",
            )


def check_objects(objs: list[dict[str, Any]], values: dict[str, Any]) -> list[Finding]:
    out: list[Finding] = []
    label_maps = ["commonLabels"]
    for pod in pod_templates(objs):
        out += _tolerations(pod, values)
        out += _resources(pod)
        out += _env(pod, values)
        own = [f"{pod.scheduling}.labels"] if pod.scheduling.startswith("workerGroups") or pod.scheduling == "head" else []
        out += _label_findings(pod.labels, [*own, *label_maps], values, "label")
        if pod.scheduling:
            out += _label_findings(pod.spec.get("nodeSelector") or {}, [f"{pod.scheduling}.nodeSelector"], values, "nodeSelector")
        for c in pod.spec.get("containers") or []:
            if c.get("imagePullPolicy") == "Never" and not (values.get("image", {}).get("preload") or {}).get("diskImage"):
                out.append(
                    warning(
                        "image.pullPolicy",
                        f"Never in {pod.where} with no image.preload.diskImage: "
                        "unless the image is already on every node the pod fails with ErrImageNeverPull",
                        "use IfNotPresent, or preload the image (image.preload)",
                    )
                )
                break
    for o in objs:
        if o.get("kind") not in ("RayCluster", "Job", "Pod"):
            out += _label_findings((o.get("metadata") or {}).get("labels") or {}, label_maps, values, "label")
    out += _selectors(values)
    out += _ray_params(values)
    out += _groups(values)
    seen: set[tuple[str, str]] = set()
    unique = []
    for f in out:
        if (f.key, f.level) not in seen:
            seen.add((f.key, f.level))
            unique.append(f)
    return unique


# --- the chart's own messages -------------------------------------------------------------

_KEY_AT_START = re.compile(r"^([a-zA-Z][\w]*(?:\.[\w]+|\[[^\]]*\])*)(?::| is | names )")


def chart_message_key(message: str, values: dict[str, Any] | None = None) -> str:
    """The values key a `required`/`fail` message of the chart is about (a group named by its index)."""
    if message.startswith("RayCluster name"):
        return "fullnameOverride"
    if message.startswith("secrets.source is files"):
        return "secrets.fromFiles.wandbApiKey" if "W&B" in message else "secrets.fromFiles.hfToken"
    m = _KEY_AT_START.match(message)
    if not m:
        return "(chart)"
    key = m.group(1)
    g = re.match(r"workerGroups\[([^\]]*)\](.*)", key)
    if g is None:
        return key
    names = [str(x.get("name")) for x in (values or {}).get("workerGroups") or []]
    index = names.index(g.group(1)) if g.group(1) in names else g.group(1)
    return f"workerGroups[{index}]{g.group(2)}"


def chart_failure(text: str, values: dict[str, Any] | None = None) -> Finding:
    """A Helm error as one finding: the chart's own message when the chart stopped the render."""
    m = re.search(r"execution error at \([^)]*\): (.*)", text)
    if m is None:
        return error(
            "(chart)", f"helm template failed: {text.splitlines()[0] if text else 'no message'}", f"see the values table in {VALUES_TABLE}"
        )
    message = m.group(1).strip()
    return error(chart_message_key(message, values), message, "the chart stops the install with this message")


class Rendering:
    """The pinned Helm 4 rendering `values` in the background (it runs while the Python rules do)."""

    def __init__(self, values: dict[str, Any], release: str) -> None:
        from generator.helm.runner import HelmMissing, default_helm

        self.values = values
        self.objects: list[dict[str, Any]] = []  # what Helm rendered, once `findings` has run
        self.problem: Finding | None = None
        self.proc: subprocess.Popen[str] | None = None
        try:
            helm = default_helm()
        except HelmMissing as e:
            self.problem = warning("(chart)", f"objects not checked: {e}", "run scripts/bootstrap.sh")
            return
        self._tmp = tempfile.TemporaryDirectory()
        path = Path(self._tmp.name) / "values.json"
        path.write_text(json.dumps(values), encoding="utf-8")
        args = [str(helm.path), "template", release, str(CHART_DIR), "--namespace", DEFAULT_NAMESPACE, "-f", str(path)]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=helm_env())

    def rendered(self) -> Finding | None:
        """Wait for Helm: the objects it rendered go to `objects`; the problem when it could not."""
        from generator.render.manifests import parse_documents

        if self.proc is None:
            return self.problem
        out, err = self.proc.communicate()
        self._tmp.cleanup()
        if self.proc.returncode != 0:
            return chart_failure((err or out).strip(), self.values)
        self.objects = parse_documents(out)
        return None

    def findings(self) -> list[Finding]:
        """The rendering's problem, else the rules on the rendered objects (values that passed the schema)."""
        problem = self.rendered()
        if problem is not None:
            return [problem]
        return check_objects(self.objects, self.values) if self.proc is not None else []


def render_findings(values: dict[str, Any], release: str) -> list[Finding]:
    """Render `values` (already merged over the chart defaults) with the pinned Helm 4; the findings."""
    return Rendering(values, release).findings()
