"""NeMo RL's start-up rules, checked against the chart's workers before any GPU is paid for."""

from __future__ import annotations

from collections.abc import Iterator

from generator.nemo_rl.placement import (
    GENERATION_GPUS_PER_NODE,
    GENERATION_NODES,
    GPUS_PER_NODE,
    NUM_NODES,
    Issue,
    Placement,
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
TRAIN_TP = "policy.dtensor_cfg.tensor_parallel_size"
VLLM_TP = "policy.generation.vllm_cfg.tensor_parallel_size"
SEQ_DIVISOR = "policy.make_sequence_length_divisible_by"
ON_POLICY_RATIO = "loss_fn.force_on_policy_ratio"
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
    segment = ctx.get("cluster.segment_size") if "cluster.segment_size" in ctx.overrides else ctx.setting("cluster.segment_size")
    if rel.has_segment_size and segment is not None:
        # v0.7.0's base config has null; with a size, grpo.setup looks for NVLink domains
        # (nemo_rl/distributed/virtual_cluster.py prepare_segment_topology), finds none on GKE's
        # KubeRay nodes and falls back to unordered placement with a warning.
        yield warning(
            override_key("cluster.segment_size"),
            f"{segment}: {tag} then looks for NVLink domain segments, which KubeRay nodes on GKE do not report",
            "set cluster.segment_size=null (the base config's value)",
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
    """The GPUs NeMo RL asks Ray for are the worker groups' (v0.5.0 to v0.7.0): grpo.py setup builds
    its clusters from cluster.num_nodes x cluster.gpus_per_node (asserting GPUs per node > 0 and, at
    v0.7.0, enough alive nodes); nemo_rl/distributed/virtual_cluster.py RayVirtualCluster.__init__
    asserts num_gpus_per_node > 0 and _create_placement_groups_internal raises 'Not enough GPUs
    available', which _init_placement_groups retries and then gives up on."""
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
    """The GPU split and the parallel sizes NeMo RL asserts at start (v0.5.0 to v0.7.0):
    nemo_rl/algorithms/grpo.py setup (the generation placement: generation nodes and GPUs, training
    left over); lm_policy.py Policy.__init__ (training GPUs a multiple of PP x CP x TP, and the TP >= 4
    micro/logprob batch rule in _tp_accuracy); dtensor_policy_worker.py DTensorPolicyWorker.__init__
    (DTensorPolicyWorkerImpl.__init__ at v0.6.0+: world size = DP x TP x CP); vllm_generation.py
    VllmGeneration.__init__ (generation GPUs a multiple of vLLM TP x PP)."""
    nodes, gpn = _int(ctx, NUM_NODES), _int(ctx, GPUS_PER_NODE)
    tp = _int(ctx, "policy.dtensor_cfg.tensor_parallel_size")
    vtp = _int(ctx, "policy.generation.vllm_cfg.tensor_parallel_size")
    placed = ctx.placement
    if nodes is None or gpn is None or tp is None or vtp is None or placed is None:
        return
    gen_nodes, gen_gpn = _int(ctx, GENERATION_NODES), _int(ctx, GENERATION_GPUS_PER_NODE)
    if placed.issues:
        yield from _placement_findings(placed, nodes, gpn, gen_nodes, gen_gpn)
        return
    yield from _parallelism(ctx, gpn, tp, vtp, placed)


def _parallelism(ctx: Context, gpn: int, tp: int, vtp: int, placed: Placement) -> Iterator[Finding]:
    train_gpus, gen_gpus = placed.train_gpus, placed.generation_gpus
    cp = _int(ctx, "policy.dtensor_cfg.context_parallel_size", 1) or 1
    pp = _int(ctx, "policy.generation.vllm_cfg.pipeline_parallel_size", 1) or 1
    if tp < 1 or gpn % tp:
        yield error(override_key(TRAIN_TP), f"training tensor parallel {tp} does not divide the {gpn} GPUs of a node", "use 1, 2, 4 or 8")
    # vLLM: an instance of TP x PP GPUs larger than a node spans nodes in one placement group
    # (nemo_rl/models/generation/vllm/vllm_generation.py VllmGeneration.__init__,
    # needs_cross_node_parallelism, v0.5.0 to v0.7.0); within a node it must divide the node.
    if vtp < 1 or (vtp * pp <= gpn and gpn % (vtp * pp)):
        yield error(
            override_key(VLLM_TP),
            f"vLLM TP {vtp} x PP {pp} does not divide the {gpn} GPUs of a node",
            f"use a divisor of {gpn}, or a multiple of it to span nodes",
        )
    if tp >= 1 and train_gpus % (tp * cp):
        yield error(
            override_key(TRAIN_TP), f"{train_gpus} training GPUs are not divisible by TP {tp} x CP {cp}", "change TP or the node split"
        )
    if vtp >= 1 and gen_gpus % (vtp * pp):
        yield error(
            override_key(VLLM_TP),
            f"{gen_gpus} generation GPUs are not divisible by vLLM TP {vtp} x PP {pp} (VllmGeneration asserts it)",
            "change vLLM TP or the node split",
        )
    yield from _batches(ctx, train_gpus, tp, cp)
    yield from _tp_accuracy(ctx, tp)
    yield from _sequence_padding(ctx, tp)


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
    elif (gbs // dp) % micro and not _own_micro_batches(ctx):
        yield error(
            override_key("policy.train_micro_batch_size"),
            f"the per-rank batch {gbs // dp} is not divisible by the micro-batch {micro}",
            "use a divisor of the per-rank batch",
        )
    # nemo_rl/algorithms/grpo.py async_grpo_train asserts the samples per step divisible by the
    # data-parallel size (v0.5.0 to v0.7.0): the checks above imply it.
    if _on_policy_ratio(ctx) and gbs != samples:
        # grpo.py setup asserts it (v0.5.0 to v0.7.0): "force_on_policy_ratio requires
        # train_global_batch_size == num_prompts_per_step * num_generations_per_prompt".
        yield error(
            override_key("policy.train_global_batch_size"),
            f"{gbs}, but loss_fn.force_on_policy_ratio is true and NeMo RL then requires it to equal the {samples} samples per step",
            f"set it to {samples}, or loss_fn.force_on_policy_ratio=false",
        )


def _own_micro_batches(ctx: Context) -> bool:
    """Dynamic batching or sequence packing: the policy worker cuts a rank's share by token budget and
    asserts no multiple of the micro-batch; only its plain branch does (`make_microbatch_iterator(mbs)`
    in DTensorPolicyWorker.train, nemo_rl/models/policy/workers/dtensor_policy_worker.py, asserting in
    nemo_rl/distributed/batched_data_dict.py; v0.5.0 to v0.7.0)."""
    return any(ctx.setting(f"policy.{k}.enabled") is True for k in ("dynamic_batching", "sequence_packing"))


def _on_policy_ratio(ctx: Context) -> bool:
    value = ctx.get(ON_POLICY_RATIO)
    return (ctx.setting(ON_POLICY_RATIO) if value is None else value) is True


def _tp_accuracy(ctx: Context, tp: int) -> Iterator[Finding]:
    """v0.6.0+: Policy.__init__ (nemo_rl/models/policy/lm_policy.py) asserts micro batch ==
    logprob batch with TP >= 4 unless NRL_IGNORE_TP_ACCURACY_CHECK is set, which grpo.setup sets
    itself when loss_fn.force_on_policy_ratio is true (before it builds the policy)."""
    rel = ctx.release
    micro, logprob = _int(ctx, "policy.train_micro_batch_size"), _int(ctx, "policy.logprob_batch_size")
    bypass = any(e["name"] == "NRL_IGNORE_TP_ACCURACY_CHECK" for e in ctx.values.get("extraEnv", [])) or _on_policy_ratio(ctx)
    if rel is None or not rel.tp_micro_logprob_rule or tp < 4 or bypass or micro is None:
        return
    if logprob is None:
        yield error(
            override_key("policy.logprob_batch_size"),
            f"not set; with TP {tp} >= 4, {rel.tag} requires it to equal train_micro_batch_size ({micro}) and the recipe may differ",
            f"set policy.logprob_batch_size={micro}, or loss_fn.force_on_policy_ratio=true",
        )
    elif logprob != micro:
        yield error(
            override_key("policy.logprob_batch_size"),
            f"{logprob} differs from train_micro_batch_size {micro}; with TP {tp} >= 4 {rel.tag} refuses to start",
            f"set it to {micro}, or loss_fn.force_on_policy_ratio=true",
        )


def _sequence_padding(ctx: Context, tp: int) -> Iterator[Finding]:
    """NeMo RL pads every batch's sequences up to a multiple of make_sequence_length_divisible_by
    (nemo_rl/data/llm_message_utils.py batched_message_log_to_flat_message, v0.5.0 to v0.7.0) and
    asserts nothing more; a multiple of TP keeps sequence-parallel shards whole. The base
    configs default it to ${policy.dtensor_cfg.tensor_parallel_size}."""
    given = ctx.get(SEQ_DIVISOR)
    div = given if given is not None else ctx.setting(SEQ_DIVISOR)
    key = override_key(SEQ_DIVISOR)
    if not isinstance(div, int) or isinstance(div, bool):
        if given is None:
            yield warning(key, f"not set, and the recipe's value is not known here; it must be a multiple of TP {tp}", f"set it to {tp}")
        else:
            yield error(key, f"{given!r} is not a whole number", f"set it to {tp} or a multiple of it")
        return
    if div < 1 or (tp >= 1 and div % tp):
        yield error(key, f"{div} is not a multiple of the tensor parallel size {tp}", f"set it to {tp} or a multiple of it")


def check(ctx: Context) -> Iterator[Finding]:
    if not ctx.grpo.get("enabled", True):
        return
    yield from _syntax(ctx)
    # Required, among others, because v0.7.0's nemo_rl/distributed/virtual_cluster.py
    # _sort_bundle_indices_by_topology needs cluster.gpus_per_node.
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
