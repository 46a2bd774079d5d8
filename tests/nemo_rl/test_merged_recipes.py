"""The recipes merged once by scripts/sync.sh are what NeMo RL's merge (OmegaConf) gives now, and
are not used once a file of their chain changes."""

from __future__ import annotations

import json

from generator import vendored
from generator.nemo_rl.recipe_config import load_recipe


def test_each_merged_recipe_is_the_merge_of_its_chain_as_carried():
    stored = json.loads(vendored.MERGED_RECIPES.read_text())
    assert sorted(stored) == sorted(f"{tag}/{recipe}" for tag, recipe in vendored._needed_recipes())
    for key, entry in stored.items():
        tag, recipe = key.split("/", 1)
        path = vendored.recipe_path(tag, recipe)
        assert entry["chain"] == {vendored._relative(p): vendored.sha256(p) for p in vendored.defaults_chain(path)}
        assert entry["config"] == load_recipe(path), f"{key}: run scripts/sync.sh"
        assert vendored.load_release_recipe(tag, recipe) == entry["config"]


def test_a_chain_file_that_changed_since_is_merged_anew(tmp_path, monkeypatch):
    tag, recipe = sorted(vendored._needed_recipes())[0]
    stored = json.loads(vendored.MERGED_RECIPES.read_text())
    entry = stored[f"{tag}/{recipe}"]
    first = next(iter(entry["chain"]))
    entry["chain"][first] = "0" * 64  # as if the file had been edited after sync
    entry["config"] = {"stale": True}
    moved = tmp_path / "merged_recipes.json"
    moved.write_text(json.dumps(stored))
    monkeypatch.setattr(vendored, "MERGED_RECIPES", moved)
    vendored._merged_recipes.cache_clear()
    try:
        assert vendored._merged(tag, recipe) is None
        assert vendored.load_release_recipe(tag, recipe) == load_recipe(vendored.recipe_path(tag, recipe))
    finally:
        vendored._merged_recipes.cache_clear()
