"""doctor's results and how they are printed: one line per check in text, or one JSON document.

The JSON document's keys are stable (docs/doctor-and-status.md): `ok`, `server`, `context`,
`namespace`, `release`, `values`, `verdict` (ready, not ready, not checked), `counts` (`pass`,
`fail`, `warn`, `skip`) and `checks`, a list of {`name`, `status`, `message`, `fix`}.

A check that could not read what it checks is `skip` ("not checked", naming the permission it
lacked): the verdict is "ready" only when every check ran, so doctor never calls a cluster ready
on reads it could not make.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass

PASS, FAIL, WARN, SKIP = "pass", "fail", "warn", "skip"
STATUSES = (PASS, FAIL, WARN, SKIP)
READY, NOT_READY, NOT_CHECKED = "ready", "not ready", "not checked"


@dataclass(frozen=True)
class Result:
    name: str  # the check, e.g. kuberay-crd
    status: str  # pass, fail or warn
    message: str
    fix: str = ""

    def line(self) -> str:
        text = f"{self.status:<4}  {self.name}: {self.message}"
        return f"{text} - fix: {self.fix}" if self.fix else text


def passed(name: str, message: str) -> Result:
    return Result(name, PASS, message)


def failed(name: str, message: str, fix: str) -> Result:
    return Result(name, FAIL, message, fix)


def warned(name: str, message: str, fix: str = "") -> Result:
    return Result(name, WARN, message, fix)


def skipped(name: str, what: str, permission: str) -> Result:
    """A check that could not read what it checks: it names the permission it lacked."""
    return Result(
        name,
        SKIP,
        f"not checked: {what} (you may not {permission})",
        f"ask for {permission} (kubectl auth can-i {_can_i(permission)}), or run doctor as someone who has it",
    )


def _can_i(permission: str) -> str:
    """The kubectl auth can-i arguments: 'list nodes (cluster-scoped)' -> 'list nodes',
    'get crds.x NAME' -> 'get crds.x/NAME', '... in namespace N' -> '... -n N'."""
    what, _, namespace = permission.replace(" (cluster-scoped)", "").partition(" in namespace ")
    verb, resource, *name = what.split()
    return f"{verb} {resource}" + (f"/{name[0]}" if name else "") + (f" -n {namespace}" if namespace else "")


def verdict(results: Sequence[Result], strict: bool = False) -> str:
    if any(r.status == FAIL or (strict and r.status == WARN) for r in results):
        return NOT_READY
    return NOT_CHECKED if any(r.status == SKIP for r in results) else READY


def failing(results: Sequence[Result], strict: bool = False) -> bool:
    return verdict(results, strict) != READY


def counts(results: Sequence[Result]) -> dict[str, int]:
    c = Counter(r.status for r in results)
    return {s: c.get(s, 0) for s in STATUSES}


def summary(results: Sequence[Result], strict: bool = False) -> str:
    n = counts(results)
    text = f"doctor: {verdict(results, strict)}: {n[PASS]} passed, {n[FAIL]} failed, {n[WARN]} warning(s)"
    if n[SKIP]:
        names = ", ".join(dict.fromkeys(r.name for r in results if r.status == SKIP))
        text += f", {n[SKIP]} not checked ({names}): doctor could not read what they check"
    return text


@dataclass(frozen=True)
class Header:
    server: str
    context: str
    namespace: str
    release: str
    values: str


def as_json(header: Header, results: Sequence[Result], strict: bool = False) -> str:
    doc = {
        "ok": not failing(results, strict),
        **asdict(header),
        "verdict": verdict(results, strict),
        "counts": counts(results),
        "checks": [asdict(r) for r in results],
    }
    return json.dumps(doc, indent=2)
