"""The chart's programs (files/*.py) run with the image's Python: 3.12 in v0.5.0's image, 3.13.13 in
v0.6.0's and v0.7.0's (docker/Dockerfile `ARG PYTHON_VERSION` at each tag), 3.13.14 per v0.8.0's
release notes; this repository's own tools need 3.11. So they stay within Python 3.11's grammar and
import only the standard library as 3.13 still has it (PEP 594 removed these modules in 3.13),
their siblings, and what every image has: `ray`, and Hugging Face's `datasets` and
`huggingface_hub` for the preparation Job's downloads (the in-image check loads NeMo RL's code by
path, not by an import statement)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

FILES = Path(__file__).resolve().parents[2] / "charts" / "nemo-rl-gke" / "files"
PROGRAMS = sorted(FILES.glob("*.py"))
REMOVED_IN_3_13 = {
    "aifc", "audioop", "cgi", "cgitb", "chunk", "crypt", "imghdr", "lib2to3", "mailcap", "msilib", "nis",
    "nntplib", "ossaudiodev", "pipes", "sndhdr", "spwd", "sunau", "telnetlib", "uu", "xdrlib",
}  # fmt: skip
ALLOWED_OTHERS = {"ray", "datasets", "huggingface_hub"}  # in every image; prepare.py's downloads


def imported(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.name)
def test_program_is_python_3_11_to_3_13(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path), feature_version=(3, 11))
    names = imported(tree) - {"__future__"}
    siblings = {p.stem for p in PROGRAMS}
    assert not names & REMOVED_IN_3_13
    assert names <= set(sys.stdlib_module_names) | siblings | ALLOWED_OTHERS, names - set(sys.stdlib_module_names) - siblings


def test_there_are_programs_to_check() -> None:
    assert {"launcher.py", "prepare.py", "config_check.py"} <= {p.name for p in PROGRAMS}
