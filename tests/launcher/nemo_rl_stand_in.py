"""A stand-in for the NeMo RL code in a release's image (/opt/nemo-rl), written by the tests.

NeMo RL is not installable here (PyPI's `nemo-rl` is an empty placeholder), so the tests write the
parts the in-image check (charts/nemo-rl-gke/files/config_check.py) runs: the entry script and
`nemo_rl.utils.config`, `nemo_rl.algorithms.grpo.MasterConfig`, with each release's call
signatures and behaviour as read in its source (written anew here, not copied), over the real
hydra-core and omegaconf of the venv and the recipe configs the repository carries (vendor/):

- v0.5.0: examples/run_grpo_math.py registers the `mul` resolver at import; a parent's own
  `defaults:` resolve relative to the top recipe's folder; no `_override_`; MasterConfig is a
  TypedDict the script never calls.
- v0.6.0: examples/run_grpo.py; `register_omegaconf_resolvers()` (mul, div, max); defaults relative
  to each parent's folder; `_override_: true` replaces a section; MasterConfig a TypedDict.
- v0.7.0: as v0.6.0, and MasterConfig is a pydantic `BaseModel, extra="allow"` that main() calls
  as `MasterConfig(**config)`.
- main after v0.7.0 (2026-08-22, 7ea279a): as v0.7.0, plus the `add` resolver, and `???` values
  are kept while merging.

Sources (NVIDIA-NeMo/RL at each tag): examples/run_grpo.py `parse_args` and `main`
(examples/run_grpo_math.py at v0.5.0), nemo_rl/utils/config.py (`load_config_with_inheritance`,
`merge_with_override`, `parse_hydra_overrides`, `register_omegaconf_resolvers`),
nemo_rl/algorithms/grpo.py `MasterConfig`, nemo_rl/distributed/virtual_cluster.py `ClusterConfig`,
`GRPOConfig`. The pydantic model validates `cluster` and a part of `grpo` with their real field
types; the real one types every section. `init_ray` and `get_next_experiment_dir` (which the
real main() calls after the configuration) leave a file `CALLED-<name>` in the working folder, so
a test can tell that the check never reached them.
"""

from __future__ import annotations

import shutil
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENDOR = ROOT / "vendor" / "nemo-rl"


@dataclass(frozen=True)
class Flavour:
    script: str
    script_registers_mul: bool  # v0.5.0: OmegaConf.register_new_resolver("mul", ...) at import
    resolver_function: tuple[str, ...]  # what register_omegaconf_resolvers() registers; () if absent
    parent_relative: bool  # a parent's own defaults resolve relative to its folder (v0.6.0+)
    override_marker: bool  # `_override_: true` replaces a section (v0.6.0+)
    keep_missing: bool  # `???` values are kept while merging (main after v0.7.0)
    pydantic_master: bool  # MasterConfig is a pydantic model and main() calls it (v0.7.0+)


FLAVOURS = {
    "v0.5.0": Flavour("examples/run_grpo_math.py", True, (), False, False, False, False),
    "v0.6.0": Flavour("examples/run_grpo.py", False, ("mul", "div", "max"), True, True, False, False),
    "v0.7.0": Flavour("examples/run_grpo.py", False, ("mul", "div", "max"), True, True, False, True),
    "main": Flavour("examples/run_grpo.py", False, ("add", "mul", "div", "max"), True, True, True, True),
}

RESOLVERS = {"add": "lambda a, b: a + b", "mul": "lambda a, b: a * b", "div": "lambda a, b: a / b", "max": "lambda a, b: max(a, b)"}

TRACE = """
import os


def _trace(name):
    with open(f"CALLED-{name}", "a", encoding="utf-8") as f:
        f.write("called\\n")
"""


LOGGER = """

def get_next_experiment_dir(base_log_dir):
    _trace("get_next_experiment_dir")
    return base_log_dir
"""


def _config_module(f: Flavour) -> str:
    merge_skip = "        if OmegaConf.is_missing(child, key):\n            continue\n" if f.keep_missing else ""
    marker = (
        f"    for key in list(child.keys()):\n{merge_skip}"
        "        node = child[key]\n"
        "        if isinstance(node, DictConfig) and node.get('_override_', False):\n"
        "            node.pop('_override_')\n"
        "            if key in base:\n"
        "                base.pop(key)\n"
        if f.override_marker
        else ""
    )
    parent_base = "parent.parent" if f.parent_relative else "base_dir"
    resolvers = "".join(
        f"    if not OmegaConf.has_resolver({name!r}):\n        OmegaConf.register_new_resolver({name!r}, {RESOLVERS[name]})\n"
        for name in f.resolver_function
    )
    register = f"\n\ndef register_omegaconf_resolvers() -> None:\n{resolvers}" if f.resolver_function else ""
    return f"""
from pathlib import Path
from typing import Optional, Union, cast

from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, ListConfig, OmegaConf


def _merge(base, child):
{marker}    return cast(DictConfig, OmegaConf.merge(base, child))


def load_config_with_inheritance(config_path: Union[str, Path], base_dir: Optional[Union[str, Path]] = None) -> DictConfig:
    config_path = Path(config_path)
    base_dir = Path(base_dir) if base_dir is not None else config_path.parent
    config = OmegaConf.load(config_path)
    assert isinstance(config, DictConfig), "Config must be a Dictionary Config (List Config not supported)"
    if "defaults" in config:
        parents = config.pop("defaults")
        names = [str(parents)] if isinstance(parents, (str, Path)) else [str(p) for p in parents]
        merged = OmegaConf.create({{}})
        for name in names:
            parent = Path(name) if name.startswith("/") else base_dir / name
            merged = _merge(merged, load_config_with_inheritance(parent, {parent_base}))
        config = _merge(merged, config)
    return config


def load_config(config_path: Union[str, Path]) -> DictConfig:
    return load_config_with_inheritance(config_path)


class OverridesError(Exception):
    pass


def parse_hydra_overrides(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    try:
        OmegaConf.set_struct(cfg, True)
        parsed = OverridesParser.create().parse_overrides(overrides=overrides)
        ConfigLoaderImpl._apply_overrides_to_config(overrides=parsed, cfg=cfg)
        return cfg
    except Exception as e:
        raise OverridesError(f"Failed to parse Hydra overrides: {{str(e)}}") from e{register}
"""


GRPO_TYPED_DICT = """
from typing import Any, TypedDict


class MasterConfig(TypedDict):
    policy: Any
    loss_fn: Any
    env: dict[str, Any]
    data: Any
    grpo: Any
    logger: Any
    cluster: Any
    checkpointing: Any
"""

# pydantic needs typing_extensions' TypedDict before Python 3.12 (the images run 3.12 and 3.13).
GRPO_PYDANTIC = """
import sys
from typing import Any, Optional

from pydantic import BaseModel

if sys.version_info >= (3, 12):
    from typing import NotRequired, TypedDict
else:
    from typing_extensions import NotRequired, TypedDict


class ClusterConfig(TypedDict):
    gpus_per_node: int
    num_nodes: int
    master_port_range_low: NotRequired[int]
    master_port_range_high: NotRequired[int]
    segment_size: NotRequired[int | None]


class GRPOConfig(TypedDict):
    num_prompts_per_step: int
    num_generations_per_prompt: int
    max_num_steps: int
    seed: int


class MasterConfig(BaseModel, extra="allow"):
    policy: dict[str, Any]
    loss_fn: dict[str, Any]
    env: dict[str, Any]
    data: dict[str, Any]
    grpo: GRPOConfig
    logger: dict[str, Any]
    cluster: ClusterConfig
    checkpointing: dict[str, Any]
    data_plane: Optional[dict[str, Any]] = None
    on_policy_distillation: Optional[dict[str, Any]] = None
"""


def _entry_script(f: Flavour) -> str:
    config_names = "load_config, parse_hydra_overrides" + (", register_omegaconf_resolvers" if f.resolver_function else "")
    at_import = 'OmegaConf.register_new_resolver("mul", lambda a, b: a * b)\n' if f.script_registers_mul else ""
    first = "    register_omegaconf_resolvers()\n" if f.resolver_function else ""
    master = "    config = MasterConfig(**config)\n" if f.pydantic_master else ""
    log_dir = 'config.logger["log_dir"]' if f.pydantic_master else 'config["logger"]["log_dir"]'
    return f"""
import argparse
import os

from omegaconf import OmegaConf

from nemo_rl.algorithms.grpo import MasterConfig
from nemo_rl.distributed.virtual_cluster import init_ray
from nemo_rl.utils.config import {config_names}
from nemo_rl.utils.logger import get_next_experiment_dir

{at_import}

def parse_args():
    parser = argparse.ArgumentParser(description="Run GRPO training with configuration")
    parser.add_argument("--config", type=str, default=None, help="Path to YAML config file")
    args, overrides = parser.parse_known_args()
    return args, overrides


def main():
{first}    args, overrides = parse_args()
    config = load_config(args.config)
    if overrides:
        config = parse_hydra_overrides(config, overrides)
    config = OmegaConf.to_container(config, resolve=True)
{master}    get_next_experiment_dir({log_dir})
    init_ray()
    print("stand-in NeMo RL: the configuration loaded; training would start here", flush=True)


if __name__ == "__main__":
    main()
"""


def write(code_dir: Path, flavour: str, configs_from: str | None = None) -> Path:
    """A NeMo RL code folder as the image holds it: the entry script, the stand-in package and the
    recipe configs of release `configs_from` (vendor/nemo-rl/<tag>/examples/configs), if given."""
    f = FLAVOURS[flavour]
    files = {
        f.script: _entry_script(f),
        "nemo_rl/__init__.py": "",
        "nemo_rl/utils/__init__.py": "",
        "nemo_rl/utils/config.py": _config_module(f),
        "nemo_rl/utils/logger.py": TRACE + LOGGER,
        "nemo_rl/algorithms/__init__.py": "",
        "nemo_rl/algorithms/grpo.py": GRPO_PYDANTIC if f.pydantic_master else GRPO_TYPED_DICT,
        "nemo_rl/distributed/__init__.py": "",
        "nemo_rl/distributed/virtual_cluster.py": TRACE + "\n\ndef init_ray(log_dir=None):\n    _trace('init_ray')\n",
    }
    for rel, text in files.items():
        path = code_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    if configs_from is not None:
        shutil.copytree(VENDOR / configs_from / "examples" / "configs", code_dir / "examples" / "configs", dirs_exist_ok=True)
    return code_dir


def called(code_dir: Path) -> list[str]:
    """Which of init_ray and get_next_experiment_dir ran in `code_dir`."""
    return sorted(p.name.removeprefix("CALLED-") for p in code_dir.glob("CALLED-*"))
