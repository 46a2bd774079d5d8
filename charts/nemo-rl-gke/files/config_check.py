#!/usr/bin/env python3
"""The run checked by its own NeMo RL release, in its image, on CPU, before the launcher submits it.

    python config_check.py --result OUT.json ENTRYPOINT     the in-image step (prepare.py runs it)

ENTRYPOINT is the command the launcher submits, as the chart renders it:
`cd CODE_DIR && uv run python SCRIPT --config RECIPE OVERRIDE...`. This program does with the
image's own NeMo RL code what SCRIPT does before it connects to Ray, and nothing after:

  import      SCRIPT as a module (not as __main__): its imports, and its module-level resolvers
              (v0.5.0's examples/run_grpo_math.py registers `mul` there)
  arguments   `register_omegaconf_resolvers()` when the script has it (v0.6.0+), then the
              script's own `parse_args()` on exactly `SCRIPT --config RECIPE OVERRIDE...`
  load_config its `load_config(args.config)` (nemo_rl.utils.config: the recipe over its
              `defaults:` chain)
  overrides   its `parse_hydra_overrides(config, overrides)` (struct mode, Hydra's parser)
  resolve     `OmegaConf.to_container(config, resolve=True)` (the resolvers above)
  master      `MasterConfig(**config)` when MasterConfig is a pydantic model (v0.7.0+; in v0.5.0
              and v0.6.0 it is a TypedDict the script never calls)
The sources: examples/run_grpo.py `main` and `parse_args` (examples/run_grpo_math.py at v0.5.0),
nemo_rl/utils/config.py, nemo_rl/algorithms/grpo.py `MasterConfig`, at each tag. main() goes on
with `get_next_experiment_dir` (creates a log folder on the volume) and `init_ray`: never called.

An exception in arguments..master is NeMo RL refusing the run ("refused", with its own message
and the dotted keys it names); one in `import` means the check could not run here ("unchecked":
the launcher submits anyway and says so). The verdict, and the values key to change, are written
by the preparation Job (`verdict`, prepare.py keeps it on the volume); the launcher reads it
(`read_verdict`). Standard library only
at import time; Python 3.11 to 3.13.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

STATES = ("passed", "refused", "unchecked")
# What each stage calls, as the message names it.
CALLS = {
    "import": "import of the entry script",
    "arguments": "parse_args",
    "load_config": "load_config",
    "overrides": "parse_hydra_overrides",
    "resolve": "OmegaConf.to_container(resolve=True)",
    "master": "MasterConfig(**config)",
}
MAX_ERROR = 4000
MAX_VERDICT_BYTES = 1 << 16
QUOTED_KEY = re.compile(r"'([A-Za-z_][\w-]*(?:\.[\w-]+)*)'")
INTERPOLATED_KEY = re.compile(r"\$\{([A-Za-z_][\w-]*(?:\.[\w-]+)*)\}")


class CommandError(ValueError):
    """The entrypoint is not the chart's `cd DIR && uv run python SCRIPT --config RECIPE ...`."""


@dataclass(frozen=True)
class Command:
    code_dir: str
    script: str
    recipe: str
    overrides: list[str]

    @property
    def argv(self) -> list[str]:
        return [self.script, "--config", self.recipe, *self.overrides]


def parse_entrypoint(entrypoint: str) -> Command:
    """The chart's command, split as the shell splits it (every argument is single-quoted)."""
    try:
        words = shlex.split(entrypoint)
    except ValueError as e:
        raise CommandError(f"cannot split the entrypoint: {e}") from None
    head = ["cd", "<dir>", "&&", "uv", "run", "python", "<script>", "--config", "<recipe>"]
    shape_ok = len(words) >= len(head) and all(w == h for w, h in zip(words, head, strict=False) if not h.startswith("<"))
    if not shape_ok:
        raise CommandError(f"not the chart's `cd DIR && uv run python SCRIPT --config RECIPE ...`: {entrypoint[:160]!r}")
    return Command(words[1], words[6], words[8], words[9:])


# --- in the image: the release's own code ------------------------------------------------------


@dataclass
class Result:
    """What the release's code said: its state, the stage reached, its error and the keys it names."""

    state: str
    stage: str
    error: str = ""
    keys: list[str] = field(default_factory=list)  # dotted config keys the error names
    override_texts: list[str] = field(default_factory=list)  # overrides Hydra could not parse
    master_config: str = ""  # "pydantic", "TypedDict" (not called, as the script does), or "absent"
    seconds: dict[str, float] = field(default_factory=dict)


def _one_line(text: str) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= MAX_ERROR else line[: MAX_ERROR - 3] + "..."


def describe(e: BaseException) -> str:
    if isinstance(e, SystemExit):
        return f"SystemExit: {e.code} (the entry script's argument parser refused the command line)"
    return _one_line(f"{type(e).__name__}: {e}")


def _chain(e: BaseException | None) -> Iterator[BaseException]:
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def keys_named(e: BaseException) -> tuple[list[str], list[str]]:
    """(dotted keys, unparsable override texts) an error and its causes name: pydantic's error
    locations, the keys an interpolation reads, OmegaConf's `full_key`, Hydra's quoted keys and
    `override`; the most specific first."""
    keys: list[str] = []
    texts: list[str] = []
    for err in _chain(e):
        override = getattr(err, "override", None)
        if isinstance(override, str) and override:
            texts.append(override)
        errors = getattr(err, "errors", None)
        if callable(errors):
            with contextlib.suppress(Exception):  # pydantic's ValidationError.errors(); others may differ
                keys += [".".join(str(p) for p in item["loc"]) for item in errors() if item.get("loc")]
        keys += INTERPOLATED_KEY.findall(str(err))
        full_key = getattr(err, "full_key", None)
        if isinstance(full_key, str) and full_key:
            keys.append(full_key)
        keys += QUOTED_KEY.findall(str(err))
    return list(dict.fromkeys(keys)), list(dict.fromkeys(texts))


def _import_script(cmd: Command) -> Any:
    path = os.path.abspath(cmd.script)
    sys.path.insert(0, os.path.dirname(path))  # as `python SCRIPT` does
    if os.path.abspath(cmd.code_dir) not in sys.path:
        sys.path.append(os.path.abspath(cmd.code_dir))  # nemo_rl, if the image's venv does not install it
    spec = importlib.util.spec_from_file_location("nemo_rl_gke_entry_script", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _interpolation_sources(omegaconf: Any, config: Any, keys: list[str]) -> list[str]:
    """The keys the failing interpolations read (`${mul:${a.b}, ${c}}` -> a.b, c): the value to
    change is usually one of them, not the key that holds the interpolation."""
    try:
        raw = omegaconf.to_container(config, resolve=False)
    except Exception:
        return []
    out: list[str] = []
    for key in keys:
        node: Any = raw
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, str):
            out += INTERPOLATED_KEY.findall(node)
    return out


def _master_kind(master: Any) -> str:
    if master is None:
        return "absent"
    return "pydantic" if callable(getattr(master, "model_validate", None)) else "TypedDict"


def _stages(ns: dict[str, Any], cmd: Command, result: Result, held: dict[str, Any]) -> None:
    """arguments..master as the entry script's main() runs them; result.stage is the one running,
    held["config"] the configuration before it is resolved."""
    clock = time.perf_counter()

    def done(stage: str) -> None:
        nonlocal clock
        result.seconds[stage] = round(time.perf_counter() - clock, 3)
        clock = time.perf_counter()

    result.stage = "arguments"
    if callable(ns.get("register_omegaconf_resolvers")):
        ns["register_omegaconf_resolvers"]()
    sys.argv = cmd.argv
    args, overrides = ns["parse_args"]()
    done("arguments")
    result.stage = "load_config"
    config = ns["load_config"](args.config)
    done("load_config")
    if overrides:
        result.stage = "overrides"
        config = ns["parse_hydra_overrides"](config, overrides)
        done("overrides")
    held["config"] = config
    result.stage = "resolve"
    config = ns["OmegaConf"].to_container(config, resolve=True)
    done("resolve")
    if result.master_config == "pydantic":
        result.stage = "master"
        ns["MasterConfig"](**config)
        done("master")


def release_check(cmd: Command) -> Result:
    """Run the entry script's configuration steps with the image's own NeMo RL code."""
    result = Result("unchecked", "import")
    os.chdir(cmd.code_dir)
    start = time.perf_counter()
    try:
        ns = vars(_import_script(cmd))
    except BaseException as e:  # an import that fails or exits: the check could not run here
        result.error = describe(e)
        return result
    result.seconds["import"] = round(time.perf_counter() - start, 3)
    missing = [n for n in ("parse_args", "load_config", "parse_hydra_overrides", "OmegaConf") if n not in ns]
    if missing:
        result.error = f"{cmd.script} defines no {', '.join(missing)}: this check knows entry scripts that do (v0.5.0 to v0.7.0)"
        return result
    result.master_config = _master_kind(ns.get("MasterConfig"))
    held: dict[str, Any] = {}
    try:
        _stages(ns, cmd, result, held)
    except BaseException as e:  # NeMo RL's own code refused the run, whatever it raised
        result.state = "refused"
        result.error = describe(e)
        result.keys, result.override_texts = keys_named(e)
        if result.stage == "resolve" and "config" in held:
            result.keys = _interpolation_sources(ns["OmegaConf"], held["config"], result.keys) + result.keys
        return result
    result.state, result.stage = "passed", "master" if result.master_config == "pydantic" else "resolve"
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check a NeMo RL run with the release's own config code.")
    parser.add_argument("--result", required=True, help="where to write the result (JSON)")
    parser.add_argument("entrypoint", help="the command the launcher submits")
    args = parser.parse_args(argv)
    try:
        result = release_check(parse_entrypoint(args.entrypoint))
    except CommandError as e:
        result = Result("unchecked", "import", error=str(e))
    with open(args.result, "w", encoding="utf-8") as f:
        json.dump(asdict(result), f)
    return 0


# --- in the preparation Job: run it, blame a values key, keep the verdict ------------------------


def run_in_image(entrypoint: str, timeout_s: float, python: str = sys.executable) -> tuple[Result, float]:
    """This program in a new process of the image's Python (its own sys.argv, resolvers and
    imports), and how long it took."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="nemo-rl-gke-check-") as tmp:
        out = os.path.join(tmp, "result.json")
        try:
            proc = subprocess.run(
                [python, os.path.abspath(__file__), "--result", out, entrypoint],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return Result("unchecked", "import", error=f"no answer within {timeout_s:.0f} s"), time.monotonic() - start
        try:
            with open(out, encoding="utf-8") as f:
                data = json.load(f)
            result = Result(**data)
        except (OSError, ValueError, TypeError):
            tail = _one_line((proc.stderr or proc.stdout or "")[-1500:])
            result = Result("unchecked", "import", error=f"the check ended with exit status {proc.returncode} and no result: {tail}")
    return result, time.monotonic() - start


def _override_key(arg: str) -> str:
    return arg.lstrip("+").split("=", 1)[0]


def _related(key: str, override_key: str) -> bool:
    return key == override_key or key.startswith(override_key + ".") or override_key.startswith(key + ".")


def blame(result: Result, overrides: list[str], given: int) -> tuple[str, str]:
    """(the values key to change, the offending entry's text or "") for a refused run. `overrides`
    are the command's overrides, the first `given` from grpo.overrides, the rest from
    grpo.extraOverrides; the last entry that names the key wins, as NeMo RL applies them."""
    entries = [(f"grpo.overrides[{i}]" if i < given else f"grpo.extraOverrides[{i - given}]", a) for i, a in enumerate(overrides)]
    if result.stage == "load_config":
        return "grpo.recipe", ""
    for text in result.override_texts:
        for where, arg in reversed(entries):
            if arg == text:
                return where, arg
    for key in result.keys:
        for where, arg in reversed(entries):
            if _related(key, _override_key(arg)):
                return where, arg
    if result.keys:
        return "grpo.recipe", ""
    return "grpo.overrides or grpo.extraOverrides", ""


FIXES = {
    "arguments": "make every entry a NeMo RL override (key=value, +key=value, ++key=value)",
    "load_config": "set grpo.recipe to a recipe file of this release, relative to grpo.codeDir",
    "overrides": "fix or remove it: key=value for a key the recipe has, +key=value for a new key",
    "resolve": "give the key a value NeMo RL can resolve",
    "master": "give the key a value of the type NeMo RL's MasterConfig expects",
}


@dataclass(frozen=True)
class Verdict:
    submission_id: str
    state: str  # one of STATES
    message: str  # one line; for "refused" it names the values key and the fix
    entrypoint: str
    image: str
    stage: str = ""
    values_key: str = ""
    master_config: str = ""
    seconds: float = 0.0
    checked_at: str = ""


def verdict(spec: dict[str, Any], image: str, result: Result, took: float) -> Verdict:
    """The verdict the launcher reads, from the check's result and the run's prepare spec."""
    base = {
        "submission_id": spec["submission_id"],
        "entrypoint": spec["entrypoint"],
        "image": image,
        "stage": result.stage,
        "master_config": result.master_config,
        "seconds": round(took, 2),
        "checked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if result.state == "passed":
        validated = "MasterConfig validated" if result.master_config == "pydantic" else "no MasterConfig model in this release"
        message = f"checked by NeMo RL's own config code in {image} ({validated}) in {took:.1f} s"
        return Verdict(state="passed", message=message, **base)
    if result.state != "refused":
        message = f"not checked in {image} (stage {result.stage}): {result.error}"
        return Verdict(state="unchecked", message=message, **base)
    try:
        overrides = parse_entrypoint(spec["entrypoint"]).overrides
    except CommandError:
        overrides = []
    where, entry = blame(result, overrides, int(spec.get("overrides_given", len(overrides))))
    shown = f"{where} ({entry})" if entry else where
    message = (
        f"{shown}: NeMo RL refuses this run in its image {image} ({CALLS[result.stage]}): {result.error}"
        f" - {FIXES.get(result.stage, 'change it')}, then helm upgrade"
    )
    return Verdict(state="refused", message=message, values_key=where, **base)


def read_verdict(path: str) -> tuple[Verdict | None, str]:
    """(the verdict, "") or (None, why it cannot be read)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_VERDICT_BYTES + 1)
        data = json.loads(raw.decode("utf-8"))
        v = Verdict(**data)
    except (OSError, ValueError, TypeError) as e:
        return None, f"the check's verdict {path} cannot be read ({e})"
    if v.state not in STATES:
        return None, f"the check's verdict {path} has an unknown state {v.state!r}"
    return v, ""


if __name__ == "__main__":
    sys.exit(main())
