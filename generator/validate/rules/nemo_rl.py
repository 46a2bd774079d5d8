"""NeMo RL's start-up rules, checked against the chart's workers before any GPU is paid for."""

from __future__ import annotations

from collections.abc import Iterator

from generator.nemo_rl.placement import (
    COLOCATED,
    GENERATION_GPUS_PER_NODE,
    GENERATION_NODES,
    GPUS_PER_NODE,
    NUM_NODES,
    Issue,
    Placement,
    placement,
)
from generator.nemo_rl.recipe_config import grpo_override_args
from generator.nemo_rl.run_spec import SAVE_BY
from generator.validate.findings import Finding, error, warning
from generator.validate.rules.context import Context, override_key

REQUIRED = (
    "cluster.num_nodes",
    "cluster.gpus_per_node",
    "grpo.num_prompts_per_step",
    "grpo.num_generations_per_prompt",
    "policy.model_name",
    "policy.generation.colocated.enabled",
    "policy.dtensor_cfg.tensor_parallel_size",
    "policy.generation.vllm_cfg.tensor_parallel_size",
    "policy.train_global_batch_size",
    "policy.train_micro_batch_size",
)
FLAT_ONLY = ("data.dataset_name", "data.train_data_path", "data.val_data_path")
NESTED_ONLY = ("data.train.", "data.validation.", "data.default.")


def _int(ctx: Context, key: str, default: int | None = None) -> int | None:
    value = ctx.get(key, default)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _syntax(ctx: Context) -> Iterator[Finding]:
    _ = ctx.overrides  # parse once; syntax errors are collected as a side effect
    for key, message, fix in ctx.syntax_errors:
        yield error(key, message, fix or "write key=value, +key=value or ++key=value")
    seen: dict[str, int] = {}
    for i, (where, arg) in enumerate(grpo_override_args(ctx.grpo)):
        key = arg.lstrip("+").split("=", 1)[0]
        if key in seen and where.startswith("grpo.overrides["):
            yield error(override_key(key), f"set twice in grpo.overrides (entries {seen[key]} and {i})", "keep one")
        seen.setdefault(key, i)


def _release(ctx: Context) -> Iterator[Finding]:
    rel = ctx.release
    tag = ctx.values["image"]["tag"]
    if rel is None:
        return  # an error of the recipe rules: the repository carries no configs of that release
    if ctx.values["rayVersion"] != rel.ray_version:
        yield error(
            "rayVersion",
            f"{ctx.values['rayVersion']} does not match Ray {rel.ray_version} in nemo-rl:{tag}",
            f"set rayVersion: {rel.ray_version!r}",
        )
    if ctx.grpo["entrypoint"] != rel.entrypoint:
        yield error("grpo.entrypoint", f"{ctx.grpo['entrypoint']} is not {tag}'s GRPO script", f"set it to {rel.entrypoint}")
    for key in ctx.overrides:
        if rel.data_layout == "flat" and key.startswith(NESTED_ONLY):
            yield error(
                override_key(key),
                f"{tag} uses flat data keys (data.dataset_name, data.train_data_path); this nested key does not exist there",
                "regenerate for the release",
            )
        if rel.data_layout == "nested" and key in FLAT_ONLY:
            yield error(
                override_key(key),
                f"{tag} uses nested data keys (data.train.*, data.validation.*); this flat key does not exist there",
                "regenerate for the release",
            )
    if rel.has_segment_size and "cluster.segment_size" not in ctx.overrides:
        yield warning(
            override_key("cluster.segment_size"),
            f"not set; {tag} may align placement to NVLink domains that KubeRay nodes lack",
            "add cluster.segment_size=null",
        )


def _deadline(ctx: Context) -> Iterator[Finding]:
    save_by = ctx.get("checkpointing.checkpoint_must_save_by")
    if save_by is not None and not SAVE_BY.fullmatch(str(save_by)):
        yield error(override_key("checkpointing.checkpoint_must_save_by"), f"{save_by!r} is not DD:HH:MM:SS", "e.g. 06:22:00:00")
    flex = [i for i, g in enumerate(ctx.values["workerGroups"]) if g["provisioning"] == "flex-start"]
    if flex and save_by is None:
        yield warning(
            override_key("checkpointing.checkpoint_must_save_by"),
            f"workerGroups[{flex[0]}] is flex-start (VMs run at most 7 days) but no save deadline is set",
            "add checkpointing.checkpoint_must_save_by=06:22:00:00",
        )


def _reward(ctx: Context) -> Iterator[Finding]:
    if str(ctx.get("data.output_key", "")) == "answer":
        yield error(
            override_key("data.output_key"),
            "GSM8K's 'answer' is the whole worked solution: the math verifier never matches it and every reward is 0",
            "drop it; the preparation Job writes the final answer as 'output'",
        )
    rel = ctx.release
    jsonl = ctx.values.get("prepare", {}).get("gsm8kJsonlDir") or ""
    if rel is not None and rel.data_layout == "flat" and ctx.values.get("prepare", {}).get("enabled"):
        for key, name in (("data.train_data_path", "train.jsonl"), ("data.val_data_path", "test.jsonl")):
            want = f"{jsonl.rstrip('/')}/{name}" if jsonl else ""
            if ctx.get(key) is not None and ctx.get(key) != want:
                fix = f"set +{key}={want}" if jsonl else "set prepare.gsm8kJsonlDir to the folder of the JSONL files"
                yield error(
                    override_key(key),
                    f"{ctx.get(key)} is not written by the preparation Job ({want or 'prepare.gsm8kJsonlDir is empty'})",
                    fix,
                )


def _cluster(ctx: Context) -> Iterator[Finding]:
    nodes, gpn = _int(ctx, "cluster.num_nodes"), _int(ctx, "cluster.gpus_per_node")
    if nodes is None or gpn is None:
        return
    if gpn != ctx.gpus_per_node:
        yield error(
            override_key("cluster.gpus_per_node"),
            f"{gpn}, but each worker pod has {ctx.gpus_per_node} GPUs",
            f"set cluster.gpus_per_node={ctx.gpus_per_node}",
        )
    if nodes * gpn != ctx.worker_nodes * ctx.gpus_per_node:
        yield error(
            override_key("cluster.num_nodes"),
            f"NeMo RL asks for {nodes} x {gpn} = {nodes * gpn} GPUs but the worker groups give "
            f"{ctx.worker_nodes} x {ctx.gpus_per_node} = {ctx.worker_nodes * ctx.gpus_per_node}"
            + (
                " ('Not enough GPUs available' after 6 retries)"
                if nodes * gpn > ctx.worker_nodes * ctx.gpus_per_node
                else " (GPUs paid for and idle)"
            ),
            f"set cluster.num_nodes={ctx.worker_nodes} or change workerGroups[].replicas",
        )


def _placement_findings(placed: Placement, nodes: int, gpn: int, gen_nodes: int | None, gen_gpn: int | None) -> Iterator[Finding]:
    """What NeMo RL's grpo.setup refuses in the generation placement, in validate's words."""
    issues = set(placed.issues)
    if Issue.GENERATION_NOT_WHOLE_NODES in issues:
        yield error(
            override_key(GENERATION_GPUS_PER_NODE),
            f"{gen_gpn}: with dedicated generation on several nodes NeMo RL requires it to equal cluster.gpus_per_node ({gpn})",
            f"set it to {gpn}",
        )
    if issues & {Issue.GENERATION_NODES_UNSET, Issue.NO_TRAINING_NODES}:
        yield error(
            override_key(GENERATION_NODES),
            f"{gen_nodes}: dedicated generation needs 0 < generation nodes < cluster.num_nodes ({nodes}); training gets the rest",
            f"use 1..{nodes - 1}, or colocated generation",
        )
    if issues & {Issue.ONE_NODE_GENERATION_GPUS_UNSET, Issue.ONE_NODE_NO_TRAINING_GPUS}:
        yield error(
            override_key(GENERATION_GPUS_PER_NODE),
            f"{gen_gpn}: on one node dedicated generation needs 0 < generation GPUs < {gpn}",
            f"use 1..{gpn - 1}, or colocated generation",
        )
    if Issue.ONE_NODE_GENERATION_NODES in issues:
        yield error(
            override_key(GENERATION_NODES),
            f"{gen_nodes}: on one node NeMo RL requires it to be 1 or null (generation shares the node with training)",
            "set it to null or 1",
        )


def _placement_and_parallelism(ctx: Context) -> Iterator[Finding]:
    nodes, gpn = _int(ctx, NUM_NODES), _int(ctx, GPUS_PER_NODE)
    tp = _int(ctx, "policy.dtensor_cfg.tensor_parallel_size")
    vtp = _int(ctx, "policy.generation.vllm_cfg.tensor_parallel_size")
    if nodes is None or gpn is None or tp is None or vtp is None or not nodes or not gpn:
        return
    gen_nodes, gen_gpn = _int(ctx, GENERATION_NODES), _int(ctx, GENERATION_GPUS_PER_NODE)
    placed = placement(nodes, gpn, colocated=ctx.get(COLOCATED) is not False, generation_nodes=gen_nodes, generation_gpus_per_node=gen_gpn)
    if placed.issues:
        yield from _placement_findings(placed, nodes, gpn, gen_nodes, gen_gpn)
        return
    yield from _parallelism(ctx, gpn, tp, vtp, placed)


def _parallelism(ctx: Context, gpn: int, tp: int, vtp: int, placed: Placement) -> Iterator[Finding]:
    train_gpus, gen_gpus = placed.train_gpus, placed.generation_gpus
    cp = _int(ctx, "policy.dtensor_cfg.context_parallel_size", 1) or 1
    pp = _int(ctx, "policy.generation.vllm_cfg.pipeline_parallel_size", 1) or 1
    for key, size, scope in (
        ("policy.dtensor_cfg.tensor_parallel_size", tp, "training"),
        ("policy.generation.vllm_cfg.tensor_parallel_size", vtp, "generation"),
    ):
        if size < 1 or gpn % size:
            yield error(override_key(key), f"{scope} tensor parallel {size} does not divide the {gpn} GPUs of a node", "use 1, 2, 4 or 8")
    if tp >= 1 and train_gpus % (tp * cp):
        yield error(
            override_key("policy.dtensor_cfg.tensor_parallel_size"),
            f"{train_gpus} training GPUs are not divisible by TP {tp} x CP {cp}",
            "change TP or the node split",
        )
    if vtp >= 1 and gen_gpus % (vtp * pp):
        yield error(
            override_key("policy.generation.vllm_cfg.tensor_parallel_size"),
            f"{gen_gpus} generation GPUs are not divisible by vLLM TP {vtp} x PP {pp}",
            "change vLLM TP or the node split",
        )
    yield from _batches(ctx, train_gpus, tp, cp)


def _batches(ctx: Context, train_gpus: int, tp: int, cp: int) -> Iterator[Finding]:
    prompts, gens = _int(ctx, "grpo.num_prompts_per_step"), _int(ctx, "grpo.num_generations_per_prompt")
    gbs, micro = _int(ctx, "policy.train_global_batch_size"), _int(ctx, "policy.train_micro_batch_size")
    if None in (prompts, gens, gbs, micro) or not gbs or not micro or tp < 1 or train_gpus % (tp * cp):
        return
    samples = prompts * gens
    dp = train_gpus // (tp * cp)
    if samples % gbs:
        yield error(
            override_key("policy.train_global_batch_size"),
            f"{gbs} does not divide the {samples} samples per step ({prompts} prompts x {gens} generations)",
            "use a divisor of the samples per step",
        )
    elif gbs % dp:
        yield error(
            override_key("policy.train_global_batch_size"),
            f"{gbs} is not divisible by the data-parallel size {dp} ({train_gpus} training GPUs / TP {tp} / CP {cp})",
            f"use a multiple of {dp}",
        )
    elif (gbs // dp) % micro:
        yield error(
            override_key("policy.train_micro_batch_size"),
            f"the per-rank batch {gbs // dp} is not divisible by the micro-batch {micro}",
            "use a divisor of the per-rank batch",
        )
    rel = ctx.release
    logprob = _int(ctx, "policy.logprob_batch_size")
    bypass = any(e["name"] == "NRL_IGNORE_TP_ACCURACY_CHECK" for e in ctx.values.get("extraEnv", []))
    if rel is not None and rel.tp_micro_logprob_rule and tp >= 4 and not bypass:
        if logprob is None:
            yield error(
                override_key("policy.logprob_batch_size"),
                f"not set; with TP {tp} >= 4, {rel.tag} requires it to equal train_micro_batch_size ({micro}) and the recipe may differ",
                f"set policy.logprob_batch_size={micro}",
            )
        elif logprob != micro:
            yield error(
                override_key("policy.logprob_batch_size"),
                f"{logprob} differs from train_micro_batch_size {micro}; with TP {tp} >= 4 {rel.tag} refuses to start",
                f"set it to {micro}",
            )
    div = _int(ctx, "policy.make_sequence_length_divisible_by")
    if div is None:
        yield warning(
            override_key("policy.make_sequence_length_divisible_by"),
            f"not set; the recipe's value may not match TP {tp}",
            f"set it to {tp}",
        )
    elif div != tp:
        yield error(
            override_key("policy.make_sequence_length_divisible_by"), f"{div} should equal the tensor parallel size {tp}", f"set it to {tp}"
        )


def check(ctx: Context) -> Iterator[Finding]:
    if not ctx.grpo.get("enabled", True):
        return
    yield from _syntax(ctx)
    for key in REQUIRED:
        if key not in ctx.overrides:
            yield error(
                override_key(key),
                "missing: the run's shape cannot be checked or is left to the recipe",
                "regenerate with python -m generator",
            )
    yield from _release(ctx)
    yield from _reward(ctx)
    yield from _deadline(ctx)
    yield from _cluster(ctx)
    yield from _placement_and_parallelism(ctx)
