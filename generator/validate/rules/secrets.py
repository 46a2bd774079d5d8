"""Token references: one declared source, present when the run needs it, never a plain value."""

from __future__ import annotations

import re
from collections.abc import Iterator

from generator.nemo_rl.run_spec import is_gated
from generator.validate.findings import Finding, error
from generator.validate.rules.context import Context

# A secret-looking variable name: one of these words as a whole `_`-separated segment (HF_TOKEN,
# AWS_SECRET_ACCESS_KEY, WANDB_API_KEY), never inside a word (TOKENIZERS_PARALLELISM is no token).
SECRET_NAME = re.compile(r"(?:^|_)(TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?|(?:API|ACCESS|PRIVATE)_KEY)(?:_|$)", re.I)
KEYS = {"hfTokenKey": ("hfToken", "hfTokenRemoteKey"), "wandbApiKeyKey": ("wandbApiKey", "wandbApiKeyRemoteKey")}

# The shapes of the tokens themselves, which never name a key, a Secret or a secret-manager entry:
# Hugging Face access tokens are hf_ and 34 letters (organisation tokens api_org_; the secret
# scanners' rule, e.g. gitleaks huggingface-access-token; matched here with digits too and from 30
# characters), W&B API keys 40 hex characters, on-prem ones after a "local-"-style prefix
# (wandb/sdk/lib/wbauth/validation.py), newer ones about 86 characters starting wandb_v1_
# (docs.wandb.ai, "Why does my API key fail with 'must be 40 characters long'?"). Matched whole,
# so key names such as hf_token or HF_TOKEN never are.
TOKEN_SHAPES = {
    "a Hugging Face token": re.compile(r"(?:hf|api_org)_[A-Za-z0-9]{30,}"),
    "a W&B API key": re.compile(r"(?:[a-z]+-)?[0-9a-f]{40}|wandb_v1_\w{40,}"),
}
# Where a name belongs: the values key, what it names, and an example name.
NAME_KEYS = {
    "hfTokenKey": ("the key in the Secret that holds the token", "HF_TOKEN"),
    "wandbApiKeyKey": ("the key in the Secret that holds the key", "WANDB_API_KEY"),
    "existingSecret": ("the Secret's name", "nemo-rl-tokens"),
    "external.hfTokenRemoteKey": ("the token's name in the secret manager", "hf-token"),
    "external.wandbApiKeyRemoteKey": ("the key's name in the secret manager", "wandb-api-key"),
}


def _pasted_tokens(sec: dict) -> Iterator[Finding]:
    """A token pasted where a name belongs. The value is never shown: it is a secret."""
    for key, (what, example) in NAME_KEYS.items():
        section, _, name = key.rpartition(".")
        value = (sec.get(section) or {}).get(name) if section else sec.get(name)
        kind = next((k for k, shape in TOKEN_SHAPES.items() if isinstance(value, str) and shape.fullmatch(value)), None)
        if kind is not None:
            yield error(
                f"secrets.{key}",
                f"holds what looks like {kind} (not shown), where {what} belongs: the token is in the configuration"
                " and, once installed, in Helm's release history",
                f"revoke it, store the new one in the Secret or secret manager, and set secrets.{key} to its name, e.g. {example}",
            )


def _source(ctx: Context) -> Iterator[Finding]:
    sec = ctx.values["secrets"]
    source = sec["source"]
    files = sec.get("fromFiles") or {}
    for name in ("hfToken", "wandbApiKey"):
        if files.get(name) and f"secrets.fromFiles.{name}" not in ctx.set_file_keys:
            yield error(
                f"secrets.fromFiles.{name}",
                "a token written into a values file (it ends up in version control and in every copy of the file)",
                f"remove it and pass --set-file secrets.fromFiles.{name}=FILE at helm install",
            )
    if source == "existing" and not sec.get("existingSecret"):
        yield error("secrets.existingSecret", "secrets.source is existing but no Secret is named", "name the Secret holding the tokens")
    if source != "existing" and sec.get("existingSecret"):
        yield error(
            "secrets.existingSecret", f"a Secret is named but secrets.source is {source}", "clear it or set secrets.source: existing"
        )
    if source == "external":
        ext = sec.get("external") or {}
        if not ext.get("storeName"):
            yield error(
                "secrets.external.storeName", "secrets.source is external but no SecretStore is named", "name the (Cluster)SecretStore"
            )
        for key, (_, remote) in KEYS.items():
            if sec.get(key) and not ext.get(remote):
                yield error(
                    f"secrets.external.{remote}",
                    f"secrets.{key} is set but the secret manager's key is not",
                    "name the secret in the secret manager",
                )
    if source == "none" and (sec.get("hfTokenKey") or sec.get("wandbApiKeyKey")):
        key = "secrets.hfTokenKey" if sec.get("hfTokenKey") else "secrets.wandbApiKeyKey"
        yield error(key, "a token key is set but secrets.source is none", "choose a source (existing, files or external) or clear the key")


def check(ctx: Context) -> Iterator[Finding]:
    sec = ctx.values["secrets"]
    yield from _pasted_tokens(sec)
    yield from _source(ctx)
    has_source = sec["source"] != "none"
    if ctx.get("logger.wandb_enabled") is True and not (has_source and sec.get("wandbApiKeyKey")):
        key = "secrets.source" if not has_source else "secrets.wandbApiKeyKey"
        yield error(
            key,
            "W&B logging is on but no WANDB_API_KEY reference is set",
            "give a token source and set secrets.wandbApiKeyKey: WANDB_API_KEY",
        )
    model = ctx.get("policy.model_name")
    if isinstance(model, str) and is_gated(model) and not (has_source and sec.get("hfTokenKey")):
        key = "secrets.source" if not has_source else "secrets.hfTokenKey"
        yield error(
            key, f"{model} is a gated model but no HF_TOKEN reference is set", "give a token source and set secrets.hfTokenKey: HF_TOKEN"
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
