"""`python -m generator rehearse`: placeholder until the rehearsal lands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_rehearse_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("values", type=Path, metavar="VALUES_FILE")


def run(args: argparse.Namespace) -> int:
    print("error: rehearse is not implemented yet", file=sys.stderr)
    return 2
