"""The token Secret exists with the keys the values name (secrets.source existing), or what makes it
is there (files: the chart, from --set-file; external: the External Secrets Operator and its
store). Values are read only to tell an empty key from a filled one; none is ever printed."""

from __future__ import annotations

import base64
import binascii

from generator.cluster.checks.context import Context, listed
from generator.cluster.report import Result, failed, passed

NAME = "token-secret"


def _keys(ctx: Context) -> list[str]:
    return [k for k in (ctx.value("secrets.hfTokenKey", ""), ctx.value("secrets.wandbApiKeyKey", "")) if k]


def _empty(encoded: object) -> bool:
    try:
        return not base64.b64decode(str(encoded or "")).strip()
    except (binascii.Error, ValueError):
        return False


def _existing(ctx: Context) -> Result:
    name, keys = ctx.value("secrets.existingSecret", ""), _keys(ctx)
    secret = ctx.kube.get(f"/api/v1/namespaces/{ctx.namespace}/secrets/{name}")
    create = f"kubectl create secret generic {name} -n {ctx.namespace} " + " ".join(f"--from-file={k}=./{k.lower()}" for k in keys)
    if secret is None:
        return failed(NAME, f"Secret {ctx.namespace}/{name} not found", create.strip())
    data = secret.get("data") or {}
    missing = [k for k in keys if k not in data]
    empty = [k for k in keys if k in data and _empty(data[k])]
    secret.clear()  # the tokens go no further
    if missing or empty:
        what = "; ".join(x for x in (f"lacks {listed(missing)}" if missing else "", f"empty {listed(empty)}" if empty else "") if x)
        return failed(
            NAME,
            f"Secret {ctx.namespace}/{name} {what}",
            f"kubectl -n {ctx.namespace} delete secret {name} and create it again: {create}",
        )
    return passed(NAME, f"Secret {ctx.namespace}/{name} has {listed(keys) or 'no key the values name (none needed)'}")


def _external(ctx: Context) -> Result:
    if ctx.crd("externalsecrets.external-secrets.io") is None:
        return failed(NAME, "secrets.source is external but the External Secrets Operator is not installed", "install it, or use existing")
    kind = ctx.value("secrets.external.storeKind", "ClusterSecretStore")
    store = ctx.value("secrets.external.storeName", "")
    group = str(ctx.value("secrets.external.apiVersion", "external-secrets.io/v1"))
    path = (
        f"/apis/{group}/clustersecretstores/{store}"
        if kind == "ClusterSecretStore"
        else f"/apis/{group}/namespaces/{ctx.namespace}/secretstores/{store}"
    )
    if ctx.kube.get(path) is None:
        return failed(
            NAME, f"{kind} {store} not found", f"create the {kind} the ExternalSecret reads from, or set secrets.external.storeName"
        )
    return passed(NAME, f"the ExternalSecret fills {ctx.release}-tokens from {kind} {store}")


def check(ctx: Context) -> Result:
    source = ctx.value("secrets.source", "none")
    if source == "existing":
        return _existing(ctx)
    if source == "external":
        return _external(ctx)
    if source == "files":
        for s in ctx.rendered.of_kind("Secret"):
            if who := ctx.taken(f"/api/v1/namespaces/{ctx.namespace}/secrets/{s['metadata']['name']}"):
                return failed(
                    NAME,
                    f"Secret {s['metadata']['name']} exists ({who}): helm install would refuse it",
                    f"use it with secrets.source existing (secrets.existingSecret {s['metadata']['name']}), or delete it",
                )
        return passed(NAME, "the chart creates the token Secret from --set-file at install time")
    return passed(NAME, "no tokens (secrets.source none): the model must be ungated and W&B off")
