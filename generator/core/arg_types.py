"""argparse types shared by the subcommands."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def int_range(flag: str, minimum: int, maximum: int) -> Callable[[str], int]:
    """A whole number in minimum..maximum; the error names the flag."""

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be a whole number, got {text!r}") from None
        if not minimum <= n <= maximum:
            raise argparse.ArgumentTypeError(f"{flag} must be between {minimum} and {maximum}, got {n}")
        return n

    return parse
