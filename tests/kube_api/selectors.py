"""Label and field selectors of LIST requests, as the API server reads them
(https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors,
.../field-selectors/): requirements joined by ',', all of which must hold. The stand-in reads the
forms its clients send, `key=value` and `key in (a,b)`, and refuses any other with a ValueError
(answered 400), never ignoring one."""

from __future__ import annotations

import re
from typing import Any

_SET = re.compile(r"^([^\s!=]+)\s+in\s+\(([^)]*)\)$")
_EQUALS = re.compile(r"^([^\s!=]+)\s*==?\s*([^\s!=]*)$")


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
        return labels.get(m.group(1)) in {v.strip() for v in m.group(2).split(",")}
    if m := _EQUALS.match(req):
        return labels.get(m.group(1)) == m.group(2)
    raise ValueError(f"the stand-in does not read the label selector requirement {req!r}")


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
        m = _EQUALS.match(req)
        if m is None:
            raise ValueError(f"the stand-in does not read the field selector requirement {req!r}")
        if _field(obj, m.group(1)) != m.group(2):
            return False
    return True
