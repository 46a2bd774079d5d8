"""Arguments several subcommands share: the Helm release name they check or render for."""

from __future__ import annotations

import argparse
from typing import Any

from generator.core.names import HELM_RELEASE_MAX, HELM_RELEASE_NAME


def release_name(text: str) -> str:
    """argparse type of --release: what Helm accepts as a release name."""
    if len(text) > HELM_RELEASE_MAX or not HELM_RELEASE_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"not a Helm release name: {text!r}; use lowercase letters, digits and '-', starting and "
            "ending with a letter or digit, at most 53 characters"
        )
    return text


def add_release_name(p: argparse.ArgumentParser, help_text: str, **kw: Any) -> None:
    """The Helm release name (`helm install NAME`): --release-name; --release is its old spelling,
    kept so existing command lines work (in `generate`, --release is the NeMo RL release)."""
    p.add_argument("--release-name", "--release", dest="release", default="nemo-rl", metavar="NAME", help=help_text, **kw)
