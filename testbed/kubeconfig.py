"""Kubeconfig files for the test bed's clusters: the components' own (a client certificate each),
the admin's, and test users' (a bearer token); one file may hold several clusters as contexts."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

import yaml


@dataclass(frozen=True)
class Context:
    name: str
    server: str
    ca: Path
    cert: Path | None = None
    key: Path | None = None
    token: str = ""


def document(contexts: list[Context], current: str | None = None) -> dict:
    clusters, users, ctxs = [], [], []
    for c in contexts:
        clusters.append(
            {"name": c.name, "cluster": {"server": c.server, "certificate-authority-data": base64.b64encode(c.ca.read_bytes()).decode()}}
        )
        user: dict[str, str] = {}
        if c.cert and c.key:
            user = {"client-certificate": str(c.cert), "client-key": str(c.key)}
        if c.token:
            user["token"] = c.token
        users.append({"name": c.name, "user": user})
        ctxs.append({"name": c.name, "context": {"cluster": c.name, "user": c.name}})
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": clusters,
        "users": users,
        "contexts": ctxs,
        "current-context": current or contexts[0].name,
        "preferences": {},
    }


def write(path: Path, contexts: list[Context], current: str | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(document(contexts, current), sort_keys=False))
    tmp.chmod(0o600)
    tmp.replace(path)
    return path
