"""Every `assert` and `raise` on NeMo RL's GRPO start-up path, per supported release, read from the
release's own source carried under vendor/nemo-rl-src/<tag>/ (generator/vendored.py).

    python -m generator.nemo_rl.asserts            rewrite generator/nemo_rl/startup_asserts.json
    python -m generator.nemo_rl.asserts --check    exit 1 when the committed list differs
    python -m generator.nemo_rl.asserts stage GIT_DIR FOLDER
                                                   copy each release's start-up files out of a git
                                                   mirror of NVIDIA-NeMo/RL into FOLDER/nemo-rl-src/<tag>/,
                                                   for `scripts/vendor.sh refresh FOLDER`

The start-up path is what `examples/run_grpo.py` (`examples/run_grpo_math.py` at v0.5.0) runs
before its first training step and at its first checkpoint: the config loading, the tokenizer and
generation config, the GSM8K data and math environment, `grpo.setup` (virtual clusters, the
training policy and its workers, vLLM and its workers, the loss function, the checkpoint manager,
the logger) and the checkpoint code. `STARTUP_FILES` lists the files; every `assert` and `raise`
in them is listed, those of functions that run only later too, so that a decision table
(generator/validate/assert_decisions.py) says of each whether a validate rule covers it or why not.

Each entry has a key that does not move with line numbers: the file, the enclosing function
(`Class.method`, nested functions joined by `.`) and the statement's text as `ast.unparse` writes
it (an assert's condition; a raise's exception), with `#2`, `#3` for repeats in one function.
Standard library only.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from generator.core.paths import ROOT
from generator.nemo_rl.releases import RELEASES

SRC = ROOT / "vendor" / "nemo-rl-src"
TABLE = Path(__file__).with_name("startup_asserts.json")

# The files of the start-up path; a path absent at a release (moved or not yet written) is skipped
# there, and the release's own list must then hold its counterpart (ENTRY, LOSS, DATA below).
ENTRY = {"v0.5.0": "examples/run_grpo_math.py"}  # v0.6.0+: examples/run_grpo.py
COMMON = (
    # configuration: load_config, parse_hydra_overrides, the resolvers
    "nemo_rl/utils/config.py",
    # get_next_experiment_dir and Logger (the log folder, TensorBoard, W&B)
    "nemo_rl/utils/logger.py",
    # get_tokenizer, set_seed
    "nemo_rl/algorithms/utils.py",
    # configure_generation_config
    "nemo_rl/models/generation/__init__.py",
    # setup, and grpo_train up to its first step and first checkpoint
    "nemo_rl/algorithms/grpo.py",
    # init_ray, RayVirtualCluster and its placement groups
    "nemo_rl/distributed/virtual_cluster.py",
    # RayWorkerBuilder and RayWorkerGroup (training and vLLM workers)
    "nemo_rl/distributed/worker_groups.py",
    # the per-node virtualenvs the worker groups build, and the Python each Ray actor runs
    "nemo_rl/utils/venvs.py",
    "nemo_rl/distributed/ray_actor_environment_registry.py",
    # Policy.__init__ and its workers (v1 for the Gemma 3 recipe, v2 for the others)
    "nemo_rl/models/policy/lm_policy.py",
    "nemo_rl/models/policy/workers/dtensor_policy_worker.py",
    "nemo_rl/models/policy/workers/dtensor_policy_worker_v2.py",
    "nemo_rl/models/automodel/setup.py",
    # VllmGeneration and its workers
    "nemo_rl/models/generation/vllm/vllm_generation.py",
    "nemo_rl/models/generation/vllm/vllm_worker.py",
    # ClippedPGLossFn.__init__
    "nemo_rl/algorithms/loss_functions.py",
    "nemo_rl/algorithms/loss/loss_functions.py",
    # the GSM8K data: v0.5.0 reads JSONL files through ResponseDataset, v0.6.0+ the gsm8k dataset
    "nemo_rl/data/utils.py",
    "nemo_rl/data/datasets/response_datasets/__init__.py",
    "nemo_rl/data/datasets/response_datasets/response_dataset.py",
    "nemo_rl/data/datasets/response_datasets/gsm8k.py",
    "nemo_rl/data/datasets/raw_dataset.py",
    # the math environment
    "nemo_rl/environments/utils.py",
    "nemo_rl/environments/math_environment.py",
    # CheckpointManager: the resume paths and the first save
    "nemo_rl/utils/checkpoint.py",
)


def entry_script(tag: str) -> str:
    return ENTRY.get(tag, "examples/run_grpo.py")


def wanted_files(tag: str) -> tuple[str, ...]:
    """Every path the start-up list names for a release (the entry script first)."""
    return (entry_script(tag), *COMMON)


def startup_files(tag: str, root: Path | None = None) -> tuple[str, ...]:
    """The start-up files the repository carries for a release."""
    base = (root or SRC) / tag
    return tuple(p for p in wanted_files(tag) if (base / p).is_file())


# --- listing -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Found:
    key: str  # file:function:statement, stable across line moves
    file: str
    line: int
    function: str  # Class.method, outer.inner, or <module>
    kind: str  # "assert" or "raise"
    text: str  # an assert's condition; a raise's exception ("" for a bare re-raise)
    message: str  # an assert's message ("" when it has none)
    guard: str  # a raise's innermost enclosing `if` condition ("" when none)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _unparse(node: ast.AST | None) -> str:
    return "" if node is None else _one_line(ast.unparse(node))


class _Lister(ast.NodeVisitor):
    def __init__(self, file: str) -> None:
        self.file = file
        self.scope: list[str] = []
        self.guards: list[str] = []
        self.found: list[tuple[int, str, str, str, str, str]] = []

    def _scoped(self, node: ast.AST, name: str) -> None:
        self.scope.append(name)
        saved, self.guards = self.guards, []
        self.generic_visit(node)
        self.guards = saved
        self.scope.pop()

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._scoped(node, node.name)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._scoped(node, node.name)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._scoped(node, node.name)

    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)
        test = _unparse(node.test)
        self.guards.append(test)
        for stmt in node.body:
            self.visit(stmt)
        self.guards[-1] = f"not ({test})"
        for stmt in node.orelse:
            self.visit(stmt)
        self.guards.pop()

    def _function(self) -> str:
        return ".".join(self.scope) or "<module>"

    def visit_Assert(self, node: ast.Assert) -> None:
        self.found.append((node.lineno, self._function(), "assert", _unparse(node.test), _unparse(node.msg), ""))
        self.generic_visit(node)

    def visit_Raise(self, node: ast.Raise) -> None:
        guard = self.guards[-1] if self.guards else ""
        self.found.append((node.lineno, self._function(), "raise", _unparse(node.exc), "", guard))
        self.generic_visit(node)


def list_source(file: str, source: str) -> list[Found]:
    """Every assert and raise of one file's source, in line order, each with its stable key."""
    lister = _Lister(file)
    lister.visit(ast.parse(source, filename=file))
    seen: dict[str, int] = {}
    out = []
    for line, function, kind, text, message, guard in sorted(lister.found):
        base = f"{file}:{function}:{kind} {text}".rstrip()
        seen[base] = seen.get(base, 0) + 1
        key = base if seen[base] == 1 else f"{base} #{seen[base]}"
        out.append(Found(key, file, line, function, kind, text, message, guard))
    return out


def list_release(tag: str, root: Path | None = None) -> list[Found]:
    base = (root or SRC) / tag
    return [f for p in startup_files(tag, root) for f in list_source(p, (base / p).read_text(encoding="utf-8"))]


def table(root: Path | None = None) -> dict[str, dict]:
    """The committed table: per release its commit, its files and every assert and raise in them."""
    return {
        tag: {
            "commit": rel.commit,
            "files": list(startup_files(tag, root)),
            "asserts": [asdict(f) for f in list_release(tag, root)],
        }
        for tag, rel in RELEASES.items()
    }


def table_text(root: Path | None = None) -> str:
    return json.dumps(table(root), indent=1, ensure_ascii=False) + "\n"


def load_table() -> dict[str, list[Found]]:
    """The committed table, per release."""
    data = json.loads(TABLE.read_text(encoding="utf-8"))
    return {tag: [Found(**f) for f in entry["asserts"]] for tag, entry in data.items()}


# --- staging a refresh folder from a git mirror ----------------------------------------------------


def _git_show(git_dir: Path, commit: str, path: str) -> bytes | None:
    proc = subprocess.run(["git", f"--git-dir={git_dir}", "show", f"{commit}:{path}"], capture_output=True, check=False)
    return proc.stdout if proc.returncode == 0 else None


def stage(git_dir: Path, folder: Path) -> Iterator[str]:
    """Copy each release's start-up files, byte for byte at the release's commit, into
    FOLDER/nemo-rl-src/<tag>/<path>."""
    for tag, rel in RELEASES.items():
        n = 0
        for path in wanted_files(tag):
            data = _git_show(git_dir, rel.commit, path)
            if data is None:
                continue
            dest = folder / "nemo-rl-src" / tag / path
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
            n += 1
        yield f"{folder / 'nemo-rl-src' / tag}: {n} files at {rel.commit}"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scripts/nemo-rl-asserts.sh", description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 when the committed table differs from the carried source")
    sub = p.add_subparsers(dest="command")
    s = sub.add_parser("stage", help="copy the start-up files of every release out of a git mirror of NVIDIA-NeMo/RL")
    s.add_argument("git_dir", type=Path)
    s.add_argument("folder", type=Path)
    args = p.parse_args(argv)
    if args.command == "stage":
        for line in stage(args.git_dir, args.folder):
            print(line)
        return 0
    text = table_text()
    name = TABLE.relative_to(ROOT)
    if args.check:
        if not TABLE.is_file() or TABLE.read_text(encoding="utf-8") != text:
            print(f"error: {name}: differs from the source under vendor/nemo-rl-src/ - run scripts/nemo-rl-asserts.sh", file=sys.stderr)
            return 1
        return 0
    if not TABLE.is_file() or TABLE.read_text(encoding="utf-8") != text:
        TABLE.write_text(text, encoding="utf-8")
        print(f"{name}: updated")
    counts = ", ".join(f"{tag} {len(entry['asserts'])}" for tag, entry in json.loads(text).items())
    print(f"asserts and raises on the start-up path: {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
