"""The preparation Job's program (files/prepare.py): GSM8K ground truth, skip/fill, marker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import load_chart_program

prepare = load_chart_program("prepare")

# Rows in GSM8K's format, written here (a question and a worked solution ending in "#### N").
ROWS = {
    "train": [
        {
            "question": "Tom has 3 boxes with 4 apples each. He eats 2. How many are left?",
            "answer": "He has 3 * 4 = <<3*4=12>>12 apples.\nAfter eating 2 he has 12 - 2 = <<12-2=10>>10.\n#### 10",
        },
        {"question": "A farm sells 1,250 eggs a day. How many in 2 days?", "answer": "1,250 * 2 = 2,500\n#### 2,500"},
        {"question": "What is 7 minus 9?", "answer": "7 - 9 = -2\n#### -2"},
    ],
    "test": [{"question": "Half of 9?", "answer": "9 / 2 = 4.5\n####  4.5 "}],
}


def fake_loader(calls: list[str]):
    def load(split: str):
        calls.append(split)
        return iter(ROWS[split])

    return load


@pytest.mark.parametrize(
    ("answer", "final"),
    [
        ("work... #### 10", "10"),
        ("#### 2,500", "2500"),
        ("x #### -2", "-2"),
        ("#### 4.5 ", "4.5"),
        ("a #### 1 #### 72", "72"),  # the last marker wins
    ],
)
def test_final_answer_is_the_text_after_the_last_marker(answer, final):
    assert prepare.extract_final_answer(answer) == final


@pytest.mark.parametrize("bad", ["no marker here", "steps ####   "])
def test_answers_without_a_final_answer_are_rejected(bad):
    with pytest.raises(prepare.PrepareError):
        prepare.extract_final_answer(bad)


def test_rows_hold_the_question_and_only_the_final_answer():
    row = prepare.to_row(ROWS["train"][0])
    assert row == {"input": ROWS["train"][0]["question"], "output": "10"}
    assert "####" not in row["output"] and "<<" not in row["output"]


def spec(tmp_path: Path, **kw):
    return {
        "hf_home": str(tmp_path / "hf"),
        "model": "",
        "gsm8k_jsonl_dir": str(tmp_path / "gsm8k"),
        "marker": str(tmp_path / "m" / "done.json"),
    } | kw


def test_fill_writes_jsonl_then_the_marker_last(tmp_path):
    (tmp_path / "hf").mkdir()
    calls: list[str] = []
    downloads: list[str] = []

    def download(model):
        downloads.append(model)
        (tmp_path / "hf" / "weights.bin").write_bytes(b"x" * 1000)
        return str(tmp_path / "hf")

    report = prepare.prepare(
        spec(tmp_path, model="Qwen/Qwen2.5-1.5B"), download_model=download, load_gsm8k=fake_loader(calls), log=lambda m: None
    )
    assert downloads == ["Qwen/Qwen2.5-1.5B"] and calls == ["train", "test"]
    lines = (tmp_path / "gsm8k" / "train.jsonl").read_text().splitlines()
    assert [json.loads(ln)["output"] for ln in lines] == ["10", "2500", "-2"]
    assert report["gsm8k_rows"] == {"train": 3, "test": 1}
    assert report["bytes"] >= 1000 and report["seconds"] >= 0
    marker = json.loads((tmp_path / "m" / "done.json").read_text())
    assert marker == report
    assert sorted(p.name for p in (tmp_path / "gsm8k").iterdir()) == ["test.jsonl", "train.jsonl"]  # no temp files left


def test_second_run_skips_when_the_marker_exists(tmp_path):
    (tmp_path / "hf").mkdir()
    prepare.prepare(spec(tmp_path), download_model=lambda m: "", load_gsm8k=fake_loader([]), log=lambda m: None)
    calls: list[str] = []
    logs: list[str] = []
    prepare.prepare(
        spec(tmp_path), download_model=lambda m: pytest.fail("downloaded again"), load_gsm8k=fake_loader(calls), log=logs.append
    )
    assert calls == []
    assert "nothing to do" in logs[0]


def test_an_interrupted_fill_has_no_marker_and_is_completed_later(tmp_path):
    (tmp_path / "hf").mkdir()

    def broken(split):
        if split == "test":
            raise ConnectionError("hub unreachable")
        return iter(ROWS[split])

    with pytest.raises(ConnectionError):
        prepare.prepare(spec(tmp_path), download_model=lambda m: "", load_gsm8k=broken, log=lambda m: None)
    assert not (tmp_path / "m" / "done.json").exists()
    assert (tmp_path / "gsm8k" / "train.jsonl").exists() and not (tmp_path / "gsm8k" / "test.jsonl").exists()
    calls: list[str] = []
    prepare.prepare(spec(tmp_path), download_model=lambda m: "", load_gsm8k=fake_loader(calls), log=lambda m: None)
    assert calls == ["test"]  # the valid train split is kept
    assert (tmp_path / "m" / "done.json").exists()


def test_a_jsonl_with_full_solutions_is_rewritten(tmp_path):
    # The sample's bug: output = the whole worked solution. Such a file is not accepted as done.
    out = tmp_path / "gsm8k"
    out.mkdir()
    (out / "train.jsonl").write_text(json.dumps({"input": "q", "output": "3*4=12\n#### 12"}) + "\n")
    assert prepare.jsonl_valid(str(out / "train.jsonl")) == 0
    prepare.write_gsm8k(str(out), fake_loader([]))
    assert prepare.jsonl_valid(str(out / "train.jsonl")) == 3


def test_v06_and_later_only_cache_the_dataset(tmp_path):
    (tmp_path / "hf").mkdir()
    calls: list[str] = []
    report = prepare.prepare(
        spec(tmp_path, gsm8k_jsonl_dir=""), download_model=lambda m: "", load_gsm8k=fake_loader(calls), log=lambda m: None
    )
    assert calls == ["train", "test"]
    assert report["gsm8k_rows"] == {"train": 3, "test": 1}
    assert not (tmp_path / "gsm8k").exists()


def test_bad_spec_file_is_one_line_exit_1(tmp_path, capsys):
    path = tmp_path / "p.json"
    path.write_text('{"hf_home": "/x", "marker": "/y", "token": "s3cr3t"}')
    assert prepare.main([str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1 and "s3cr3t" not in err
    assert prepare.main([]) == 2
