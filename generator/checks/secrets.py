"""Token references: present when the run needs them, never plain values."""

from __future__ import annotations

import re
from collections.abc import Iterator

from ..findings import Finding, error
from ..grpo import is_gated
from .context import Context

SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL)", re.I)


def check(ctx: Context) -> Iterator[Finding]:
    sec = ctx.values.get("secrets", {})
    name = sec.get("existingSecret", "")
    if ctx.get("logger.wandb_enabled") is True and not (name and sec.get("wandbApiKeyKey")):
        key = "secrets.existingSecret" if not name else "secrets.wandbApiKeyKey"
        yield error(
            key,
            "W&B logging is on but no WANDB_API_KEY reference is set",
            "create a Secret with WANDB_API_KEY and set secrets.existingSecret / wandbApiKeyKey",
        )
    model = ctx.get("policy.model_name")
    if isinstance(model, str) and is_gated(model) and not (name and sec.get("hfTokenKey")):
        key = "secrets.existingSecret" if not name else "secrets.hfTokenKey"
        yield error(
            key,
            f"{model} is a gated model but no HF_TOKEN reference is set",
            "create a Secret with HF_TOKEN and set secrets.existingSecret / hfTokenKey",
        )
    for i, e in enumerate(ctx.values.get("extraEnv", [])):
        if SECRET_NAME.search(e["name"]):
            yield error(
                f"extraEnv[{i}].value",
                f"{e['name']} looks like a secret but is a plain value (rendered into the pod spec)",
                "put it in a Secret and reference it via secrets.*",
            )
    for k in ctx.values.get("nccl", {}).get("extraEnv") or {}:
        if SECRET_NAME.search(k):
            yield error(f"nccl.extraEnv.{k}", f"{k} looks like a secret but is a plain value", "use a Secret")
