"""The KubeRay CRDs are installed and the installed RayCluster schema has every field the chart
renders: an operator whose CRD lacks a field drops it silently (the API server prunes unknown
fields of a custom resource), so the cluster would not be the one the values describe.

The rendered RayCluster is checked against the installed CRD's own schema, converted as the
vendored CRDs are (generator/render/crd_schema.py). The operator's version is read from its
Deployment where the cluster shows one (KubeRay's Helm chart labels it
app.kubernetes.io/name=kuberay-operator); GKE's Ray operator add-on runs the operator outside the
cluster's workloads, so there it is not visible.
"""

from __future__ import annotations

from typing import Any

from generator.cluster.checks.context import Context, listed
from generator.cluster.kube import Forbidden
from generator.cluster.report import Result, failed, passed
from generator.core.schema import dotted
from generator.render.crd_schema import json_schema

NAME = "kuberay-crd"
CRD = "rayclusters.ray.io"
INSTALL = (
    "enable GKE's Ray operator add-on (gcloud container clusters update CLUSTER --location LOCATION "
    "--update-addons=RayOperator=ENABLED; infra.sh creates clusters with it) or install KubeRay >= 1.3.2 with its Helm chart"
)


def rendered_fields(schema: dict[str, Any], rc: dict[str, Any]) -> list[str]:
    """'path: message' for each part of the rendered RayCluster the schema does not accept."""
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(json_schema(schema))
    return sorted({f"{dotted(e.absolute_path)}: {e.message.splitlines()[0][:160]}" for e in validator.iter_errors(rc)})


def operator(ctx: Context) -> str:
    try:
        deployments = ctx.kube.items("/apis/apps/v1/deployments", labels="app.kubernetes.io/name=kuberay-operator")
    except Forbidden:
        return "the operator's version is not readable (you may not list Deployments across namespaces)"
    if not deployments:
        return "the operator is not among the cluster's Deployments (GKE's Ray operator add-on runs it outside them)"
    d = deployments[0]
    images = [c.get("image", "?") for c in ((d.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []]
    where = f"{d['metadata'].get('namespace', '?')}/{d['metadata']['name']}"
    return f"operator {where} runs {', '.join(images) or '?'}"


def check(ctx: Context) -> Result:
    rc = ctx.rendered.raycluster
    crd = ctx.crd(CRD)
    if crd is None:
        return failed(NAME, f"KubeRay is not installed: the cluster has no CustomResourceDefinition {CRD}", INSTALL)
    if rc is None:
        return passed(NAME, f"{CRD} is installed; the values render no RayCluster")
    version = str(rc.get("apiVersion", "")).rpartition("/")[2]
    served = {v["name"]: v for v in crd["spec"].get("versions") or [] if v.get("served", True)}
    if version not in served:
        return failed(
            NAME,
            f"the installed {CRD} serves {', '.join(sorted(served)) or 'no version'}, not ray.io/{version} the chart renders",
            f"upgrade KubeRay to >= 1.3.2 ({INSTALL})",
        )
    problems = rendered_fields(served[version]["schema"]["openAPIV3Schema"], rc)
    who = operator(ctx)
    if problems:
        return failed(
            NAME,
            f"the installed {CRD} does not accept {len(problems)} part(s) of the rendered RayCluster: {listed(problems, 3)}; {who}",
            "upgrade KubeRay to a version whose CRD has these fields (the chart renders for KubeRay 1.3.2 to 1.7.0); "
            "kubectl get crd rayclusters.ray.io -o yaml shows the installed schema",
        )
    return passed(NAME, f"{CRD} serves ray.io/{version} and its schema has every field the chart renders; {who}")
