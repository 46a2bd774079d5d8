"""The chart's own programs (charts/nemo-rl-gke/files/*.py), importable from Python.

They run in the NeMo RL image from the run's ConfigMap, one folder holding them all, so a program
imports its siblings by their bare names (the launcher its launcher_*.py helpers); the generator
and the tests reuse them rather than keeping a second copy of their logic.
"""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from types import ModuleType

from generator.core.paths import CHART_DIR


@cache
def load(name: str) -> ModuleType:
    folder = str(CHART_DIR / "files")
    if folder not in sys.path:
        sys.path.append(folder)  # as in the pod, where the programs' folder is the script's own
    path = CHART_DIR / "files" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"nemo_rl_gke_chart_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module
