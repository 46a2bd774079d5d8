"""What every rule needs to know about one values document, computed once."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from generator.gke.profiles import AcceleratorProfile, profile
from generator.nemo_rl.placement import (
    COLOCATED,
    GENERATION_GPUS_PER_NODE,
    GENERATION_NODES,
    GPUS_PER_NODE,
    NUM_NODES,
    Placement,
    placement,
)
from generator.nemo_rl.recipe_config import (
    Override,
    OverrideError,
    check_overrides,
    grpo_override_args,
    is_interpolation,
    winning,
)
from generator.nemo_rl.releases import RELEASES, NemoRlRelease
from generator.values.worker_groups import worker_nodes
from generator.vendored import MissingDataError, load_release_recipe

if TYPE_CHECKING:
    from omegaconf import DictConfig

_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\}")
_SLOW = object()  # what only omegaconf can say


@dataclass(frozen=True)
class Entry:
    index: int
    prefix: str  # "", "+" or "++"
    value: Any


def override_key(key: str) -> str:
    """How findings name one NeMo RL override."""
    return f"grpo.overrides[{key}]"


@dataclass
class Context:
    values: dict[str, Any]
    release_name: str = "nemo-rl"
    syntax_errors: list[tuple[str, str, str]] = field(default_factory=list)  # key, message, fix
    set_file_keys: frozenset[str] = frozenset()  # keys given by `--set-file` (a file's content at install time)

    @cached_property
    def profile(self) -> AcceleratorProfile:
        return profile(self.values["accelerator"]["type"])

    @cached_property
    def release(self) -> NemoRlRelease | None:
        return RELEASES.get(self.values["image"]["tag"])

    @property
    def grpo(self) -> dict[str, Any]:
        return self.values["grpo"]

    @cached_property
    def overrides(self) -> dict[str, Entry]:
        """grpo.overrides then grpo.extraOverrides, later entries winning, as NeMo RL applies them."""
        parsed: list[tuple[int, Override]] = []
        for i, (where, arg) in enumerate(grpo_override_args(self.grpo)):
            try:
                parsed.append((i, Override.parse(arg)))
            except OverrideError as e:
                self.syntax_errors.append((where, str(e), e.fix))
        return {key: Entry(i, ov.prefix, ov.value) for key, (i, ov) in winning(parsed).items()}

    def get(self, key: str, default: Any = None) -> Any:
        """The value an override gives `key` (the last one wins), else `default`; see `setting` for
        the value NeMo RL runs with."""
        entry = self.overrides.get(key)
        if entry is None:
            return default
        if is_interpolation(entry.value):  # what omegaconf resolves it to in the run's config
            return self.setting(key)
        return entry.value

    @cached_property
    def recipe_check(self) -> tuple[dict[str, Any], list[tuple[str, str, OverrideError]]] | None:
        """check_overrides of grpo.overrides then grpo.extraOverrides over the chosen release's recipe
        (the config with every good override applied, the problems), made once for every rule;
        None when the repository does not carry the recipe (the recipe rules report that)."""
        try:
            base = load_release_recipe(self.values["image"]["tag"], self.grpo["recipe"])
        except MissingDataError:
            return None
        return check_overrides(base, grpo_override_args(self.grpo))

    @cached_property
    def run_config(self) -> DictConfig | None:
        """The chosen release's recipe merged over its `defaults:` chain with every good override
        applied, as NeMo RL runs it; None when the repository does not carry it."""
        from omegaconf import OmegaConf

        return None if self.recipe_check is None else OmegaConf.create(self.recipe_check[0])

    def get_int(self, key: str, default: int | None = None) -> int | None:
        """An override's whole-number value (the last one wins), else `default`; None when not a whole number."""
        value = self.get(key, default)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @cached_property
    def placement(self) -> Placement | None:
        """The GPU split NeMo RL's grpo.setup makes from the overrides (placement.py), or None when
        cluster.num_nodes or cluster.gpus_per_node is not a positive whole number."""
        nodes, gpn = self.get_int(NUM_NODES), self.get_int(GPUS_PER_NODE)
        if not nodes or not gpn or nodes < 1 or gpn < 1:
            return None
        return placement(
            nodes,
            gpn,
            colocated=self.get(COLOCATED) is not False,
            generation_nodes=self.get_int(GENERATION_NODES),
            generation_gpus_per_node=self.get_int(GENERATION_GPUS_PER_NODE),
            backend=str(self.get("policy.generation.backend", "vllm")),
        )

    def setting(self, key: str) -> Any:
        """The value NeMo RL runs with for a dotted key (the recipe's unless an override sets it), or None."""
        if self.recipe_check is None:
            return None
        value = self._plain_setting(key, 0)
        if value is not _SLOW:
            return value
        from omegaconf import OmegaConf

        try:
            return OmegaConf.select(self.run_config, key, default=None)
        except Exception:  # an interpolation NeMo RL resolves with its own resolvers
            return None

    def section(self, key: str) -> Any:
        """`setting`, with a section as plain Python as written (its interpolations unresolved:
        OmegaConf.to_container(..., resolve=False) of what omegaconf selects)."""
        value = self._plain_setting(key, 0, sections=True)
        if value is not _SLOW:
            return value
        from omegaconf import DictConfig, ListConfig, OmegaConf

        value = self.setting(key)
        return OmegaConf.to_container(value, resolve=False) if isinstance(value, DictConfig | ListConfig) else value

    def _plain_setting(self, key: str, depth: int, sections: bool = False) -> Any:
        """`setting` without omegaconf where the answer is plain: a missing key (None), a leaf
        that is not an interpolation, or one that names another key (`${a.b}`, followed). _SLOW
        for the rest (sections, which omegaconf returns as its own containers; other interpolations);
        a test holds it to OmegaConf.select."""
        if self.recipe_check is None or depth > 8 or not _DOTTED.fullmatch(key):
            return _SLOW
        node: Any = self.recipe_check[0]
        for part in key.split("."):
            if not isinstance(node, dict):
                return _SLOW
            if part not in node:
                return None
            node = node[part]
        if isinstance(node, dict | list):
            return copy.deepcopy(node) if sections else _SLOW
        if node == "???":  # omegaconf's missing value
            return _SLOW
        if isinstance(node, str) and "${" in node:
            m = _REFERENCE.fullmatch(node)
            return self._plain_setting(m.group(1), depth + 1, sections) if m else _SLOW
        return node

    def where(self, key: str) -> str:
        """How findings name the values entry that sets a NeMo RL key: the list of the override that
        wins, or grpo.overrides when the value is the recipe's."""
        entry = self.overrides.get(key)
        given = len(self.grpo.get("overrides") or [])
        return f"grpo.extraOverrides[{key}]" if entry is not None and entry.index >= given else override_key(key)

    @property
    def worker_nodes(self) -> int:
        return worker_nodes(g["replicas"] for g in self.values["workerGroups"])

    @property
    def gpus_per_node(self) -> int:
        """The machine's GPUs (the accelerator profile's), not accelerator.gpusPerNode: a changed
        gpusPerNode is one mistake with one fix (rules/accelerator.py: set it back), and the rules
        that count GPUs judge the overrides against the machine, so no second finding asks for the
        opposite (cluster.gpus_per_node set to the wrong count)."""
        return self.profile.gpus_per_node

    @property
    def rdma(self) -> bool:
        """GKE multi-networking RDMA (network.mode rdma): the chart renders the interfaces and Networks."""
        return self.values["network"]["mode"] == "rdma"

    @property
    def gib(self) -> bool:
        """The workers have RDMA NICs and NCCL uses gIB (network.mode rdma or dranet)."""
        return self.values["network"]["mode"] in ("rdma", "dranet")

    @property
    def mount(self) -> str:
        return self.values["storage"]["mountPath"].rstrip("/") or "/"
