"""The one error type for bad input from the user (a file, an argument, a value)."""

from __future__ import annotations


class InputError(Exception):
    """Bad input from the user: reported as one line, exit status 2 (usage) or 1."""
