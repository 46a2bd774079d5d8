#!/usr/bin/env python3
"""Fill the shared Hugging Face cache once, before the GRPO run: model and GSM8K.

    python prepare.py PREPARE.json

Runs in the NeMo RL image on a CPU node, with HF_HOME on the shared volume. PREPARE.json
(rendered by the chart):
  hf_home           HF_HOME on the shared volume
  model             Hugging Face model id to download ("" to skip)
  gsm8k_jsonl_dir   v0.5.0 only: write GSM8K there as train.jsonl / test.jsonl ("" to skip)
  marker            written last, with bytes and seconds; when it exists the Job does nothing
  check             optional: the run the launcher will submit, checked first by the release's own
                    config code in this image (config_check.py): submission_id, entrypoint,
                    verdict (the file the launcher waits for), overrides_given (how many of the
                    command's overrides come from grpo.overrides; the rest are grpo.extraOverrides)
Exit status: 0 done; 3 NeMo RL refused the run (its verdict names the values key; the Job fails at
once, as a new pod would refuse it again); 1 a bad spec or a failed download (retried).
GSM8K's `answer` is a worked solution ending in "#### <final answer>"; NeMo RL's math verifier
compares the model's \\boxed{} answer with the ground truth, so the ground truth must be the final
answer alone, or every reward is 0.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import atomic_file
import config_check

GSM8K_DATASET = ("openai/gsm8k", "main")
SPLITS = ("train", "test")
SPEC_KEYS = {"hf_home", "model", "gsm8k_jsonl_dir", "marker", "image", "hash", "check"}
CHECK_KEYS = {"submission_id", "entrypoint", "verdict", "overrides_given"}
EXIT_REFUSED = 3


class PrepareError(Exception):
    pass


class RunRefused(PrepareError):
    """NeMo RL's own config code refused the run (exit 3)."""


def extract_final_answer(answer: str) -> str:
    """The text after the last '####' of a GSM8K answer, without thousands separators."""
    if "####" not in answer:
        raise PrepareError(f"GSM8K answer without '####': {answer[:80]!r}")
    final = answer.rsplit("####", 1)[1].strip()
    if not final:
        raise PrepareError(f"GSM8K answer with nothing after '####': {answer[-80:]!r}")
    return final.replace(",", "")


def to_row(example: dict[str, Any]) -> dict[str, str]:
    return {"input": str(example["question"]).strip(), "output": extract_final_answer(str(example["answer"]))}


def jsonl_valid(path: str) -> int:
    """Number of rows if every line is a {"input", "output"} object with a short output, else 0."""
    try:
        with open(path, encoding="utf-8") as f:
            rows = 0
            for line in f:
                row = json.loads(line)
                if set(row) != {"input", "output"} or not row["input"] or not row["output"] or "####" in row["output"]:
                    return 0
                rows += 1
            return rows
    except (OSError, ValueError):
        return 0


def write_gsm8k(out_dir: str, load: Callable[[str], Iterable[dict[str, Any]]]) -> dict[str, int]:
    """Write train.jsonl and test.jsonl; splits already present and valid are kept."""
    counts = {}
    for split in SPLITS:
        path = os.path.join(out_dir, f"{split}.jsonl")
        existing = jsonl_valid(path)
        if existing:
            counts[split] = existing
            continue
        counts[split] = atomic_file.write_lines(path, (json.dumps(to_row(ex), ensure_ascii=False) for ex in load(split)))
        if not counts[split]:
            raise PrepareError(f"GSM8K {split} split is empty")
    return counts


def hf_load_gsm8k(split: str) -> Iterable[dict[str, Any]]:
    from datasets import load_dataset

    return load_dataset(*GSM8K_DATASET, split=split)


def hf_download_model(model: str) -> str:
    from huggingface_hub import snapshot_download

    return snapshot_download(repo_id=model)


def folder_bytes(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # a file removed while walking
                total += os.lstat(os.path.join(root, name)).st_size
    return total


CheckRunner = Callable[[str, float], tuple[config_check.Result, float]]
CHECK_TIMEOUT_S = 900  # the entry script's imports (torch, ray, transformers, ...) on a CPU node


def check_run(check: dict[str, Any], image: str, log: Callable[[str], None], run: CheckRunner = config_check.run_in_image) -> Any:
    """The run's verdict (config_check.Verdict): the one already on the volume for this very run
    (its submission id names the command and the image), else a new check, kept on the volume
    for the launcher. An earlier "unchecked" is checked again."""
    path = check["verdict"]
    if os.path.exists(path):
        old, problem = config_check.read_verdict(path)
        if old is not None and old.state != "unchecked" and (old.entrypoint, old.image) == (check["entrypoint"], image):
            log(f"run already checked ({path}): {old.state}: {old.message}")
            return old
        if problem:
            log(f"{problem}; checking again")
    log(f"checking the run with NeMo RL's own config code in this image: {check['entrypoint']}")
    result, took = run(check["entrypoint"], CHECK_TIMEOUT_S)
    verdict = config_check.verdict(check, image, result, took)
    atomic_file.write_lines(path, [json.dumps(dataclasses.asdict(verdict), sort_keys=True)])
    log(f"{verdict.state}: {verdict.message}")
    return verdict


def load_spec(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            spec = json.load(f)
    except (OSError, ValueError) as e:
        raise PrepareError(f"{path}: cannot read the spec: {e}") from None
    if not isinstance(spec, dict) or set(spec) - SPEC_KEYS or not {"hf_home", "marker"} <= set(spec):
        raise PrepareError(f"{path}: expected keys {sorted(SPEC_KEYS)}")
    check = spec.get("check")
    if check is not None and (not isinstance(check, dict) or set(check) != CHECK_KEYS or not str(check["verdict"]).startswith("/")):
        raise PrepareError(f"{path}: check: expected the keys {sorted(CHECK_KEYS)}, verdict an absolute path")
    return spec


def prepare(
    spec: dict[str, Any],
    download_model: Callable[[str], str] = hf_download_model,
    load_gsm8k: Callable[[str], Iterable[dict[str, Any]]] = hf_load_gsm8k,
    log: Callable[[str], None] = print,
    run_check: CheckRunner = config_check.run_in_image,
) -> dict[str, Any]:
    if spec.get("check"):
        # First, and whether the cache is complete or not: a run NeMo RL refuses is never submitted.
        verdict = check_run(spec["check"], spec.get("image", ""), log, run_check)
        if verdict.state == "refused":
            raise RunRefused(verdict.message)
    marker = spec["marker"]
    if os.path.exists(marker):
        log(f"cache complete ({marker}); nothing to do")
        with open(marker, encoding="utf-8") as f:
            return json.load(f)
    start = time.monotonic()
    before = folder_bytes(spec["hf_home"])
    report: dict[str, Any] = {"model": spec.get("model", ""), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if spec.get("model"):
        log(f"downloading {spec['model']} into {spec['hf_home']}")
        report["model_path"] = download_model(spec["model"])
    if spec.get("gsm8k_jsonl_dir"):
        log(f"writing GSM8K (final answers after '####') to {spec['gsm8k_jsonl_dir']}")
        report["gsm8k_rows"] = write_gsm8k(spec["gsm8k_jsonl_dir"], load_gsm8k)
    else:
        log("caching GSM8K for NeMo RL's built-in gsm8k dataset")
        report["gsm8k_rows"] = {split: sum(1 for _ in load_gsm8k(split)) for split in SPLITS}
    report["bytes"] = folder_bytes(spec["hf_home"]) - before
    report["seconds"] = round(time.monotonic() - start, 1)
    # The marker is written last: its presence means everything above completed.
    atomic_file.write_lines(marker, [json.dumps(report, sort_keys=True)])
    log(f"done: {report['bytes']} bytes in {report['seconds']} s; marker {marker}")
    return report


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: prepare.py PREPARE.json", file=sys.stderr)
        return 2
    try:
        prepare(load_spec(args[0]))
    except RunRefused as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_REFUSED
    except PrepareError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
