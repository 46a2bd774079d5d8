#!/usr/bin/env python3
"""Fill the shared Hugging Face cache once, before the GRPO run: model and GSM8K.

    python prepare.py PREPARE.json

Runs in the NeMo RL image on a CPU node, with HF_HOME on the shared volume. PREPARE.json
(rendered by the chart):
  hf_home           HF_HOME on the shared volume
  model             Hugging Face model id to download ("" to skip)
  gsm8k_jsonl_dir   v0.5.0 only: write GSM8K there as train.jsonl / test.jsonl ("" to skip)
  marker            written last, with bytes and seconds; when it exists the Job does nothing
GSM8K's `answer` is a worked solution ending in "#### <final answer>"; NeMo RL's math verifier
compares the model's \\boxed{} answer with the ground truth, so the ground truth must be the final
answer alone, or every reward is 0.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from typing import Any

GSM8K_DATASET = ("openai/gsm8k", "main")
SPLITS = ("train", "test")
SPEC_KEYS = {"hf_home", "model", "gsm8k_jsonl_dir", "marker", "image", "hash"}


class PrepareError(Exception):
    pass


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


def _write_atomic(path: str, lines: Iterable[str]) -> int:
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    count = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for line in lines:
                f.write(line + "\n")
                count += 1
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return count


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
        counts[split] = _write_atomic(path, (json.dumps(to_row(ex), ensure_ascii=False) for ex in load(split)))
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


def load_spec(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            spec = json.load(f)
    except (OSError, ValueError) as e:
        raise PrepareError(f"{path}: cannot read the spec: {e}") from None
    if not isinstance(spec, dict) or set(spec) - SPEC_KEYS or not {"hf_home", "marker"} <= set(spec):
        raise PrepareError(f"{path}: expected keys {sorted(SPEC_KEYS)}")
    return spec


def prepare(
    spec: dict[str, Any],
    download_model: Callable[[str], str] = hf_download_model,
    load_gsm8k: Callable[[str], Iterable[dict[str, Any]]] = hf_load_gsm8k,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
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
    _write_atomic(marker, [json.dumps(report, sort_keys=True)])
    log(f"done: {report['bytes']} bytes in {report['seconds']} s; marker {marker}")
    return report


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: prepare.py PREPARE.json", file=sys.stderr)
        return 2
    try:
        prepare(load_spec(args[0]))
    except PrepareError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
