"""What every rule needs to know about one values document, computed once."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from generator.gke.profiles import AcceleratorProfile, profile
from generator.nemo_rl.recipe_config import Override, OverrideError, grpo_override_args, winning
from generator.nemo_rl.releases import RELEASES, NemoRlRelease
from generator.values.worker_groups import worker_nodes


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
        entry = self.overrides.get(key)
        return default if entry is None else entry.value

    @property
    def worker_nodes(self) -> int:
        return worker_nodes(g["replicas"] for g in self.values["workerGroups"])

    @property
    def gpus_per_node(self) -> int:
        return self.values["accelerator"]["gpusPerNode"]

    @property
    def rdma(self) -> bool:
        return self.values["network"]["mode"] == "rdma"

    @property
    def mount(self) -> str:
        return self.values["storage"]["mountPath"].rstrip("/") or "/"
