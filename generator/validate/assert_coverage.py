"""docs/values.md's table of NeMo RL's start-up asserts (scripts/sync.sh writes it): each release's
coverage, and every statement with the validate rule that covers it or why none does."""

from __future__ import annotations

from generator.validate.assert_decisions import OTHER, STEP, Rule, decide
from generator.values.docs import replace_between

ASSERTS_START = "<!-- nemo-rl-asserts:begin -->"
ASSERTS_END = "<!-- nemo-rl-asserts:end -->"
PIPE = "\\|"  # a literal | inside a Markdown table cell


def _statement_cell(text: str, limit: int = 90) -> str:
    short = text if len(text) <= limit else text[: limit - 3] + "..."
    return "`" + short.replace("`", "'").replace("|", PIPE) + "`"


def asserts_table() -> str:
    """Every assert and raise on each release's start-up path (generator/nemo_rl/startup_asserts.json)
    with its decision (generator/validate/assert_decisions.py): the coverage per release, then one
    row per statement, cited at the newest release that has it."""
    from generator.nemo_rl.asserts import Found, load_table, startup_files
    from generator.nemo_rl.releases import RELEASES
    from generator.vendored import NEMO_RL_SRC

    table = load_table()
    rows = [
        "| Release | Files read | Asserts and raises | Covered by a rule | Excluded: in a training step or another algorithm "
        "| Excluded: other reasons (runtime state, internal, image, model) |",
        "|---|---|---|---|---|---|",
    ]
    for tag, found in table.items():
        decisions = [decide(f) for f in found]
        covered = sum(isinstance(d, Rule) for d in decisions)
        later = sum(d is STEP or d is OTHER for d in decisions)
        rows.append(
            f"| {tag} | {len(startup_files(tag))} | {len(found)} | {covered} of {len(found)} | {later} | {len(found) - covered - later} |"
        )
    tags_of: dict[str, list[str]] = {}
    newest: dict[str, Found] = {}
    for tag, found in table.items():
        for f in found:
            tags_of.setdefault(f.key, []).append(tag)
            newest[f.key] = f  # cite the newest release that has it
    rows += [
        "",
        "<details><summary>Every statement, its code at the newest release that has it, and its decision</summary>",
        "",
        "| Releases | Where | Statement | Decision |",
        "|---|---|---|---|",
    ]
    for key, f in newest.items():
        decision = decide(f)
        commit = RELEASES[tags_of[key][-1]].commit
        name = f.file.rsplit("/", 1)[-1]
        where = f"[{name}:{f.function}](https://github.com/{NEMO_RL_SRC.repository}/blob/{commit}/{f.file}#L{f.line})"
        if isinstance(decision, Rule):
            said = "rule " + ", ".join(f"`{n}`" for n in decision.names()) + (f" ({decision.note})" if decision.note else "")
        else:
            said = f"excluded: {decision.reason}" if decision is not None else "UNDECIDED"
        releases = " ".join(t.removeprefix("v") for t in tags_of[key])
        rows.append(f"| {releases} | {where} | {_statement_cell(f'{f.kind} {f.text}'.strip())} | {said.replace('|', PIPE)} |")
    rows += ["", "</details>"]
    return "\n".join(rows)


def replace_asserts_table(text: str) -> str:
    return replace_between(text, ASSERTS_START, ASSERTS_END, asserts_table())
