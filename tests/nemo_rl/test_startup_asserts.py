"""NeMo RL's start-up asserts: the committed list (generator/nemo_rl/startup_asserts.json) is what
the carried source (vendor/nemo-rl-src/) gives, and every assert of every supported release has a
decision (generator/validate/assert_decisions.py): a validate rule that cites the release code, or
a reason."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from generator.nemo_rl import asserts
from generator.nemo_rl.releases import RELEASES
from generator.validate.assert_decisions import DECISIONS, Excluded, Rule, decide
from generator.vendored import NEMO_RL_SRC

TABLE = asserts.load_table()


def test_the_committed_list_is_what_the_carried_source_gives():
    """A release's list changed (its source, the start-up files or the lister): regenerate with
    scripts/nemo-rl-asserts.sh and decide every new entry in assert_decisions.py."""
    assert asserts.TABLE.read_text(encoding="utf-8") == asserts.table_text(), "run scripts/nemo-rl-asserts.sh"


def test_the_list_covers_every_release_at_its_configs_commit():
    data = json.loads(asserts.TABLE.read_text(encoding="utf-8"))
    assert list(data) == list(RELEASES)
    assert NEMO_RL_SRC.root == asserts.SRC
    for tag, entry in data.items():
        assert entry["commit"] == RELEASES[tag].commit == NEMO_RL_SRC.versions[tag]
        assert entry["files"][0] == asserts.entry_script(tag) and "nemo_rl/algorithms/grpo.py" in entry["files"]
        assert len(entry["asserts"]) > 200


@pytest.mark.parametrize("tag", list(RELEASES))
def test_every_start_up_assert_has_a_decision(tag):
    undecided = [f.key for f in TABLE[tag] if decide(f) is None]
    assert undecided == [], f"decide these in generator/validate/assert_decisions.py: {undecided}"


def test_no_decision_is_left_over():
    """Each table of decisions names a function some release has, and each of its starts matches a
    statement of a function that uses the table."""
    statements: dict[tuple[str, str], list[str]] = {}
    for found in (f for fs in TABLE.values() for f in fs):
        statements.setdefault((found.file, found.function), []).append(found.key.split(":", 2)[2])
    assert [where for where in DECISIONS if where not in statements] == []
    sharing: dict[int, list[tuple[str, str]]] = {}
    for where, table in DECISIONS.items():
        sharing.setdefault(id(table), []).append(where)
    for wheres in sharing.values():
        table = DECISIONS[wheres[0]]
        said = [s for w in wheres for s in statements[w]]
        assert [start for start in table if not any(s.startswith(start) for s in said)] == [], wheres


def _cited(found: asserts.Found, source: str) -> bool:
    name = found.function.split(".")[0]
    return Path(found.file).name in source and (name == "<module>" or name in source)


def test_every_rule_exists_and_cites_the_code_it_follows():
    missing = []
    for found in (f for fs in TABLE.values() for f in fs):
        decision = decide(found)
        if isinstance(decision, Rule):
            assert decision.rules and all(r.__module__.startswith("generator.validate.rules.") for r in decision.rules)
            if not any(_cited(found, inspect.getsource(r)) for r in decision.rules):
                missing.append(f"{found.key[:100]} -> {decision.names()}")
    assert sorted(set(missing)) == []


def test_every_exclusion_gives_a_one_line_reason():
    reasons = {decide(f).reason for fs in TABLE.values() for f in fs if isinstance(decide(f), Excluded)}  # type: ignore[union-attr]
    assert reasons and all(r and "\n" not in r and len(r) < 300 for r in reasons)


# --- the lister ------------------------------------------------------------------------------------

SOURCE = """
def setup(cfg):
    assert cfg["a"] > 0, "a must be positive"
    if cfg["b"]:
        raise ValueError("b is not supported")
    else:
        raise ValueError(f"no b: {cfg}")

    def inner():
        assert cfg["a"] > 0
    assert cfg["a"] > 0

class Worker:
    def __init__(self):
        try:
            pass
        except Exception:
            raise
"""


def test_the_lister_names_function_statement_and_guard():
    found = asserts.list_source("x.py", SOURCE)
    assert [f.key for f in found] == [
        "x.py:setup:assert cfg['a'] > 0",
        "x.py:setup:raise ValueError('b is not supported')",
        "x.py:setup:raise ValueError(f'no b: {cfg}')",
        "x.py:setup.inner:assert cfg['a'] > 0",
        "x.py:setup:assert cfg['a'] > 0 #2",
        "x.py:Worker.__init__:raise",
    ]
    assert found[0].message == "'a must be positive'" and found[0].line == 3
    assert found[1].guard == "cfg['b']" and found[2].guard == "not (cfg['b'])"


def test_keys_do_not_move_with_lines_or_formatting():
    moved = "\n\n# a comment\n" + SOURCE.replace('cfg["a"] > 0, "a must', 'cfg["a"]>0 , "a must')
    before, after = asserts.list_source("x.py", SOURCE), asserts.list_source("x.py", moved)
    assert [f.key for f in before] == [f.key for f in after]
    assert [f.line + 3 for f in before] == [f.line for f in after]


def test_the_check_says_in_one_line_that_the_list_is_stale(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "startup_asserts.json"
    stale.write_text("{}\n")
    monkeypatch.setattr(asserts, "TABLE", stale)
    monkeypatch.setattr(asserts, "ROOT", tmp_path)
    assert asserts.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run scripts/nemo-rl-asserts.sh" in err
