"""Label and field selectors of LIST requests, as the API server reads them
(https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors,
.../field-selectors/): requirements joined by ',', all of which must hold."""

from __future__ import annotations

import re
from typing import Any

_SET = re.compile(r"^([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)$")


def _requirements(text: str) -> list[str]:
    """Split on the commas outside parentheses."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def _holds(req: str, labels: dict[str, str]) -> bool:
    if m := _SET.match(req):
        key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
        return (labels.get(key) in values) if op == "in" else (labels.get(key) not in values)
    if "!=" in req:
        key, value = (s.strip() for s in req.split("!=", 1))
        return labels.get(key) != value
    if "=" in req:
        key, value = (s.strip() for s in req.replace("==", "=").split("=", 1))
        return labels.get(key) == value
    if req.startswith("!"):
        return req[1:].strip() not in labels
    return req in labels


def labels_match(selector: str, obj: dict[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(_holds(r, labels) for r in _requirements(selector))


def _field(obj: dict[str, Any], path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return "" if node is None else str(node)


def fields_match(selector: str, obj: dict[str, Any]) -> bool:
    for req in _requirements(selector):
        if "!=" in req:
            key, value = req.split("!=", 1)
            if _field(obj, key.strip()) == value.strip():
                return False
        else:
            key, value = req.replace("==", "=").split("=", 1)
            if _field(obj, key.strip()) != value.strip():
                return False
    return True
