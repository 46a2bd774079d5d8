"""doctor's results and how they are printed: one line per check in text, or one JSON document.

The JSON document's keys are stable (docs/doctor-and-status.md): `ok`, `server`, `context`,
`namespace`, `release`, `values`, `counts` (`pass`, `fail`, `warn`) and `checks`, a list of
{`name`, `status`, `message`, `fix`}.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass

PASS, FAIL, WARN = "pass", "fail", "warn"
STATUSES = (PASS, FAIL, WARN)


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


def failing(results: Sequence[Result], strict: bool = False) -> bool:
    return any(r.status == FAIL or (strict and r.status == WARN) for r in results)


def counts(results: Sequence[Result]) -> dict[str, int]:
    c = Counter(r.status for r in results)
    return {s: c.get(s, 0) for s in STATUSES}


def summary(results: Sequence[Result], strict: bool = False) -> str:
    n = counts(results)
    verdict = "not ready" if failing(results, strict) else "ready"
    return f"doctor: {verdict}: {n[PASS]} passed, {n[FAIL]} failed, {n[WARN]} warning(s)"


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
        "counts": counts(results),
        "checks": [asdict(r) for r in results],
    }
    return json.dumps(doc, indent=2)
