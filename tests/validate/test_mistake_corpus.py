"""A corpus of realistic single edits of generated values files, for the classes of issue 25 that
validate judges on the values alone (4 images, 6 environment, 7 NeMo RL values that train nothing,
8 cross-key rules, 9 models beyond the presets, 10 loggers): every mistake must be refused with an
error whose key names what to change, every legitimate edit accepted with no error. The counts are
printed (pytest -s) so the coverage is measured, not assumed."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from generator.validate.findings import ERROR, WARNING
from generator.validate.values import validate_values
from generator.values.build import Options, build

Values = dict[str, Any]
Edit = Callable[[Values], None]


@cache
def _base(tag: str, wandb: bool) -> Values:
    return build(Options(gpu="h200", release=tag, model="qwen2.5-1.5b", wandb=wandb))


def base(tag: str = "v0.7.0", wandb: bool = False) -> Values:
    return copy.deepcopy(_base(tag, wandb))


def ov(arg: str) -> Edit:
    """The user appends one override to grpo.extraOverrides."""
    return lambda v: v["grpo"]["extraOverrides"].append(arg)


def setov(key: str, value: str) -> Edit:
    """The user changes the value of one override the generator wrote."""

    def edit(v: Values) -> None:
        args = v["grpo"]["overrides"]
        for i, arg in enumerate(args):
            prefix = arg[: len(arg) - len(arg.lstrip("+"))]
            if arg.lstrip("+").split("=", 1)[0] == key:
                args[i] = f"{prefix}{key}={value}"
                return
        raise AssertionError(f"the generator wrote no {key}")

    return edit


def rename(run: str) -> Edit:
    """A run renamed everywhere the generator writes its name."""

    def edit(v: Values) -> None:
        old = v["grpo"]["runName"]
        v["grpo"]["runName"] = run
        v["grpo"]["overrides"] = [a.replace(old, run) for a in v["grpo"]["overrides"]]

    return edit


def sidecar(**image: str) -> Edit:
    def edit(v: Values) -> None:
        v["logging"]["fluentBit"]["enabled"] = True
        v["logging"]["fluentBit"]["image"].update(image)

    return edit


def ovs(*args: str) -> Edit:
    return lambda v: v["grpo"]["extraOverrides"].extend(args)


def drop(prefix: str) -> Edit:
    def edit(v: Values) -> None:
        v["grpo"]["overrides"] = [a for a in v["grpo"]["overrides"] if not a.lstrip("+").startswith(prefix)]

    return edit


def env(name: str, value: str) -> Edit:
    return lambda v: v["extraEnv"].append({"name": name, "value": value})


def nccl(name: str, value: str) -> Edit:
    return lambda v: v["nccl"]["extraEnv"].update({name: value})


def put(path: str, value: Any) -> Edit:
    def edit(v: Values) -> None:
        node = v
        parts = path.split(".")
        for p in parts[:-1]:
            node = node[p]
        node[parts[-1]] = value

    return edit


def model(name: str, tp: int | None = None) -> Edit:
    def edit(v: Values) -> None:
        ov(f"policy.model_name={name}")(v)
        ov(f"policy.tokenizer.name={name}")(v)
        if tp is not None:
            ov(f"policy.dtensor_cfg.tensor_parallel_size={tp}")(v)
            ov(f"policy.generation.vllm_cfg.tensor_parallel_size={tp}")(v)
            ov(f"policy.make_sequence_length_divisible_by={tp}")(v)

    return edit


def both(*edits: Edit) -> Edit:
    def edit(v: Values) -> None:
        for e in edits:
            e(v)

    return edit


@dataclass(frozen=True)
class Case:
    cls: int  # the class of issue 25
    name: str
    edit: Edit
    key: str = ""  # a mistake: text the error's key must contain ('a|b': either names the fix)
    tag: str = "v0.7.0"
    wandb: bool = False
    level: str = ERROR  # WARNING: what cannot be checked is said, not refused


MISTAKES = [
    # 4: images
    Case(4, "repository-upper-case", put("image.repository", "nvcr.io/NVIDIA/nemo-rl"), "image.repository"),
    Case(4, "repository-with-tag", put("image.repository", "nvcr.io/nvidia/nemo-rl:v0.7.0"), "image.repository"),
    Case(4, "repository-with-scheme", put("image.repository", "https://nvcr.io/nvidia/nemo-rl"), "image.repository"),
    Case(4, "repository-double-slash", put("image.repository", "nvcr.io//nvidia/nemo-rl"), "image.repository"),
    Case(4, "repository-trailing-separator", put("image.repository", "nvcr.io/nvidia/nemo-rl-"), "image.repository"),
    Case(4, "repository-nemo-framework", put("image.repository", "nvcr.io/nvidia/nemo"), "image.repository"),
    Case(4, "repository-ray", put("image.repository", "rayproject/ray"), "image.repository"),
    Case(4, "repository-pytorch", put("image.repository", "nvcr.io/nvidia/pytorch"), "image.repository"),
    Case(4, "tag-without-v", put("image.tag", "0.7.0"), "image.tag"),
    Case(4, "pull-never-not-preloaded", put("image.pullPolicy", "Never"), "image.pullPolicy"),
    Case(4, "sidecar-upper-case", sidecar(repository="Fluent/fluent-bit"), "logging.fluentBit.image.repository"),
    Case(4, "sidecar-tag-in-repository", sidecar(repository="fluent/fluent-bit:3.2.10"), "logging.fluentBit.image"),
    Case(4, "sidecar-latest", sidecar(tag="latest"), "logging.fluentBit.image.tag"),
    Case(4, "sidecar-pull-never", sidecar(pullPolicy="Never"), "logging.fluentBit.image.pullPolicy"),
    # 6: environment variables
    Case(6, "cuda-visible-one", env("CUDA_VISIBLE_DEVICES", "0"), "extraEnv"),
    Case(6, "cuda-visible-half", env("CUDA_VISIBLE_DEVICES", "0,1,2,3"), "extraEnv"),
    Case(6, "cuda-visible-empty", env("CUDA_VISIBLE_DEVICES", ""), "extraEnv"),
    Case(6, "cuda-visible-out-of-range", env("CUDA_VISIBLE_DEVICES", "1,2,3,4,5,6,7,8"), "extraEnv"),
    Case(6, "alloc-expandable-sleep", env("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"), "extraEnv"),
    Case(6, "alloc-expandable-lower", env("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:512,expandable_segments:true"), "extraEnv"),
    Case(6, "hf-home-off-volume", env("HF_HOME", "/root/.cache/huggingface"), "extraEnv"),
    Case(6, "hf-hub-cache-tmp", env("HF_HUB_CACHE", "/tmp/hf"), "extraEnv"),
    Case(6, "transformers-cache-home", env("TRANSFORMERS_CACHE", "/home/ray/.cache/huggingface"), "extraEnv"),
    Case(6, "datasets-cache-tmp", env("HF_DATASETS_CACHE", "/tmp/datasets"), "extraEnv"),
    Case(6, "nccl-p2p-disable", env("NCCL_P2P_DISABLE", "1"), "extraEnv"),
    Case(6, "nccl-shm-disable", nccl("NCCL_SHM_DISABLE", "1"), "nccl.extraEnv"),
    Case(6, "nccl-ib-disable-rdma", nccl("NCCL_IB_DISABLE", "1"), "nccl.extraEnv"),
    Case(6, "nccl-net-socket-rdma", nccl("NCCL_NET", "Socket"), "nccl.extraEnv"),
    Case(6, "nccl-p2p-level-loc", env("NCCL_P2P_LEVEL", "LOC"), "extraEnv"),
    Case(6, "head-shm-no-unit", put("head.shmSize", "12"), "head.shmSize"),
    Case(6, "worker-shm-no-unit", put("worker.shmSize", "256"), "worker.shmSize"),
    Case(6, "hf-offline-no-prepare", both(put("prepare.enabled", False), env("HF_HUB_OFFLINE", "1")), "extraEnv"),
    Case(6, "env-twice", both(env("TOKENIZERS_PARALLELISM", "false"), env("TOKENIZERS_PARALLELISM", "true")), "extraEnv"),
    # 7: NeMo RL values that train nothing or stop the run
    Case(7, "temperature-zero", ov("policy.generation.temperature=0.0"), "policy.generation.temperature"),
    Case(7, "top-k-zero", ov("policy.generation.top_k=0"), "policy.generation.top_k"),
    Case(7, "top-p-zero", ov("policy.generation.top_p=0.0"), "policy.generation.top_p"),
    Case(7, "top-p-above-one", ov("policy.generation.top_p=1.5"), "policy.generation.top_p"),
    Case(7, "save-period-zero", ov("checkpointing.save_period=0"), "checkpointing.save_period"),
    Case(7, "math-verify-unknown", ov("env.math.math_verify_impl=math_verify"), "env.math.math_verify_impl"),
    Case(7, "optimizer-lower-case", ov("policy.optimizer.name=torch.optim.adamw"), "policy.optimizer.name"),
    Case(7, "optimizer-bare-name", ov("policy.optimizer.name=AdamW"), "policy.optimizer.name"),
    Case(7, "optimizer-wrong-module", ov("policy.optimizer.name=torch.nn.AdamW"), "policy.optimizer.name"),
    Case(7, "metric-no-prefix", ov("checkpointing.metric_name=accuracy"), "checkpointing.metric_name"),
    Case(7, "metric-underscore", ov("checkpointing.metric_name=val_accuracy"), "checkpointing.metric_name"),
    Case(7, "dataset-misspelled", ov("data.train.dataset_name=gsm-8k"), "data.train.dataset_name"),
    Case(7, "max-steps-zero", ov("grpo.max_num_steps=0"), "grpo.max_num_steps"),
    Case(7, "one-generation", ov("grpo.num_generations_per_prompt=1"), "grpo.num_generations_per_prompt"),
    Case(7, "lr-zero", ov("policy.optimizer.kwargs.lr=0.0"), "policy.optimizer.kwargs.lr"),
    Case(7, "max-new-tokens-zero", ov("policy.generation.max_new_tokens=0"), "policy.generation.max_new_tokens"),
    Case(7, "micro-batch-zero", ov("policy.train_micro_batch_size=0"), "policy.train_micro_batch_size"),
    Case(7, "global-batch-zero", ov("policy.train_global_batch_size=0"), "policy.train_global_batch_size"),
    Case(7, "logprob-batch-zero", ov("policy.logprob_batch_size=0"), "policy.logprob_batch_size"),
    Case(7, "epochs-zero", setov("grpo.max_num_epochs", "0"), "grpo.max_num_epochs"),
    Case(7, "val-batch-zero", ov("grpo.val_batch_size=0"), "grpo.val_batch_size"),
    Case(7, "math-workers-zero", ov("env.math.num_workers=0"), "env.math.num_workers"),
    Case(7, "kl-negative", ov("loss_fn.reference_policy_kl_penalty=-0.01"), "loss_fn.reference_policy_kl_penalty"),
    Case(7, "max-model-len-short", ov("policy.generation.vllm_cfg.max_model_len=128"), "max_model_len"),
    Case(7, "v050-top-k-zero", ov("policy.generation.top_k=0"), "policy.generation.top_k", tag="v0.5.0"),
    Case(7, "v060-temperature-zero", ov("policy.generation.temperature=0"), "policy.generation.temperature", tag="v0.6.0"),
    # 8: NeMo RL cross-key rules enforced only after the GPU workers started
    Case(8, "megatron-and-dtensor", ov("policy.megatron_cfg.enabled=true"), "policy.megatron_cfg.enabled"),
    Case(
        8, "dynamic-batching-and-packing", ov("policy.dynamic_batching.enabled=true"), "dynamic_batching.enabled|sequence_packing.enabled"
    ),
    Case(8, "cp-with-packing", ov("policy.dtensor_cfg.context_parallel_size=2"), "policy.dtensor_cfg.context_parallel_size"),
    Case(8, "lora-on-v1", ovs("policy.dtensor_cfg._v2=false", "policy.dtensor_cfg.lora_cfg.enabled=true"), "lora_cfg.enabled"),
    Case(8, "async-grpo-no-engine", ov("grpo.async_grpo.enabled=true"), "grpo.async_grpo.enabled"),
    Case(8, "vllm-pp-no-async", ov("policy.generation.vllm_cfg.pipeline_parallel_size=2"), "pipeline_parallel_size"),
    Case(
        8,
        "skip-reference-with-kl",
        ov("+grpo.skip_reference_policy_logprobs_calculation=true"),
        "skip_reference_policy_logprobs_calculation",
    ),
    Case(8, "val-period-no-validation", drop("data.validation"), "grpo.val_period|data.validation"),
    Case(8, "vllm-kwargs-gpu-memory", ov("+policy.generation.vllm_kwargs.gpu_memory_utilization=0.5"), "vllm_kwargs"),
    Case(8, "vllm-kwargs-tp", ov("+policy.generation.vllm_kwargs.tensor_parallel_size=2"), "vllm_kwargs"),
    Case(8, "vllm-kwargs-max-model-len", ov("+policy.generation.vllm_kwargs.max_model_len=4096"), "vllm_kwargs"),
    Case(8, "no-training-backend", ov("policy.dtensor_cfg.enabled=false"), "policy.dtensor_cfg.enabled"),
    Case(8, "vllm-kwargs-prefix-caching", ov("+policy.generation.vllm_kwargs.enable_prefix_caching=true"), "vllm_kwargs"),
    Case(8, "v050-vllm-kwargs-seed", ov("+policy.generation.vllm_kwargs.seed=1"), "vllm_kwargs", tag="v0.5.0"),
    # 9: models beyond the presets
    Case(9, "qwen25-7b-tp8", model("Qwen/Qwen2.5-7B", 8), "tensor_parallel_size"),
    Case(9, "qwen25-3b-tp4", model("Qwen/Qwen2.5-3B", 4), "tensor_parallel_size"),
    Case(9, "qwen25-3b-tp8", model("Qwen/Qwen2.5-3B", 8), "tensor_parallel_size"),
    Case(9, "qwen3-30b-a3b-tp8", model("Qwen/Qwen3-30B-A3B", 8), "tensor_parallel_size"),
    Case(9, "qwen25-15b-tp4", model("Qwen/Qwen2.5-1.5B", 4), "tensor_parallel_size"),
    Case(
        9, "qwen3-8b-wrong-tokenizer", both(model("Qwen/Qwen3-8B"), ov("policy.tokenizer.name=Qwen/Qwen2.5-1.5B")), "policy.tokenizer.name"
    ),
    Case(9, "unknown-model", model("acme/house-model-7b"), "policy.model_name", level=WARNING),
    Case(9, "instruct-variant-not-carried", model("Qwen/Qwen2.5-7B-Instruct", 8), "policy.model_name", level=WARNING),
    # 10: loggers
    Case(10, "wandb-project-colon", ov("logger.wandb.project=gsm8k:qwen"), "logger.wandb.project", wandb=True),
    Case(10, "wandb-id-colon", setov("logger.wandb.id", "run:2"), "logger.wandb.id", wandb=True),
    Case(10, "wandb-project-slash", ov("logger.wandb.project=team/grpo"), "logger.wandb.project", wandb=True),
    Case(10, "wandb-project-long", ov("logger.wandb.project=" + "p" * 129), "logger.wandb.project", wandb=True),
    Case(10, "wandb-entity-with-project", ov("+logger.wandb.entity=my-team/grpo"), "logger.wandb.entity", wandb=True),
    Case(10, "wandb-resume-must-first", setov("logger.wandb.resume", "must"), "logger.wandb.resume", wandb=True),
    Case(10, "wandb-resume-typo", setov("logger.wandb.resume", "resume"), "logger.wandb.resume", wandb=True),
    Case(10, "wandb-unknown-kwarg", ov("+logger.wandb.run_id=abc"), "logger.wandb.run_id", wandb=True),
    Case(10, "wandb-dir", ov("+logger.wandb.dir=/data/wandb"), "logger.wandb.dir", wandb=True),
    Case(
        10,
        "wandb-id-kept-after-rename",
        both(rename("qwen-run-2"), setov("logger.wandb.id", "qwen2.5-1.5b-gsm8k")),
        "logger.wandb.id",
        wandb=True,
    ),
    Case(10, "wandb-id-bad-chars", setov("logger.wandb.id", "run/1"), "logger.wandb.id", wandb=True),
    Case(
        10,
        "mlflow-localhost",
        ov("logger.mlflow_enabled=true"),
        "logger.mlflow",
    ),
    Case(
        10,
        "mlflow-no-scheme",
        ovs("logger.mlflow_enabled=true", "logger.mlflow.tracking_uri=mlflow.mlflow:5000"),
        "logger.mlflow.tracking_uri",
    ),
    Case(10, "wandb-no-key", ov("logger.wandb_enabled=true"), "secrets"),
]

LEGITIMATE = [
    Case(7, "interpolated-max-new-tokens", ov("policy.generation.max_new_tokens=${policy.max_total_sequence_length}")),
    Case(7, "interpolated-max-model-len", ov("policy.generation.vllm_cfg.max_model_len=${policy.max_total_sequence_length}")),
    Case(7, "interpolated-bool", ov("logger.tensorboard_enabled=${checkpointing.enabled}")),
    Case(7, "interpolated-float", ov("loss_fn.ratio_clip_max=${loss_fn.ratio_clip_min}")),
    Case(7, "interpolated-str", ov("logger.wandb.name=${logger.wandb.project}")),
    Case(7, "temperature-07", ov("policy.generation.temperature=0.7")),
    Case(7, "top-p-095", ov("policy.generation.top_p=0.95")),
    Case(7, "top-k-50", ov("policy.generation.top_k=50")),
    Case(7, "save-period-5", ov("checkpointing.save_period=5")),
    Case(7, "optimizer-adam", ov("policy.optimizer.name=torch.optim.Adam")),
    Case(7, "lr-1e-6", ov("policy.optimizer.kwargs.lr=1.0e-06")),
    Case(7, "metric-train-loss", ovs("checkpointing.metric_name=train:loss", "checkpointing.higher_is_better=false")),
    Case(7, "math-verify-dapo", ov("env.math.math_verify_impl=dapo_math_verify")),
    Case(7, "grad-norm", ov("policy.max_grad_norm=0.5")),
    Case(7, "seed", ov("grpo.seed=7")),
    Case(8, "val-period-off", ov("grpo.val_period=0")),
    Case(7, "kl-zero", ov("loss_fn.reference_policy_kl_penalty=0")),
    Case(7, "max-model-len-longer", ov("policy.generation.vllm_cfg.max_model_len=1024")),
    Case(7, "math-workers-4", ov("env.math.num_workers=4")),
    Case(6, "nccl-p2p-level-nvl", env("NCCL_P2P_LEVEL", "NVL")),
    Case(8, "no-kl-skip-reference", ovs("loss_fn.reference_policy_kl_penalty=0", "+grpo.skip_reference_policy_logprobs_calculation=true")),
    Case(8, "vllm-kwargs-new-key", ov("+policy.generation.vllm_kwargs.max_num_seqs=256")),
    Case(8, "gpu-memory-05", ov("policy.generation.vllm_cfg.gpu_memory_utilization=0.5")),
    Case(6, "tokenizers-parallelism", env("TOKENIZERS_PARALLELISM", "false")),
    Case(6, "cuda-visible-all", env("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")),
    Case(6, "alloc-split-size", env("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:512")),
    Case(6, "hf-transfer", env("HF_HUB_ENABLE_HF_TRANSFER", "1")),
    Case(6, "hf-home-same", env("HF_HOME", "/data/huggingface")),
    Case(6, "hf-hub-cache-on-volume", env("HF_HUB_CACHE", "/data/huggingface/hub")),
    Case(6, "hf-offline-prepared", env("HF_HUB_OFFLINE", "1")),
    Case(6, "nccl-tuner-none", nccl("NCCL_TUNER_PLUGIN", "none")),
    Case(6, "head-shm-8gi", put("head.shmSize", "8Gi")),
    Case(4, "artifact-registry-mirror", put("image.repository", "us-docker.pkg.dev/my-proj/mirror/nemo-rl")),
    Case(4, "local-registry", put("image.repository", "localhost:5000/nvidia/nemo-rl")),
    Case(4, "pull-always", put("image.pullPolicy", "Always")),
    Case(4, "digest", put("image.digest", "sha256:" + "a" * 64)),
    Case(4, "sidecar-on", put("logging.fluentBit.enabled", True)),
    Case(4, "sidecar-mirror", put("logging.fluentBit.image.repository", "us-docker.pkg.dev/my-proj/mirror/fluent-bit")),
    Case(
        4,
        "pull-never-preloaded",
        both(put("image.pullPolicy", "Never"), put("image.preload", {"diskImage": "nemo-rl-v070", "project": "my-proj"})),
    ),
    Case(9, "qwen3-8b-tp8", model("Qwen/Qwen3-8B", 8)),
    Case(9, "qwen25-7b-tp4", model("Qwen/Qwen2.5-7B", 4)),
    Case(9, "qwen25-14b-tp8", model("Qwen/Qwen2.5-14B", 8)),
    Case(9, "qwen3-4b-tp2", model("Qwen/Qwen3-4B", 2)),
    Case(10, "wandb-project", ov("logger.wandb.project=nemo-rl-grpo"), wandb=True),
    Case(10, "wandb-entity", ov("+logger.wandb.entity=my-team"), wandb=True),
    Case(10, "wandb-renamed-with-id", rename("qwen-run-2"), wandb=True),
    Case(10, "wandb-resume-never", setov("logger.wandb.resume", "never"), wandb=True),
    Case(10, "wandb-group-tags", ovs("+logger.wandb.group=sweep-1", "+logger.wandb.tags=[grpo,gsm8k]"), wandb=True),
    Case(10, "mlflow-server", ovs("logger.mlflow_enabled=true", "logger.mlflow.tracking_uri=http://mlflow.mlflow.svc:5000")),
    Case(10, "tensorboard-off", ov("logger.tensorboard_enabled=false")),
]


def _findings(case: Case) -> list[Any]:
    v = base(case.tag, case.wandb)
    case.edit(v)
    return validate_values(v, objects=False)


def _caught(case: Case) -> bool:
    return any(f.level == case.level and any(k in f.key for k in case.key.split("|")) for f in _findings(case))


def test_the_corpus_is_large_enough_and_covers_every_class():
    assert len(MISTAKES) >= 60 and len(LEGITIMATE) >= 30
    assert {c.cls for c in MISTAKES} == {4, 6, 7, 8, 9, 10}
    assert len({c.name for c in MISTAKES + LEGITIMATE}) == len(MISTAKES) + len(LEGITIMATE)


def test_the_base_files_are_valid():
    for tag in ("v0.5.0", "v0.6.0", "v0.7.0"):
        for wandb in (False, True):
            v = base(tag, wandb)
            errors = [f"{f.key}: {f.message}" for f in validate_values(v, objects=False) if f.level == ERROR]
            assert errors == [], (tag, wandb)


def test_every_mistake_is_caught_naming_its_key_and_every_legitimate_edit_accepted(capsys):
    missed = [f"[{c.cls}] {c.name}: {[(f.key, f.level) for f in _findings(c)]}" for c in MISTAKES if not _caught(c)]
    refused = [
        f"[{c.cls}] {c.name}: {[f'{f.key}: {f.message}' for f in _findings(c) if f.level == ERROR]}"
        for c in LEGITIMATE
        if any(f.level == ERROR for f in _findings(c))
    ]
    with capsys.disabled():
        print(
            f"\nmistake corpus: {len(MISTAKES) - len(missed)}/{len(MISTAKES)} caught with the key named,"
            f" {len(LEGITIMATE) - len(refused)}/{len(LEGITIMATE)} legitimate edits accepted"
        )
    assert missed == [] and refused == [], "\n".join(["missed:", *missed, "refused:", *refused])
