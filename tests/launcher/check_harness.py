"""Shared pieces of the tests of the in-image check: the chart's rendered specs for a run whose
command runs in a stand-in NeMo RL folder, and the preparation Job's program on them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import kinds, load_chart_program, render, values_for
from nemo_rl_stand_in import write

from generator.helm import runner as helm_mod
from generator.nemo_rl.releases import RELEASES

prepare = load_chart_program("prepare")
config_check = load_chart_program("config_check")

CARRIED = ("v0.5.0", "v0.6.0", "v0.7.0")


def rendered_specs(values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(prepare.json, launch.json) as the chart renders them."""
    objs = render(helm_mod.pinned(helm_mod.PINS[0]), [values])
    cm = next(c for c in kinds(objs, "ConfigMap") if "prepare.json" in c.get("data", {}))
    return json.loads(cm["data"]["prepare.json"]), json.loads(cm["data"]["launch.json"])


def run_values(tmp_path: Path, release: str, flavour: str | None = None, extra: list[str] | None = None, **opts: Any) -> dict[str, Any]:
    """Generated values for `release` whose command runs in a stand-in NeMo RL folder."""
    code = write(tmp_path / "opt-nemo-rl", flavour or release, configs_from=release if release in CARRIED else None)
    values = values_for(release=release if release in RELEASES else "v0.7.0", **opts)
    values["grpo"]["codeDir"] = str(code)
    values["grpo"]["extraOverrides"] = extra or []
    return values


def local(spec: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """The prepare spec with the volume's paths moved under tmp_path."""
    (tmp_path / "hf").mkdir(exist_ok=True)
    spec = dict(spec, hf_home=str(tmp_path / "hf"), marker=str(tmp_path / "prepared" / "m.json"), model="")
    spec["check"] = dict(spec["check"], verdict=str(tmp_path / "checked" / f"{spec['check']['submission_id']}.json"))
    return spec


def no_downloads(split: str):
    return iter([{"question": "q", "answer": "#### 1"}])


def run_prepare(spec: dict[str, Any], logs: list[str] | None = None) -> dict[str, Any]:
    return prepare.prepare(spec, download_model=lambda m: "", load_gsm8k=no_downloads, log=(logs if logs is not None else []).append)
