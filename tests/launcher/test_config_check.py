"""The run checked by its own release in its image (files/config_check.py, run by prepare.py): the
chart's rendered prepare spec, the real hydra-core/omegaconf/pydantic of the venv, a stand-in
`nemo_rl` package with each release's call signatures and behaviour (nemo_rl_stand_in.py), and the
recipe configs the repository carries."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import pytest
from check_harness import CARRIED, config_check, local, no_downloads, prepare, rendered_specs, run_prepare, run_values
from nemo_rl_stand_in import FLAVOURS, called

from generator.nemo_rl.releases import RELEASES


@pytest.mark.parametrize("release", CARRIED)
def test_every_carried_release_passes_its_own_check_as_generated(tmp_path, release):
    pspec, lspec = rendered_specs(run_values(tmp_path, release))
    assert pspec["check"]["entrypoint"] == lspec["entrypoint"]  # exactly what the launcher submits
    assert pspec["check"]["submission_id"] == lspec["submission_id"]
    assert lspec["config_verdict"] == pspec["check"]["verdict"] == f"/data/nemo-rl/.checked/{lspec['submission_id']}.json"
    spec = local(pspec, tmp_path)
    logs: list[str] = []
    run_prepare(spec, logs)
    v, problem = config_check.read_verdict(spec["check"]["verdict"])
    assert problem == "" and v is not None
    assert v.state == "passed", v.message
    # v0.7.0 builds the pydantic MasterConfig (examples/run_grpo.py main, v0.7.0); earlier ones never call it.
    assert v.master_config == ("pydantic" if release == "v0.7.0" else "TypedDict")
    assert v.entrypoint == lspec["entrypoint"] and v.image == f"nvcr.io/nvidia/nemo-rl:{release}"
    # main() goes on with get_next_experiment_dir (a folder on the volume) and init_ray: never here.
    assert called(tmp_path / "opt-nemo-rl") == []
    assert any(line.startswith("passed: checked by NeMo RL's own config code") for line in logs)


@pytest.mark.parametrize("release", CARRIED)
def test_a_key_the_recipe_lacks_stops_the_run_with_the_values_key(tmp_path, release):
    pspec, _ = rendered_specs(run_values(tmp_path, release, extra=["policy.train_micro_batch_sze=2"]))
    spec = local(pspec, tmp_path)
    with pytest.raises(prepare.RunRefused) as e:
        run_prepare(spec)
    msg = str(e.value)
    assert msg.startswith("grpo.extraOverrides[0] (policy.train_micro_batch_sze=2): NeMo RL refuses this run in its image")
    # NeMo RL's own words (nemo_rl/utils/config.py parse_hydra_overrides wraps Hydra's message).
    assert "OverridesError: Failed to parse Hydra overrides: Could not override 'policy.train_micro_batch_sze'." in msg
    assert msg.endswith("then helm upgrade") and "\n" not in msg
    assert config_check.read_verdict(spec["check"]["verdict"])[0].values_key == "grpo.extraOverrides[0]"
    assert not Path(spec["marker"]).exists()  # nothing downloaded for a run that never starts


def test_the_preparation_job_exits_3_so_kubernetes_fails_it_at_once(tmp_path):
    pspec, _ = rendered_specs(run_values(tmp_path, "v0.7.0", extra=["+cluster.num_nodes=3"]))
    path = tmp_path / "prepare.json"
    path.write_text(json.dumps(local(pspec, tmp_path)))
    assert prepare.main([str(path)]) == prepare.EXIT_REFUSED == 3
    v = config_check.read_verdict(local(pspec, tmp_path)["check"]["verdict"])[0]
    assert v.state == "refused" and "An item is already at 'cluster.num_nodes'" in v.message


def test_only_v070_refuses_a_type_its_pydantic_master_config_rejects(tmp_path):
    # Hydra and OmegaConf take 'two' for a number; v0.7.0's MasterConfig (pydantic) does not.
    verdicts = {}
    for release in ("v0.6.0", "v0.7.0"):
        pspec, _ = rendered_specs(run_values(tmp_path / release, release, extra=["cluster.num_nodes=two"]))
        spec = local(pspec, tmp_path / release)
        with contextlib.suppress(prepare.RunRefused):
            run_prepare(spec)
        verdicts[release] = config_check.read_verdict(spec["check"]["verdict"])[0]
    assert verdicts["v0.6.0"].state == "passed"
    assert verdicts["v0.7.0"].state == "refused" and verdicts["v0.7.0"].stage == "master"
    assert verdicts["v0.7.0"].message.startswith("grpo.extraOverrides[0] (cluster.num_nodes=two): ")
    assert "MasterConfig(**config)" in verdicts["v0.7.0"].message and "valid integer" in verdicts["v0.7.0"].message


def test_an_interpolation_that_cannot_resolve_blames_the_value_it_reads(tmp_path):
    # The recipe's train_mb_tokens is ${mul:${policy.max_total_sequence_length}, ...}.
    pspec, _ = rendered_specs(run_values(tmp_path, "v0.6.0", extra=["policy.max_total_sequence_length=null"]))
    with pytest.raises(prepare.RunRefused) as e:
        run_prepare(local(pspec, tmp_path))
    assert str(e.value).startswith("grpo.extraOverrides[0] (policy.max_total_sequence_length=null): ")
    assert "OmegaConf.to_container(resolve=True)" in str(e.value) and "InterpolationResolutionError" in str(e.value)


def test_a_recipe_the_image_lacks_blames_grpo_recipe(tmp_path):
    values = run_values(tmp_path, "v0.7.0")
    values["grpo"]["recipe"] = "examples/configs/recipes/llm/grpo-no-such-recipe.yaml"
    pspec, _ = rendered_specs(values)
    with pytest.raises(prepare.RunRefused) as e:
        run_prepare(local(pspec, tmp_path))
    assert str(e.value).startswith("grpo.recipe: NeMo RL refuses this run in its image nvcr.io/nvidia/nemo-rl:v0.7.0 (load_config): ")
    assert "FileNotFoundError" in str(e.value)


def test_a_release_the_repository_does_not_carry_is_checked_from_its_image_alone(tmp_path):
    # NeMo RL's main after v0.7.0 (2026-08-22): another resolver (`add`), ??? kept while merging.
    # The recipe exists only in the stand-in image, not under vendor/.
    values = run_values(tmp_path, "main", flavour="main")
    code = Path(values["grpo"]["codeDir"])
    recipe = code / "examples" / "configs" / "grpo_only_in_the_image.yaml"
    recipe.parent.mkdir(parents=True, exist_ok=True)
    recipe.write_text(
        "policy: {model_name: m, max_total_sequence_length: 512, train_micro_batch_size: 1,"
        " step_tokens: '${add:${policy.max_total_sequence_length}, 1}'}\n"
        "grpo: {num_prompts_per_step: 1, num_generations_per_prompt: 2, max_num_steps: 1, seed: 1}\n"
        "cluster: {gpus_per_node: 8, num_nodes: 1}\n"
        "loss_fn: {}\nenv: {}\ndata: {}\nlogger: {log_dir: logs}\ncheckpointing: {enabled: false}\n"
    )
    values["grpo"]["recipe"] = "examples/configs/grpo_only_in_the_image.yaml"
    values["grpo"]["overrides"] = ["cluster.num_nodes=1", "grpo.max_num_steps=3"]
    pspec, _ = rendered_specs(values)
    spec = local(pspec, tmp_path)
    run_prepare(spec)
    assert config_check.read_verdict(spec["check"]["verdict"])[0].state == "passed"
    values["grpo"]["extraOverrides"] = ["grpo.max_num_steps=1.5"]
    spec = local(rendered_specs(values)[0], tmp_path)
    with pytest.raises(prepare.RunRefused, match=r"^grpo\.extraOverrides\[0\] \(grpo\.max_num_steps=1\.5\): .*fractional part"):
        run_prepare(spec)


def test_a_check_that_cannot_run_in_the_image_is_unchecked_and_the_run_goes_on(tmp_path):
    pspec, _ = rendered_specs(run_values(tmp_path, "v0.7.0"))
    (tmp_path / "opt-nemo-rl" / "nemo_rl" / "algorithms" / "grpo.py").write_text("import a_module_the_cpu_node_lacks\n")
    spec = local(pspec, tmp_path)
    logs: list[str] = []
    run_prepare(spec, logs)  # the cache is still filled
    v = config_check.read_verdict(spec["check"]["verdict"])[0]
    assert v.state == "unchecked" and v.stage == "import"
    assert "ModuleNotFoundError: No module named 'a_module_the_cpu_node_lacks'" in v.message
    assert Path(spec["marker"]).exists()


def test_a_verdict_is_reused_for_the_same_run_and_an_unchecked_one_is_checked_again(tmp_path):
    pspec, _ = rendered_specs(run_values(tmp_path, "v0.6.0"))
    spec = local(pspec, tmp_path)
    runs: list[str] = []

    def counted(entrypoint: str, timeout_s: float):
        runs.append(entrypoint)
        return config_check.run_in_image(entrypoint, timeout_s)

    prepare.prepare(spec, download_model=lambda m: "", load_gsm8k=no_downloads, log=lambda m: None, run_check=counted)
    prepare.prepare(spec, download_model=lambda m: "", load_gsm8k=no_downloads, log=lambda m: None, run_check=counted)
    assert len(runs) == 1  # helm upgrade of a launcher setting: a new preparation Job, the same run
    unchecked = config_check.Result("unchecked", "import", error="no answer within 1 s")
    Path(spec["check"]["verdict"]).unlink()
    prepare.prepare(spec, download_model=lambda m: "", load_gsm8k=no_downloads, log=lambda m: None, run_check=lambda e, t: (unchecked, 1.0))
    prepare.prepare(spec, download_model=lambda m: "", load_gsm8k=no_downloads, log=lambda m: None, run_check=counted)
    assert len(runs) == 2
    assert config_check.read_verdict(spec["check"]["verdict"])[0].state == "passed"


def test_a_changed_run_gets_its_own_verdict_and_the_cache_marker_stays(tmp_path):
    values = run_values(tmp_path, "v0.7.0")
    before, _ = rendered_specs(values)
    values["grpo"]["extraOverrides"] = ["grpo.max_num_steps=400"]
    after, _ = rendered_specs(values)
    assert after["check"]["verdict"] != before["check"]["verdict"]
    assert after["marker"] == before["marker"] and after["hash"] == before["hash"]


def test_without_the_check_neither_job_mentions_a_verdict(tmp_path):
    values = run_values(tmp_path, "v0.7.0")
    values["prepare"]["checkRun"] = False
    pspec, lspec = rendered_specs(values)
    assert "check" not in pspec and "config_verdict" not in lspec


@pytest.mark.parametrize(
    ("entrypoint", "ok"),
    [
        ("cd /opt/nemo-rl && uv run python examples/run_grpo.py --config 'r.yaml' 'a=1'", True),
        ("python examples/run_grpo.py --config r.yaml", False),
        ("cd /opt/nemo-rl && uv run python examples/run_grpo.py r.yaml", False),
        ("cd /opt/nemo-rl && uv run python 'unclosed", False),
    ],
)
def test_only_the_charts_command_is_checked(entrypoint, ok):
    if ok:
        cmd = config_check.parse_entrypoint(entrypoint)
        assert (cmd.code_dir, cmd.script, cmd.recipe, cmd.overrides) == ("/opt/nemo-rl", "examples/run_grpo.py", "r.yaml", ["a=1"])
    else:
        with pytest.raises(config_check.CommandError):
            config_check.parse_entrypoint(entrypoint)


def test_the_check_takes_about_a_second_here_with_the_stand_in(tmp_path):
    """What the README's number means: Python start, hydra/omegaconf/pydantic imports, the recipe
    merge and the overrides. The image imports torch, ray, transformers and more first."""
    pspec, _ = rendered_specs(run_values(tmp_path, "v0.7.0"))
    start = time.monotonic()
    result, took = config_check.run_in_image(pspec["check"]["entrypoint"], 120)
    assert result.state == "passed" and took <= time.monotonic() - start
    assert took < 30  # generous: 2 shared cores


def test_stand_in_flavours_cover_every_carried_release():
    assert set(CARRIED) <= set(FLAVOURS) and set(CARRIED) <= set(RELEASES)
