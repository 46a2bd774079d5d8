"""`python -m generator rehearse`: the rendered topology and the run's settings, then the
stand-in's requests on a real local Ray cluster of the tutorial's shape (head + 2 x 8 GPUs, shared
in-process by several rehearsals): green runs, NeMo RL's timeouts, the preemption drill.
Clusters that cannot place the run, and Ray process cleanup: test_rehearse_failures.py."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rehearse_harness import cli, run_in, start_cluster, with_override, write

from generator.rehearse.checkpoints import compare, snapshot
from generator.rehearse.cluster import LocalCluster
from generator.rehearse.job.nemo_rl import Failure, virtual_clusters
from generator.rehearse.launcher import make_spec
from generator.rehearse.plan import override_path, settings
from generator.rehearse.run import Request, render
from generator.rehearse.topology import node_resources
from generator.values.build import Options, build

# --- without Ray ---------------------------------------------------------------------------------


def test_kuberay_cpu_rule_params_then_limit_then_request_rounded_up() -> None:
    container = {"resources": {"limits": {"cpu": "1500m", "memory": "2Gi", "nvidia.com/gpu": 8}, "requests": {"cpu": "1"}}}
    assert node_resources(container, {}, what="w", values_prefix="worker")[:3] == (2, 8, 2 * 2**30)
    cpus, gpus, _, _, key = node_resources(container, {"num-cpus": "0"}, what="w", values_prefix="worker")
    assert (cpus, gpus, key) == (0, 8, "worker.rayStartParams.num-cpus")
    only_request = {"resources": {"requests": {"cpu": "3"}}}
    cpus, gpus, memory, _, key = node_resources(only_request, {}, what="h", values_prefix="head")
    assert (cpus, gpus, memory, key) == (3, 0, None, "head.resources.requests.cpu")


def test_tutorial_topology_and_settings(tmp_values: Path) -> None:
    values = build(Options(gpu="h200"))
    _, rendered, _ = render(Request(write(tmp_values, "topology", values)))
    assert [(n.name, n.cpus, n.gpus) for n in rendered.nodes] == [("head", 6, 0), ("gpu-0", 215, 8), ("gpu-1", 215, 8)]
    s = settings("v0.7.0", rendered.launch_spec["entrypoint"])
    # Colocated, as NeMo RL's Gemma 3 27B recipe; --generation-nodes 1 is the seed tutorial's split.
    assert (s.num_nodes, s.gpus_per_node, s.colocated, s.generation_nodes, s.math_workers) == (2, 8, True, None, 8)
    _, seed, _ = render(Request(write(tmp_values, "topology-seed", build(Options(gpu="h200", generation_nodes=1)))))
    s = settings("v0.7.0", seed.launch_spec["entrypoint"])
    assert (s.num_nodes, s.gpus_per_node, s.colocated, s.generation_nodes, s.math_workers) == (2, 8, False, 1, 8)
    assert s.venv_reservation_skips_cpuless_nodes
    _, old, _ = render(Request(write(tmp_values, "topology-v050", build(Options(gpu="h200", release="v0.5.0")))))
    assert not settings("v0.5.0", old.launch_spec["entrypoint"]).venv_reservation_skips_cpuless_nodes
    assert override_path(values, "cluster.num_nodes") == "grpo.overrides[cluster.num_nodes]"


def test_spec_changes_only_what_a_laptop_needs(tmp_values: Path) -> None:
    _, rendered, _ = render(Request(write(tmp_values, "spec", build(Options(gpu="h200")))))
    spec, notes = make_spec(rendered, "http://127.0.0.1:1", "python stand-in.py", Path("/tmp/ckpt"), drill=False)
    changed = {k for k in spec if spec[k] != rendered.launch_spec.get(k)}
    local = {"address", "entrypoint", "checkpoint_dir", "wait_for_files", "timeouts", "poll_interval_s", "max_restarts", "rehearsal"}
    assert changed == local | {"outcome_dir", "outcome_volume_dir"}
    assert spec["outcome_dir"] == spec["outcome_volume_dir"] == "/tmp/launcher"  # beside the local checkpoints
    assert "gpu_release" in rendered.launch_spec and "gpu_release" not in spec
    assert "config_verdict" in rendered.launch_spec and "config_verdict" not in spec
    assert notes == [
        "config_verdict dropped (on GKE the preparation Job checks the run with the image's own NeMo RL code first)",
        "gpu_release dropped (releasing the GPU workers needs the Kubernetes API; the tests cover it)",
        "max_restarts 3 -> 0 (a placement failure fails every attempt alike)",
    ]
    assert spec["rehearsal"] is True  # the launcher prints no billing line only a cluster makes true
    kept = build(Options(gpu="h200"))
    kept["launcher"]["releaseGpus"] = False
    _, kept_rendered, _ = render(Request(write(tmp_values, "kept", kept)))
    _, kept_notes = make_spec(kept_rendered, "http://127.0.0.1:1", "x", Path("/tmp/ckpt"), drill=False)
    assert "launcher.releaseGpus is false: on GKE the GPU workers would stay up after the run, billed until `helm uninstall`" in kept_notes
    spec, _ = make_spec(rendered, "http://127.0.0.1:1", "x", Path("/tmp/ckpt"), drill=True)
    assert spec["max_restarts"] == 3 and spec["submission_id"] == rendered.launch_spec["submission_id"]


KEYS = {k: f"<{k}>" for k in ("generation_nodes", "generation_gpus_per_node", "num_nodes", "replicas", "worker_cpu", "head_cpu")}


def plan(**kw: Any) -> dict[str, Any]:
    base = {"release": "v0.7.0", "num_nodes": 2, "gpus_per_node": 8, "colocated": False, "backend": "vllm", "generation_nodes": 1}
    return {**base, "generation_gpus_per_node": 8, "keys": KEYS, **kw}


@pytest.mark.parametrize(
    ("changes", "clusters"),
    [
        ({}, [("grpo_train_cluster", [8], 1), ("grpo_inference_cluster", [8], 1)]),
        ({"colocated": True}, [("grpo_policy_cluster", [8, 8], 2)]),
        ({"colocated": True, "backend": "megatron"}, [("grpo_policy_cluster", [8, 8], 1)]),
        (
            {"num_nodes": 1, "generation_nodes": None, "generation_gpus_per_node": 2},
            [("grpo_train_cluster", [6], 1), ("grpo_inference_cluster", [2], 1)],
        ),
    ],
)
def test_virtual_clusters_follow_grpo_setup(changes: dict[str, Any], clusters: list[Any]) -> None:
    assert virtual_clusters(plan(**changes)) == clusters


# The texts of grpo.setup (nemo_rl/algorithms/grpo.py) at each release: the one-node checks test
# `policy_nodes == 1`; `assert inference_nodes > 0` with None raises a TypeError before its
# message; v0.7.0 adds "Non-colocated mode requires train_nodes > 0 and inference_nodes > 0",
# which v0.5.0 and v0.6.0 lack (they build an empty training cluster).
@pytest.mark.parametrize(
    ("changes", "text", "key"),
    [
        (
            {"generation_nodes": 0},
            "AssertionError: policy.generation.colocated.resources.num_nodes must be > 0 when cluster.num_nodes > 1",
            "generation_nodes",
        ),
        (
            {"generation_nodes": None},
            "TypeError: '>' not supported between instances of 'NoneType' and 'int'",
            "generation_nodes",
        ),
        ({"generation_gpus_per_node": None}, "must be explicitly set and equal to cluster.gpus_per_node", "generation_gpus_per_node"),
        (
            {"num_nodes": 1, "generation_gpus_per_node": None},
            "must be explicitly set to a value > 0 when policy_nodes = 1 and inference is non-colocated",
            "generation_gpus_per_node",
        ),
        ({"num_nodes": 1, "generation_nodes": 2, "generation_gpus_per_node": 4}, "must be 1 or set to null", "generation_nodes"),
        ({"num_nodes": 1, "generation_nodes": None}, "No enough GPUs for training", "generation_gpus_per_node"),
        (
            {"generation_nodes": 2},
            "AssertionError: Non-colocated mode requires train_nodes > 0 and inference_nodes > 0, got train_nodes=0, inference_nodes=2",
            "generation_nodes",
        ),
        ({"generation_nodes": 2, "release": "v0.6.0"}, "bundle_ct_per_node_list=[8] * 0 is empty", "generation_nodes"),
        ({"generation_nodes": 2, "release": "v0.5.0"}, "bundle_ct_per_node_list=[8] * 0 is empty", "generation_nodes"),
    ],
)
def test_generation_placement_checks_name_the_key(changes: dict[str, Any], text: str, key: str) -> None:
    with pytest.raises(Failure) as e:
        virtual_clusters(plan(**changes))
    assert text in e.value.nemo_rl
    assert e.value.key == f"<{key}>"


def test_checkpoint_comparison_sees_lost_and_rewritten_files(tmp_path: Path) -> None:
    (tmp_path / "step_1").mkdir()
    (tmp_path / "step_1" / "a").write_text("1")
    (tmp_path / "step_1" / "b").write_text("2")
    before = snapshot(tmp_path)
    (tmp_path / "step_1" / "a").write_text("changed")
    (tmp_path / "step_1" / "b").unlink()
    (tmp_path / "step_2").mkdir()
    (tmp_path / "step_2" / "c").write_text("3")
    assert compare(before, snapshot(tmp_path)) == (["step_1/b"], ["step_1/a"], ["step_2/c"])


def test_missing_or_invalid_values_file_is_one_line(tmp_path: Path) -> None:
    tag = f"rh-test-{uuid.uuid4().hex[:8]}"
    missing = cli(str(tmp_path / "nope.yaml"), tag=tag)
    assert missing.returncode == 2
    assert missing.stderr.strip() == f"error: {tmp_path / 'nope.yaml'}: no such file"
    bad = tmp_path / "bad.yaml"
    bad.write_text("worker: [unclosed\n")
    invalid = cli(str(bad), tag=tag)
    assert invalid.returncode == 2
    assert len(invalid.stderr.strip().splitlines()) == 1 and "not valid YAML" in invalid.stderr
    assert "Traceback" not in invalid.stderr + missing.stderr
    schema = write(tmp_path, "schema", {**build(Options(gpu="h200")), "typo": 1})
    rejected = cli(str(schema), tag=tag)
    assert rejected.returncode == 2 and len(rejected.stderr.strip().splitlines()) == 1
    assert "helm template failed" in rejected.stderr and "Traceback" not in rejected.stderr
    off = write(tmp_path, "off", {**build(Options(gpu="h200")), "grpo": {**build(Options(gpu="h200"))["grpo"], "enabled": False}})
    no_run = cli(str(off), tag=tag)
    assert no_run.returncode == 2
    expected = f"error: {off}: the chart rendered no launcher spec (grpo.enabled is false?): there is no run to rehearse"
    assert no_run.stderr.strip() == expected


def test_a_release_the_repository_does_not_carry_is_an_error_naming_it_and_the_recipe(tmp_values: Path) -> None:
    values = build(Options(gpu="h200"))
    values["image"]["tag"] = "v0.4.0"
    proc = cli(str(write(tmp_values, "v040", values)), tag=f"rh-test-{uuid.uuid4().hex[:8]}")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("error: NeMo RL v0.4.0: this repository carries no configs of that release, so its recipe examples/")
    assert "use a release it carries (v0.5.0, v0.6.0, v0.7.0" in line
    assert "[stand-in]" not in proc.stdout  # no Ray cluster was started for it


def test_more_worker_nodes_than_max_nodes_is_a_clear_error(tmp_values: Path) -> None:
    path = write(tmp_values, "four", build(Options(gpu="h200", nodes=4)))
    proc = cli(str(path), "--max-nodes", "3", tag=f"rh-test-{uuid.uuid4().hex[:8]}")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: {path}: the RayCluster has 4 worker nodes; rehearse starts one local Ray node per pod and stops at "
        "--max-nodes 3 (about 250 MB of memory each): raise --max-nodes or rehearse a smaller copy"
    ]
    assert proc.stdout == ""


# --- the tutorial's topology: head (6 CPUs) + 2 x 8 GPUs --------------------------------------------


@pytest.fixture(scope="class")
def tutorial(tmp_values: Path) -> Iterator[LocalCluster]:
    """Class scope: each shared cluster ends before the next class starts its own."""
    yield from start_cluster(write(tmp_values, "tutorial", build(Options(gpu="h200"))))


# The seed tutorial's split (1 vLLM node, 1 training node): the tests of dedicated generation.
SEED_SPLIT = Options(gpu="h200", generation_nodes=1)
# Placement groups NeMo RL's grpo.setup asks for (placement.py): colocated, one cluster over both
# nodes with 2 CPUs a GPU; the seed's split, a training and a generation cluster of a node each.
GROUPS = {
    None: ("grpo_policy_cluster-node0: 8 x {CPU: 2, GPU: 1}", "grpo_policy_cluster-node1: 8 x {CPU: 2, GPU: 1}"),
    1: ("grpo_train_cluster-node0: 8 x {CPU: 1, GPU: 1}", "grpo_inference_cluster-node0: 8 x {CPU: 1, GPU: 1}"),
}


@pytest.mark.ray
class TestOnTheTutorialsTopology:
    @pytest.mark.parametrize(("release", "gen_nodes"), [("v0.7.0", None), ("v0.5.0", None), ("v0.7.0", 1)])
    def test_the_tutorial_run_rehearses_green(self, tutorial: LocalCluster, tmp_values: Path, release: str, gen_nodes: int | None) -> None:
        values = build(Options(gpu="h200", release=release, generation_nodes=gen_nodes))
        path = write(tmp_values, f"tutorial-{release}-{gen_nodes}", values)
        rc, out = run_in(tutorial, path)
        assert rc == 0, out
        recipe = "examples/configs/recipes/llm/grpo-gemma3-27b-it-8n8g-fsdp2tp8-actckpt-long.yaml"
        for line in (
            f"rehearse: run settings ({release}/{recipe} + overrides): cluster.num_nodes 2 x 8 GPUs",
            f"[stand-in] NeMo RL {release} resource requests",
            *(f"[stand-in]   placement group {group} PACK -> placed on gpu-" for group in GROUPS[gen_nodes]),
            "[stand-in] math environment: 9 actors running: placed",
            "[stand-in] step 3/3: checkpoint written:",
            "rehearse: PASS: every resource request was placed",
        ):
            assert line in out, out
        # The values release the GPUs: no line says they stay up or stay billed (no GPU node exists here).
        assert "stay up" not in out and "stay billed" not in out, out
        which = "every alive Ray node, head included" if release == "v0.5.0" else "every alive Ray node with CPUs"
        assert f"STRICT_SPREAD 3 x {{CPU: 1}} on {which} -> placed" in out
        # The launcher's progress line for each step, from the stand-in's NeMo RL step header and time.
        progress = [line.split("] ", 1)[1] for line in out.splitlines() if line.startswith("[launcher ") and "] step " in line]
        assert [p.split(":")[0] for p in progress] == ["step 1/3", "step 2/3", "step 3/3"], out
        assert all(re.match(r"step \d/3: step time \d+\.\d s", p) for p in progress), progress

    def test_more_nodes_than_worker_replicas_times_out_like_nemo_rl(self, tutorial: LocalCluster, tmp_values: Path) -> None:
        path = write(tmp_values, "three-nodes", with_override(build(SEED_SPLIT), "cluster.num_nodes", "3"))
        rc, out = run_in(tutorial, path)
        assert rc == 1, out
        # The train cluster (2 nodes) passes NeMo RL's totals check and is placed; the generation node cannot be.
        assert "grpo_train_cluster-node1: 8 x {CPU: 1, GPU: 1} PACK -> placed" in out
        assert "rehearse: FAIL: TimeoutError: Timed out waiting for placement groups to be ready." in out
        assert "this run's clusters need 24 GPUs (cluster.num_nodes 3 x 8) but the Ray cluster has 16 on 2 GPU node(s)" in out
        assert (
            "rehearse: change grpo.overrides[cluster.num_nodes] or workerGroups[0].replicas: set cluster.num_nodes to 2 "
            "(the GPU worker nodes), or add 1 worker replica(s)" in out
        )

    def test_generation_on_every_node_leaves_training_none(self, tutorial: LocalCluster, tmp_values: Path) -> None:
        values = with_override(build(SEED_SPLIT), "policy.generation.colocated.resources.num_nodes", "2")
        rc, out = run_in(tutorial, write(tmp_values, "gen-all", values))
        assert rc == 1, out
        # v0.7.0's grpo.setup asserts it (the release the generator writes by default).
        assert "rehearse: FAIL: AssertionError: Non-colocated mode requires train_nodes > 0 and inference_nodes > 0" in out
        assert "leaves no node for training" in out
        assert "rehearse: change grpo.overrides[policy.generation.colocated.resources.num_nodes]: set it to 1 " in out
        assert "placement group" not in out  # nothing was asked of Ray

    def test_preemption_drill_resumes_from_the_checkpoint(self, tutorial: LocalCluster, tmp_values: Path) -> None:
        # Another run name: the launcher never submits the same run spec twice on one Ray cluster.
        values = build(replace(SEED_SPLIT, run_name="drill"))
        rc, out = run_in(tutorial, write(tmp_values, "drill", values), drill="preempt")
        assert rc == 0, out
        lines = out.splitlines()

        def index(text: str) -> int:
            return next(i for i, ln in enumerate(lines) if text in ln)

        written = index("[stand-in] step 2/3: checkpoint written:")
        reclaimed = index("rehearse: drill: Spot reclaim: step_2 is on the shared volume (6 files); removing Ray node gpu-1")
        died = index("[stand-in] the training worker on gpu-1 died")
        resubmitted = index("attempt 2 submitted as nemo-rl-")
        resumed = index("[stand-in] resuming from step_2 in")
        assert written < reclaimed < resubmitted < resumed
        assert died < resubmitted
        assert "-retry1; resumes from step_2 in " in lines[resubmitted]
        assert "[stand-in] step 3/3: checkpoint written:" in out
        assert "step 1/3" not in "\n".join(lines[resumed:])  # resumed, not restarted
        assert "rehearse: drill: checkpoint folder intact: the 6 files of step_1, step_2 unchanged (sha256 and mtime); added: step_3" in out
        assert "rehearse: PASS: the preempted run was resubmitted and resumed from its checkpoint" in out
        assert sorted(n.spec.name for n in tutorial.nodes) == ["gpu-0", "gpu-1", "head"]  # KubeRay's replacement is back


# --- a head with 0 Ray CPUs: NeMo RL v0.5.0 blocks, v0.7.0 does not ----------------------------------
