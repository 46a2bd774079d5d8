"""Facts read from each release's own start-up code (vendor/nemo-rl-src/<tag>/, NVIDIA-NeMo/RL at
the release's commit; read with `ast`, never imported), once per process:
- the keyword arguments nemo_rl/models/generation/vllm/vllm_worker.py passes to vLLM itself in
  `llm_kwargs = dict(..., **vllm_kwargs)`: a key of policy.generation.vllm_kwargs among them makes
  `dict()` raise "got multiple values for keyword argument" when the vLLM worker starts;
- the dataset names nemo_rl/data/datasets/response_datasets/__init__.py load_response_dataset knows
  (v0.6.0+: DATASET_REGISTRY's keys; v0.5.0: the names it compares dataset_name with)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from generator.vendored import VENDOR

VLLM_WORKER = "nemo_rl/models/generation/vllm/vllm_worker.py"
RESPONSE_DATASETS = "nemo_rl/data/datasets/response_datasets/__init__.py"


def _tree(tag: str, path: str) -> ast.Module | None:
    file = Path(VENDOR) / "nemo-rl-src" / tag / path
    return ast.parse(file.read_text()) if file.is_file() else None


@cache
def vllm_explicit_kwargs(tag: str) -> frozenset[str]:
    """The keywords vllm_worker.py gives vLLM itself next to **vllm_kwargs; empty when not carried."""
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


@cache
def registered_datasets(tag: str) -> frozenset[str]:
    """The dataset names load_response_dataset accepts as built in; empty when not carried."""
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
