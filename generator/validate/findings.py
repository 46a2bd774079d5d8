"""One problem found in a values file: where, what, and how to fix it."""

from __future__ import annotations

from dataclasses import asdict, dataclass

ERROR = "error"
WARNING = "warning"


@dataclass(frozen=True)
class Finding:
    key: str  # dotted key path, e.g. workerGroups[0].replicas
    message: str  # what is wrong
    fix: str = ""  # how to fix it
    level: str = ERROR

    def line(self, source: str) -> str:
        text = f"{source}: {self.key}: {self.message}"
        if self.fix:
            text += f" - {self.fix}"
        return text if self.level == ERROR else f"{text} (warning)"

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def error(key: str, message: str, fix: str = "") -> Finding:
    return Finding(key, message, fix, ERROR)


def warning(key: str, message: str, fix: str = "") -> Finding:
    return Finding(key, message, fix, WARNING)


def has_errors(findings: list[Finding], strict: bool = False) -> bool:
    return any(f.level == ERROR or strict for f in findings)
