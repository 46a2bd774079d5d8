"""Validate one values document: the schema first, then (when the shape is right) the rules."""

from __future__ import annotations

from typing import Any

from .checks import run_checks
from .findings import ERROR, Finding, error
from .schema import iter_errors


def validate_values(doc: Any, release_name: str = "nemo-rl") -> list[Finding]:
    schema = [error(e.path, e.message, "see the chart's values table") for e in iter_errors(doc)]
    if schema:
        return schema
    return run_checks(doc, release_name)


def has_errors(findings: list[Finding], strict: bool = False) -> bool:
    return any(f.level == ERROR or strict for f in findings)
