"""Facts read from each release's own start-up code (vendor/nemo-rl-src/<tag>/, NVIDIA-NeMo/RL at
the release's commit; read with `ast`, never imported), once by scripts/sync.sh into
release_facts.json (parsing the two files cost every `validate` and the generator tens of ms); a tag the
table lacks is read from its source:
- the keyword arguments nemo_rl/models/generation/vllm/vllm_worker.py passes to vLLM itself in
  `llm_kwargs = dict(..., **vllm_kwargs)`: a key of policy.generation.vllm_kwargs among them makes
  `dict()` raise "got multiple values for keyword argument" when the vLLM worker starts;
- the dataset names nemo_rl/data/datasets/response_datasets/__init__.py load_response_dataset knows
  (v0.6.0+: DATASET_REGISTRY's keys; v0.5.0: the names it compares dataset_name with)."""

from __future__ import annotations

import ast
import json
from functools import cache
from pathlib import Path

from generator.vendored import VENDOR

FACTS = Path(__file__).with_name("release_facts.json")

VLLM_WORKER = "nemo_rl/models/generation/vllm/vllm_worker.py"
RESPONSE_DATASETS = "nemo_rl/data/datasets/response_datasets/__init__.py"


def _tree(tag: str, path: str) -> ast.Module | None:
    file = Path(VENDOR) / "nemo-rl-src" / tag / path
    return ast.parse(file.read_text()) if file.is_file() else None


@cache
def _facts() -> dict[str, dict[str, list[str]]]:
    return json.loads(FACTS.read_text(encoding="utf-8")) if FACTS.is_file() else {}


def facts_text() -> str:
    """FACTS' text, from every carried release's source (scripts/sync.sh)."""
    tags = sorted(p.name for p in (Path(VENDOR) / "nemo-rl-src").iterdir() if p.is_dir())
    out = {
        t: {"registered_datasets": sorted(read_registered_datasets(t)), "vllm_explicit_kwargs": sorted(read_vllm_explicit_kwargs(t))}
        for t in tags
    }
    return json.dumps(out, indent=1, sort_keys=True) + "\n"


@cache
def vllm_explicit_kwargs(tag: str) -> frozenset[str]:
    """The keywords vllm_worker.py gives vLLM itself next to **vllm_kwargs; empty when not carried."""
    known = _facts().get(tag)
    return frozenset(known["vllm_explicit_kwargs"]) if known is not None else read_vllm_explicit_kwargs(tag)


@cache
def registered_datasets(tag: str) -> frozenset[str]:
    """The dataset names load_response_dataset accepts as built in; empty when not carried."""
    known = _facts().get(tag)
    return frozenset(known["registered_datasets"]) if known is not None else read_registered_datasets(tag)


def read_vllm_explicit_kwargs(tag: str) -> frozenset[str]:
    """vllm_explicit_kwargs, read from the release's vllm_worker.py."""
    tree = _tree(tag, VLLM_WORKER)
    found: set[str] = set()
    for node in ast.walk(tree) if tree is not None else ():
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "llm_kwargs" for t in node.targets)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id == "dict"
        ):
            found |= {k.arg for k in node.value.keywords if k.arg is not None}
    return frozenset(found)


def read_registered_datasets(tag: str) -> frozenset[str]:
    """registered_datasets, read from the release's response_datasets/__init__.py."""
    tree = _tree(tag, RESPONSE_DATASETS)
    names: set[str] = set()
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "DATASET_REGISTRY" for t in node.targets):
            if isinstance(node.value, ast.Dict):
                names |= {k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        elif (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Name)
            and node.left.id == "dataset_name"
            and all(isinstance(op, ast.Eq) for op in node.ops)
        ):
            names |= {c.value for c in node.comparators if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    return frozenset(names)
