"""Images: the NeMo RL image and the fluent-bit sidecar's, as the kubelet parses their references,
and what makes a pod never start its container.

The kubelet parses `repository:tag` with the reference grammar of github.com/distribution/reference
(v0.5.0: reference.go, the grammar at its top; normalize.go splitDockerDomain, which takes the first
component as the registry when it holds '.' or ':', is 'localhost', or is not lower case) and
refuses what does not parse (the pod's InvalidImageName). `pullPolicy: Never` starts only an image
already on the node (Kubernetes "Images", imagePullPolicy: ErrImageNeverPull otherwise)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from generator.validate.findings import Finding, error, warning
from generator.validate.rules.context import Context

GRAMMAR = "github.com/distribution/reference v0.5.0 reference.go"
# domain-component and path-component of the grammar, written from its definitions
DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
DOMAIN = re.compile(rf"{DOMAIN_COMPONENT}(?:\.{DOMAIN_COMPONENT})*(?::[0-9]+)?|\[[0-9a-fA-F:.]+\](?::[0-9]+)?")
PATH_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
NAME_MAX = 255  # reference.go NameTotalLengthMax
# Images users mistake for NeMo RL's: the NeMo framework, Ray's, PyTorch's, vLLM's, CUDA's, Triton's.
OTHER_IMAGES = {
    "nemo": "the NeMo framework image (not NeMo RL: no examples/run_grpo.py)",
    "ray": "Ray's image (no NeMo RL)",
    "ray-ml": "Ray's image (no NeMo RL)",
    "pytorch": "the PyTorch image (no NeMo RL)",
    "vllm-openai": "vLLM's server image (no NeMo RL)",
    "cuda": "a CUDA base image (no NeMo RL)",
    "tritonserver": "Triton's image (no NeMo RL)",
}


def reference_problem(repository: str) -> str | None:
    """Why the kubelet cannot parse `repository` as the name part of an image reference, or None."""
    if len(repository) > NAME_MAX:
        return f"longer than the grammar's {NAME_MAX} characters"
    if "://" in repository:
        return "a URL: an image reference has no scheme"
    parts = repository.split("/")
    first = parts[0]
    if len(parts) > 1 and (any(c in first for c in ".:") or first == "localhost" or first.lower() != first):
        if not DOMAIN.fullmatch(first):
            return f"{first!r} is not a registry host[:port]"
        if not any(c in first for c in ".:") and first != "localhost":
            return f"{first!r} has upper case, so it is read as a registry host, which has no such name; repository paths are lower case"
        parts = parts[1:]
    for part in parts:
        if ":" in part or "@" in part:
            return f"{part!r} holds a tag or digest: the tag goes in its own key"
        if part == "":
            return "an empty path component ('//' or a trailing '/')"
        if part.lower() != part:
            return f"{part!r} has upper case: repository paths are lower case"
        if not PATH_COMPONENT.fullmatch(part):
            return f"{part!r} is not a path component (lower-case letters and digits joined by '.', '_', '__' or '-')"
    return None


def _reference(where: str, repository: str) -> Iterator[Finding]:
    why = reference_problem(repository)
    if why is not None:
        yield error(
            where, f"{repository}: {why}; the kubelet refuses the image (InvalidImageName, {GRAMMAR})", "e.g. nvcr.io/nvidia/nemo-rl"
        )


def _nemo_rl(repository: str) -> Iterator[Finding]:
    last = repository.rsplit("/", 1)[-1]
    if last in OTHER_IMAGES:
        yield error(
            "image.repository",
            f"{repository} is {OTHER_IMAGES[last]}: the launcher runs NeMo RL's GRPO script from grpo.codeDir",
            "use nvcr.io/nvidia/nemo-rl or a mirror of it",
        )
    elif "nemo-rl" not in last and "nemo_rl" not in last:
        yield warning(
            "image.repository",
            f"{repository} is not named nemo-rl: validate cannot tell whether it holds NeMo RL at image.tag's release",
            "use nvcr.io/nvidia/nemo-rl or a mirror of it",
        )


def check(ctx: Context) -> Iterator[Finding]:
    image = ctx.values["image"]
    yield from _reference("image.repository", image["repository"])
    if reference_problem(image["repository"]) is None:
        yield from _nemo_rl(image["repository"])
    preload = (image.get("preload") or {}).get("diskImage")
    if image["pullPolicy"] == "Never" and not preload:
        yield error(
            "image.pullPolicy",
            "Never: the kubelet starts only an image already on the node (ErrImageNeverPull); new GPU nodes have none",
            "use IfNotPresent, or preload the image (image.preload.diskImage)",
        )
    sidecar = (ctx.values.get("logging") or {}).get("fluentBit") or {}
    fluent = sidecar.get("image") or {}
    if sidecar.get("enabled") and fluent:
        yield from _reference("logging.fluentBit.image.repository", str(fluent.get("repository", "")))
        if fluent.get("pullPolicy") == "Never":
            yield error(
                "logging.fluentBit.image.pullPolicy",
                "Never: the sidecar's image is on no node (image preloading carries the NeMo RL image only);"
                " every Ray pod stays in ErrImageNeverPull",
                "use IfNotPresent",
            )
