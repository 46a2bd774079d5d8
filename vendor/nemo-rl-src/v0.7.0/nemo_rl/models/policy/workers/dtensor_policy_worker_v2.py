# Copyright (c) 2025, NVIDIA CORPORATION.  All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

import contextlib
import gc
import warnings
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Generator, Iterable, Optional

import ray
import torch
from nemo_automodel.components._peft.lora import LinearLoRA
from nemo_automodel.components.distributed.cp_utils import (
    create_context_parallel_ctx,
)
from nemo_automodel.components.distributed.cp_utils import (
    get_train_context as get_train_context_automodel,
)
from nemo_automodel.components.distributed.tensor_utils import (
    get_cpu_state_dict,
    to_local_if_dtensor,
)
from nemo_automodel.components.training.utils import scale_grads_and_clip_grad_norm
from torch import nn
from torch.distributed.tensor import DTensor

from nemo_rl.algorithms.logits_sampling_utils import TrainingSamplingParams
from nemo_rl.algorithms.loss.interfaces import LossFunction
from nemo_rl.data_plane.worker_mixin import TQWorkerMixin
from nemo_rl.distributed.batched_data_dict import BatchedDataDict
from nemo_rl.models.automodel.checkpoint import AutomodelCheckpointManager
from nemo_rl.models.automodel.data import (
    check_sequence_dim,
    get_microbatch_iterator,
    process_global_batch,
)
from nemo_rl.models.automodel.setup import (
    setup_distributed,
    setup_model_and_optimizer,
    setup_reference_model_state,
    validate_and_prepare_config,
)
from nemo_rl.models.automodel.train import (
    FullLogitsPostProcessor,
    LogprobsPostProcessor,
    LossPostProcessor,
    ScorePostProcessor,
    TopkLogitsPostProcessor,
    aggregate_training_statistics,
    automodel_forward_backward,
    forward_with_post_processing_fn,
)
from nemo_rl.models.policy import PolicyConfig
from nemo_rl.models.policy.interfaces import (
    ColocatablePolicyInterface,
    LogprobOutputSpec,
    ScoreOutputSpec,
)
from nemo_rl.models.policy.utils import (
    ensure_teacher_ipc_buffer,
    get_runtime_env_for_policy_worker,
)
from nemo_rl.models.policy.workers.base_policy_worker import AbstractPolicyWorker
from nemo_rl.models.policy.workers.patches import (
    apply_transformer_engine_patch,
)
from nemo_rl.utils.checkpoint import CheckpointingConfig
from nemo_rl.utils.nsys import wrap_with_nvtx_name
from nemo_rl.utils.packed_tensor import packed_broadcast_producer


def dtensor_params_generator(
    model: nn.Module, target_dtype: torch.dtype
) -> Generator[tuple[str, torch.Tensor], None, None]:
    """Generator that yields (name, tensor) pairs, converting DTensors to local tensors and adapting to HF format.

    Args:
        model: The model whose parameters to generate.
        target_dtype: The dtype to convert tensors to.
        peft_config: Optional LoRA config for filtering which layers to merge.

    Yields:
        Tuples of (fully_qualified_name, tensor) where tensors are converted to target dtype and made contiguous.
    """
    module_map = dict(model.named_modules())
    for name, tensor in model.state_dict().items():
        if name.endswith(".lora_A.weight") or name.endswith(".lora_B.weight"):
            continue
        full_tensor = tensor.full_tensor() if isinstance(tensor, DTensor) else tensor
        merged_tensor = _maybe_merge_lora_weight(module_map, name, full_tensor)

        adapted_fqn_tensors = _maybe_adapt_tensor_to_hf(model, name, merged_tensor)
        for adapted_fqn, adapted_tensor in adapted_fqn_tensors:
            # Convert to target dtype
            yield (
                adapted_fqn,
                adapted_tensor.to(target_dtype, non_blocking=True).contiguous(),
            )
            del adapted_tensor
        del adapted_fqn_tensors
        del merged_tensor
        del full_tensor


@torch.no_grad()
def _maybe_merge_lora_weight(
    module_map: dict[str, nn.Module],
    fqn: str,
    tensor: torch.Tensor,
) -> torch.Tensor:
    if not fqn.endswith(".weight"):
        return tensor
    module_name = fqn[: -len(".weight")]
    module = module_map.get(module_name)
    if not isinstance(module, LinearLoRA):
        return tensor
    if not (hasattr(module, "lora_A") and hasattr(module, "lora_B")):
        return tensor

    lora_a = (
        module.lora_A.weight.full_tensor()
        if isinstance(module.lora_A.weight, DTensor)
        else module.lora_A.weight
    )
    lora_b = (
        module.lora_B.weight.full_tensor()
        if isinstance(module.lora_B.weight, DTensor)
        else module.lora_B.weight
    )
    lora_a = lora_a.to(device=tensor.device, dtype=tensor.dtype)
    lora_b = lora_b.to(device=tensor.device, dtype=tensor.dtype)
    scale = getattr(module, "scale", None)

    if scale is None and hasattr(module, "alpha") and hasattr(module, "dim"):
        scale = module.alpha / module.dim
    if scale is None:
        scale = 1.0

    return tensor + torch.matmul(lora_b, lora_a) * scale


def _maybe_adapt_tensor_to_hf(
    model_part: nn.Module, fqn: str, tensor: torch.Tensor, quantization: bool = False
) -> list[tuple[str, torch.Tensor]]:
    adapter = getattr(model_part, "state_dict_adapter", None)
    if adapter:
        return adapter.convert_single_tensor_to_hf(
            fqn,
            tensor,
            exclude_key_regex=r".*_extra_state.*",
            quantization=quantization,
        )
    return [(fqn, tensor)]


@contextlib.contextmanager
def get_train_context(
    cp_size: int,
    cp_mesh: Any,
    cp_buffers: list,
    sequence_dim: int,
    dtype: torch.dtype,
    autocast_enabled: bool = True,
) -> Generator[None, None, None]:
    """Create combined context manager for training with context parallel and autocast."""
    with contextlib.ExitStack() as stack:
        context_parallel_ctx = None
        if cp_size > 1:
            # Create context parallel context
            context_parallel_ctx = create_context_parallel_ctx(
                cp_mesh=cp_mesh,
                cp_buffers=cp_buffers,
                cp_seq_dims=[sequence_dim] * len(cp_buffers),
                cp_no_restore_buffers=set(cp_buffers),
            )

        stack.enter_context(
            get_train_context_automodel(False, False, context_parallel_ctx)()
        )
        if autocast_enabled:
            stack.enter_context(torch.autocast(device_type="cuda", dtype=dtype))
        yield


# Classes with @ray.remote can't be inherited from, so we split the implementation out.
# This is useful when using worker extension classes.
class DTensorPolicyWorkerV2Impl(
    TQWorkerMixin, AbstractPolicyWorker, ColocatablePolicyInterface
):
    def __repr__(self) -> str:
        """Customizes the actor's prefix in the Ray logs.

        This makes it easier to identify which worker is producing specific log messages.
        """
        if torch.distributed.is_initialized():
            return f"{self.__class__.__qualname__}[rank={torch.distributed.get_rank()}]"
        else:
            return f"{self.__class__.__qualname__}"

    def _get_replica_group(self) -> Optional[Any]:
        """Replica group = flattened (cp, tp) sub-mesh — see V1 worker."""
        return self.device_mesh[("cp", "tp")]._flatten().get_group()

    def _local_coords(self) -> dict[str, int]:
        return {
            "tensor_parallel": self.device_mesh["tp"].get_local_rank(),
            "context_parallel": self.device_mesh["cp"].get_local_rank(),
        }

    def __init__(
        self,
        config: PolicyConfig,
        weights_path: Optional[str] = None,
        optimizer_path: Optional[str] = None,
        init_optimizer: bool = True,
        init_reference_model: bool = True,
        **kwargs: Any,
    ):
        """Initialize the DTensorPolicyWorkerV2."""
        # Apply TE patch until TE is upgraded to 2.10.0
        apply_transformer_engine_patch()

        from nemo_rl.distributed.numa_utils import bind_to_gpu_numa

        # Pin to this worker's GPU-local CPUs/memory before model load; FSDP's
        # D2H paths (weight refit, optimizer/checkpoint offload) benefit.
        # ray.get_gpu_ids()[0] is the physical GPU index that keys the affinity
        # file, and reading it does not initialize CUDA.
        bind_to_gpu_numa(int(ray.get_gpu_ids()[0]))

        # Store configuration
        self.cfg = config

        # Reconstruct tokenizer/processor locally to avoid pickling across
        # incompatible transformers versions (v4 head node → v5 worker).
        from nemo_rl.models.automodel.setup import get_tokenizer

        use_processor = config["tokenizer"].get("use_processor", False)
        result = get_tokenizer(config["tokenizer"], get_processor=use_processor)
        if use_processor:
            self.processor = result
            self.tokenizer = result.tokenizer
        else:
            self.tokenizer = result
            self.processor = None
        self.is_vlm = self.processor is not None
        self.lora_enabled = (
            config["dtensor_cfg"].get("lora_cfg", {}).get("enabled", False)
        )

        print(f"Initializing DTensorPolicyWorkerV2 with is_vlm={self.is_vlm}")

        # Initialize checkpoint manager
        self.checkpoint_manager: Optional[AutomodelCheckpointManager] = None

        # Persistent CUDA IPC buffer for cross-tokenizer teacher logits.
        # Allocated once on first ``get_full_logits_ipc`` call (or
        # reallocated if dims grow), with fresh logits ``.copy_()``-ed into
        # each microbatch slot per step and exposed via a stable IPC handle
        # captured at allocation. Persistent storage means the producer never
        # frees between steps, so the consumer can safely hold a view into the
        # IPC-imported storage without pinning an orphaned producer allocation.
        self._teacher_ipc_storage: Optional[torch.Tensor] = None
        self._teacher_ipc_handle: Optional[tuple[Any, ...]] = None

        # Validate configuration and prepare runtime settings
        runtime_config = validate_and_prepare_config(
            config=config,
            processor=self.processor,
            rank=0,  # Temporary, will be updated after distributed init
        )

        # Set up distributed environment (returns DistributedContext)
        distributed_context = setup_distributed(
            config=config,
            runtime_config=runtime_config,
        )
        # Set instance attributes from distributed context
        self.rank = torch.distributed.get_rank()
        self.device_mesh = distributed_context.device_mesh
        self.dp_cp_mesh = self.device_mesh["dp_cp"]
        self.dp_mesh = self.device_mesh["dp"]
        self.tp_mesh = self.device_mesh["tp"]
        self.cp_mesh = self.device_mesh["cp"]
        self.moe_mesh = distributed_context.moe_mesh
        self.dp_size = distributed_context.dp_size
        self.tp_size = distributed_context.tp_size
        self.cp_size = distributed_context.cp_size

        # Initialize checkpoint manager now that distributed is set up
        self._init_checkpoint_manager(
            config_updates={
                "model_repo_id": config["model_name"],
                "dequantize_base_checkpoint": config.get(
                    "dequantize_base_checkpoint", False
                ),
                "is_peft": self.lora_enabled,
                "is_async": True,
            },
        )

        # Set up model and optimizer
        model_and_optimizer_state = setup_model_and_optimizer(
            config=config,
            tokenizer=self.tokenizer,
            runtime_config=runtime_config,
            distributed_context=distributed_context,
            checkpoint_manager=self.checkpoint_manager,
            is_vlm=self.is_vlm,
            init_optimizer=init_optimizer,
            weights_path=weights_path,
            optimizer_path=optimizer_path,
        )

        # Set instance attributes from model and optimizer state (tuple unpacking)
        (
            self.model,
            self.optimizer,
            self.scheduler,
            self.is_hf_model,
            self.is_moe_model,
            self._is_reward_model,  # Note: using underscore prefix for internal naming
            self.model_class,
            self.model_config,
            self.peft_config,
            self.autocast_enabled,
        ) = model_and_optimizer_state

        # Initialize reference model if requested
        self.reference_model_state_dict = None
        if init_reference_model:
            self.reference_model_state_dict = setup_reference_model_state(self.model)

        # Set instance attributes from runtime config (tuple unpacking)
        (
            self.model_class,  # Already set above, but includes in tuple for completeness
            self.model_config,  # Already set above, but includes in tuple for completeness
            self.hf_config_overrides,
            self.allow_flash_attn_args,
            self.attn_impl,
            self.dtype,
            self.enable_seq_packing,
            self.max_grad_norm,
            self.cpu_offload,
            self.offload_optimizer_for_logprob,
            self.is_generation_colocated,
            self.sampling_params,
            _runtime_is_reward_model,  # Duplicate, already set as _is_reward_model
        ) = runtime_config

        # Rollout topology constant for SGLang colocated refit: set once via
        # ``set_rollout_num_gpus_per_engine`` after the SGLang generation
        # handle exists and consumed by ``stream_weights_via_http`` on each
        # refit. Only initialized on the SGLang colocated path since no other
        # generation backend uses this attribute.
        generation_backend = config.get("generation", {}).get("backend")
        if generation_backend == "sglang":
            from nemo_rl.models.generation.sglang.utils.train_utils import (
                monkey_patch_torch_reductions,
            )

            monkey_patch_torch_reductions()
            if self.is_generation_colocated:
                self._rollout_num_gpus_per_engine: Optional[int] = None
                self._ipc_worker_state: dict = {}

    def _update_moe_gate_bias_if_supported(self) -> None:
        """Update the non-gradient MoE routing bias after the optimizer step."""
        update_moe_gate_bias = getattr(self.model, "update_moe_gate_bias", None)
        if update_moe_gate_bias is not None:
            update_moe_gate_bias()

    def set_rollout_num_gpus_per_engine(self, num_gpus_per_engine: int) -> None:
        """Record the rollout engine's TP size for later use in ``stream_weights_via_http``."""
        self._rollout_num_gpus_per_engine = num_gpus_per_engine

    @wrap_with_nvtx_name("dtensor_policy_worker_v2/train")
    def train(
        self,
        data: BatchedDataDict[Any],
        loss_fn: LossFunction,
        eval_mode: bool = False,
        gbs: Optional[int] = None,
        mbs: Optional[int] = None,
        check_dim_skip_keys: Optional[Iterable[str]] = None,
    ) -> dict[str, Any]:
        """Train the policy on a batch of data with a given loss function."""
        if gbs is None:
            gbs = self.cfg["train_global_batch_size"]
        if mbs is None:
            mbs = self.cfg["train_micro_batch_size"]
        local_gbs = gbs // self.dp_size
        total_dataset_size = torch.tensor(data.size, device="cuda")
        torch.distributed.all_reduce(
            total_dataset_size,
            op=torch.distributed.ReduceOp.SUM,
            group=self.dp_mesh.get_group(),
        )
        num_global_batches = int(total_dataset_size.item()) // gbs

        # Validate sequence dimension
        sequence_dim, _ = check_sequence_dim(data, skip_keys=check_dim_skip_keys)

        if eval_mode:
            ctx: AbstractContextManager[Any] = torch.no_grad()
            self.model.eval()
        else:
            ctx = nullcontext()
            # Ensure model is in training mode
            self.model.train()

        # Create loss post-processor
        loss_post_processor = LossPostProcessor(
            loss_fn=loss_fn,
            cfg=self.cfg,
            device_mesh=self.device_mesh,
            cp_mesh=self.cp_mesh,
            tp_mesh=self.tp_mesh,
            cp_size=self.cp_size,
            dp_size=self.dp_size,
            enable_seq_packing=self.enable_seq_packing,
            sampling_params=self.sampling_params,
        )

        # Create train context factory
        def train_context_fn(processed_inputs):
            return get_train_context(
                cp_size=self.cp_size,
                cp_mesh=self.cp_mesh,
                cp_buffers=processed_inputs.cp_buffers,
                sequence_dim=sequence_dim,
                dtype=self.dtype,
                autocast_enabled=self.autocast_enabled,
            )

        # Setup cache clearing callback if configured
        empty_cache_steps = self.cfg.get("dtensor_cfg", {}).get(
            "clear_cache_every_n_steps"
        )
        if empty_cache_steps:
            warnings.warn(
                f"Emptying cache every {empty_cache_steps} microbatches; doing so unnecessarily would incur a large performance overhead.",
            )

        def on_microbatch_start(mb_idx):
            if empty_cache_steps and mb_idx % empty_cache_steps == 0:
                torch.cuda.empty_cache()

        with ctx:
            # Get data from batch and move to device
            data = data.to("cuda")

            losses = []
            all_mb_metrics = []
            for gb_idx in range(num_global_batches):
                # Process global batch and compute normalization factors
                gb_result = process_global_batch(
                    data,
                    loss_fn,
                    self.dp_mesh.get_group(),
                    batch_idx=gb_idx,
                    batch_size=local_gbs,
                )
                batch = gb_result["batch"]
                global_valid_seqs = gb_result["global_valid_seqs"]
                global_valid_toks = gb_result["global_valid_toks"]

                self.optimizer.zero_grad()

                # Get microbatch iterator based on batching strategy
                processed_iterator, iterator_len = get_microbatch_iterator(
                    batch,
                    self.cfg,
                    mbs,
                    self.dp_mesh,
                    tokenizer=self.tokenizer,
                    cp_size=self.cp_size,
                )

                # Use automodel_forward_backward for the training loop
                mb_results = automodel_forward_backward(
                    model=self.model,
                    data_iterator=processed_iterator,
                    post_processing_fn=loss_post_processor,
                    forward_only=eval_mode,
                    is_reward_model=self._is_reward_model,
                    allow_flash_attn_args=self.allow_flash_attn_args,
                    global_valid_seqs=global_valid_seqs,
                    global_valid_toks=global_valid_toks,
                    sampling_params=self.sampling_params,
                    sequence_dim=sequence_dim,
                    dp_size=self.dp_size,
                    cp_size=self.cp_size,
                    num_global_batches=num_global_batches,
                    train_context_fn=train_context_fn,
                    num_valid_microbatches=iterator_len,
                    on_microbatch_start=on_microbatch_start,
                )

                # Extract losses and metrics from results
                mb_losses = []
                for mb_idx, (loss, loss_metrics) in enumerate(mb_results):
                    # Only process valid (non-dummy) batches for metrics
                    if mb_idx < iterator_len:
                        num_valid_samples = loss_metrics["num_valid_samples"]
                        loss_metrics["lr"] = self.optimizer.param_groups[0]["lr"]
                        loss_metrics["global_valid_seqs"] = global_valid_seqs.item()
                        loss_metrics["global_valid_toks"] = global_valid_toks.item()

                        if num_valid_samples > 0:
                            mb_losses.append(loss.item())
                            all_mb_metrics.append(loss_metrics)

                grad_norm: Optional[float | torch.Tensor] = None
                if not eval_mode:
                    grad_norm = scale_grads_and_clip_grad_norm(
                        self.max_grad_norm,
                        [self.model],
                        norm_type=2.0,
                        pp_enabled=False,
                        device_mesh=self.device_mesh,
                        moe_mesh=self.moe_mesh,
                        ep_axis_name="ep"
                        if self.moe_mesh is not None
                        and "ep" in self.moe_mesh.mesh_dim_names
                        else None,
                        pp_axis_name=None,
                        foreach=True,
                        num_label_tokens=1,
                        dp_group_size=self.dp_size * self.cp_size,
                    )
                    grad_norm = torch.tensor(
                        grad_norm, device="cpu", dtype=torch.float32
                    )

                    # Update parameters and the non-gradient MoE routing bias.
                    self.optimizer.step()
                    self._update_moe_gate_bias_if_supported()

                losses.append(torch.tensor(mb_losses).sum().item())

            # release gradient memory before rollouts
            self.optimizer.zero_grad()
            # increment scheduler after all batches in rollout are processed
            if not eval_mode:
                self.scheduler.step()
            # dynamic batch and sequence dims causes alot of fragmentation, so clear
            # the memory allocator before moving on
            torch.cuda.empty_cache()

            # Aggregate training statistics across microbatches and ranks
            metrics = aggregate_training_statistics(
                losses=losses,
                all_mb_metrics=all_mb_metrics,
                grad_norm=grad_norm,
                dp_group=self.dp_mesh.get_group(),
                dtype=self.dtype,
            )

            return metrics

    @wrap_with_nvtx_name("dtensor_policy_worker_v2/get_logprobs")
    def get_logprobs(
        self, data: BatchedDataDict[Any], micro_batch_size: Optional[int] = None
    ) -> BatchedDataDict[LogprobOutputSpec]:
        """Get the logprobs of the model for a batch of data.

        Uses the configured logprob_batch_size to do microbatching.

        Input data is assumed to be right-padded. The method internally converts to
        left-padded format for computation, and returns outputs in right-padded format.

        Returns:
          a BatchedDataDict with key "logprobs" and shape [batch_size, sequence_length].
          We use the convention that the logprob of the first token is 0 so that the sequence length is maintained.
          The logprob of input token i is specified at position i in the output logprobs tensor.
        """
        logprob_batch_size = (
            micro_batch_size
            if micro_batch_size is not None
            else self.cfg["logprob_batch_size"]
        )

        # Validate sequence dimension
        sequence_dim, seq_dim_size = check_sequence_dim(data)

        all_log_probs = []
        self.model.eval()

        # Create logprobs post-processor
        logprobs_post_processor = LogprobsPostProcessor(
            cfg=self.cfg,
            device_mesh=self.device_mesh,
            cp_mesh=self.cp_mesh,
            tp_mesh=self.tp_mesh,
            cp_size=self.cp_size,
            enable_seq_packing=self.enable_seq_packing,
            sampling_params=self.sampling_params,
        )

        with torch.no_grad():
            data.to("cuda")
            # Get microbatch iterator based on batching strategy
            processed_iterator, iterator_len = get_microbatch_iterator(
                data,
                self.cfg,
                logprob_batch_size,
                self.dp_mesh,
                tokenizer=self.tokenizer,
                cp_size=self.cp_size,
            )

            for batch_idx, processed_mb in enumerate(processed_iterator):
                processed_inputs = processed_mb.processed_inputs

                with get_train_context(
                    cp_size=self.cp_size,
                    cp_mesh=self.cp_mesh,
                    cp_buffers=processed_inputs.cp_buffers,
                    sequence_dim=sequence_dim,
                    dtype=self.dtype,
                    autocast_enabled=self.autocast_enabled,
                ):
                    # Use forward_with_post_processing_fn for forward pass and post-processing
                    token_logprobs, _metrics, _ = forward_with_post_processing_fn(
                        model=self.model,
                        post_processing_fn=logprobs_post_processor,
                        processed_mb=processed_mb,
                        is_reward_model=False,
                        allow_flash_attn_args=self.allow_flash_attn_args,
                        sampling_params=self.sampling_params,
                        sequence_dim=sequence_dim,
                    )

                # skip keeping the logprobs for the dummy batches
                if batch_idx >= iterator_len:
                    continue

                all_log_probs.append(token_logprobs)

        # Concatenate all batches
        return_data = BatchedDataDict[LogprobOutputSpec]()

        all_log_probs_padded = []
        for lp in all_log_probs:
            padding_needed = seq_dim_size - lp.shape[1]
            if padding_needed > 0:
                lp = torch.nn.functional.pad(
                    lp, (0, padding_needed), mode="constant", value=0.0
                )
            all_log_probs_padded.append(lp)
        return_data["logprobs"] = torch.cat(all_log_probs_padded, dim=0).cpu()

        return return_data

    @wrap_with_nvtx_name("dtensor_policy_worker_v2/score")
    def score(self, data: BatchedDataDict) -> BatchedDataDict[ScoreOutputSpec]:
        global_batch_size = min(self.cfg["batch_size"], data.size)

        # Validate sequence dimension
        sequence_dim, _ = check_sequence_dim(data)

        self.model.eval()
        print("Begin to batch datas")

        # Create score post-processor
        score_post_processor = ScorePostProcessor(cfg=self.cfg)

        with torch.no_grad():
            data.to("cuda")
            # Get microbatch iterator based on batching strategy
            processed_iterator, iterator_len = get_microbatch_iterator(
                data,
                self.cfg,
                global_batch_size,
                self.dp_mesh,
                tokenizer=self.tokenizer,
                cp_size=self.cp_size,
            )

            all_rm_scores = []
            for batch_idx, processed_mb in enumerate(processed_iterator):
                processed_inputs = processed_mb.processed_inputs

                with get_train_context(
                    cp_size=self.cp_size,
                    cp_mesh=self.cp_mesh,
                    cp_buffers=processed_inputs.cp_buffers,
                    sequence_dim=sequence_dim,
                    dtype=self.dtype,
                    autocast_enabled=self.autocast_enabled,
                ):
                    # Use forward_with_post_processing_fn for forward pass and post-processing
                    rm_scores, _metrics, _ = forward_with_post_processing_fn(
                        model=self.model,
                        post_processing_fn=score_post_processor,
                        processed_mb=processed_mb,
                        is_reward_model=True,
                        allow_flash_attn_args=False,
                        sampling_params=self.sampling_params,
                        sequence_dim=sequence_dim,
                    )

                # skip keeping the scores for the dummy batches
                if batch_idx >= iterator_len:
                    continue

                all_rm_scores.append(rm_scores)

        all_rm_scores = torch.cat(all_rm_scores, dim=0)
        all_rm_scores = all_rm_scores.squeeze(-1).cpu()
        return_data = BatchedDataDict[ScoreOutputSpec](
            {
                "scores": all_rm_scores,
            }
        )
        return return_data

    @wrap_with_nvtx_name("dtensor_policy_worker_v2/get_topk_logits")
    def get_topk_logits(
        self,
        data: BatchedDataDict[Any],
        k: int,
        micro_batch_size: Optional[int] = None,
    ) -> BatchedDataDict[Any]:
        """Return per-position top-k logits and corresponding global indices.

        Notes:
        - Return shapes are [B, S, k].
        - Computes top-k over the full sequence (no trimming of the last position).
        - If alignment with next-token targets is required, the caller should handle it.
        - If logits are TP-sharded DTensor, performs distributed global top-k across TP.
        - Supports context parallelism with proper CP gather.
        - Otherwise, computes local top-k on full-vocab tensor.
        """
        topk_batch_size = (
            micro_batch_size
            if micro_batch_size is not None
            else self.cfg["logprob_batch_size"]
        )

        # Validate sequence dimension
        sequence_dim, seq_dim_size = check_sequence_dim(data)

        out_topk_vals = []
        out_topk_idx = []
        self.model.eval()

        # Create top-k post-processor
        topk_post_processor = TopkLogitsPostProcessor(
            cfg=self.cfg,
            device_mesh=self.device_mesh,
            cp_mesh=self.cp_mesh,
            tp_mesh=self.tp_mesh,
            cp_size=self.cp_size,
            k=k,
            enable_seq_packing=self.enable_seq_packing,
        )

        with torch.no_grad():
            data.to("cuda")
            # Get microbatch iterator based on batching strategy
            processed_iterator, iterator_len = get_microbatch_iterator(
                data,
                self.cfg,
                topk_batch_size,
                self.dp_mesh,
                tokenizer=self.tokenizer,
                cp_size=self.cp_size,
            )

            for batch_idx, processed_mb in enumerate(processed_iterator):
                processed_inputs = processed_mb.processed_inputs

                with get_train_context(
                    cp_size=self.cp_size,
                    cp_mesh=self.cp_mesh,
                    cp_buffers=processed_inputs.cp_buffers,
                    sequence_dim=sequence_dim,
                    dtype=self.dtype,
                    autocast_enabled=self.autocast_enabled,
                ):
                    # Use forward_with_post_processing_fn for forward pass and post-processing
                    (vals, idx), _metrics, _ = forward_with_post_processing_fn(
                        model=self.model,
                        post_processing_fn=topk_post_processor,
                        processed_mb=processed_mb,
                        is_reward_model=False,
                        allow_flash_attn_args=self.allow_flash_attn_args,
                        sampling_params=self.sampling_params,
                        sequence_dim=sequence_dim,
                    )

                # skip keeping the topk values for the dummy batches
                if batch_idx >= iterator_len:
                    continue

                # Keep only real sequence tokens (no trimming here; padded positions can be masked downstream)
                # Shapes remain [B, S, k].
                out_topk_vals.append(vals.cpu())
                out_topk_idx.append(idx.cpu())

        ret = BatchedDataDict[Any]()
        # Pad each micro-batch result on sequence dim to common length (S), similar to get_logprobs
        all_topk_vals_padded = []
        all_topk_idx_padded = []
        target_seq_len = seq_dim_size
        for vals, idx in zip(out_topk_vals, out_topk_idx):
            pad_needed = target_seq_len - vals.shape[1]
            if pad_needed > 0:
                # pad along sequence dimension (second dim): (last_dim_pad_left, last_dim_pad_right, seq_pad_left, seq_pad_right, batch_pad_left, batch_pad_right)
                vals = torch.nn.functional.pad(
                    vals, (0, 0, 0, pad_needed, 0, 0), mode="constant", value=0.0
                )
                idx = torch.nn.functional.pad(
                    idx, (0, 0, 0, pad_needed, 0, 0), mode="constant", value=0
                )
            all_topk_vals_padded.append(vals)
            all_topk_idx_padded.append(idx)

        ret["topk_logits"] = (
            torch.cat(all_topk_vals_padded, dim=0)
            if len(all_topk_vals_padded) > 1
            else all_topk_vals_padded[0]
        ).cpu()
        ret["topk_indices"] = (
            torch.cat(all_topk_idx_padded, dim=0)
            if len(all_topk_idx_padded) > 1
            else all_topk_idx_padded[0]
        ).cpu()
        return ret

    def get_full_logits_ipc(
        self,
        data: BatchedDataDict[Any],
        micro_batch_size: Optional[int] = None,
    ) -> dict[str, Any]:
        """Teacher forward; full-vocab logits exposed via persistent CUDA IPC storage.

        Used by cross-tokenizer distillation; supports heterogeneous teacher
        TP/CP. Each microbatch writes into slot
        ``self._teacher_ipc_storage[buf_idx]`` and shares one cached IPC
        handle. Returns ``{"per_sample_handles": list, "dp_rank": int}`` where
        each handle carries ``buf_idx`` and ``sample_index_in_buf`` for the
        consumer to index the slot view, plus the TP/CP shard metadata
        (``vocab_start_index``, ``global_seq_start``, ...) the consumer uses to
        route shards across heterogeneous teacher/student TP/CP.
        """
        forward_batch_size = (
            micro_batch_size
            if micro_batch_size is not None
            else self.cfg["logprob_batch_size"]
        )
        sequence_dim, seq_dim_size = check_sequence_dim(data)
        target_local_seq = (
            seq_dim_size // self.cp_size if self.cp_size > 1 else seq_dim_size
        )

        self.model.eval()

        post_processor = FullLogitsPostProcessor(
            cfg=self.cfg,
            device_mesh=self.device_mesh,
            cp_mesh=self.cp_mesh,
            tp_mesh=self.tp_mesh,
            cp_size=self.cp_size,
            enable_seq_packing=self.enable_seq_packing,
        )

        tp_rank = self.tp_mesh.get_local_rank() if self.tp_mesh is not None else 0
        cp_rank = self.cp_mesh.get_local_rank() if self.cp_mesh is not None else 0
        dp_rank = self.dp_mesh.get_local_rank() if self.dp_mesh is not None else 0
        world_rank = torch.distributed.get_rank()
        full_seq_len = target_local_seq * self.cp_size
        global_seq_start = cp_rank * full_seq_len // self.cp_size

        per_sample_handles: list[dict[str, Any]] = []
        storage: Optional[torch.Tensor] = None
        payload_ipc: Optional[tuple[Any, ...]] = None
        with torch.no_grad():
            data.to("cuda")
            processed_iterator, iterator_len = get_microbatch_iterator(
                data,
                self.cfg,
                forward_batch_size,
                self.dp_mesh,
                tokenizer=self.tokenizer,
                cp_size=self.cp_size,
            )
            for buf_idx, processed_mb in enumerate(processed_iterator):
                processed_inputs = processed_mb.processed_inputs
                with get_train_context(
                    cp_size=self.cp_size,
                    cp_mesh=self.cp_mesh,
                    cp_buffers=processed_inputs.cp_buffers,
                    sequence_dim=sequence_dim,
                    dtype=self.dtype,
                    autocast_enabled=self.autocast_enabled,
                ):
                    vals, _metrics, _ = forward_with_post_processing_fn(
                        model=self.model,
                        post_processing_fn=post_processor,
                        processed_mb=processed_mb,
                        is_reward_model=False,
                        allow_flash_attn_args=self.allow_flash_attn_args,
                        sampling_params=self.sampling_params,
                        sequence_dim=sequence_dim,
                    )
                if buf_idx >= iterator_len:
                    continue
                # Pad to canonical seq so the cached IPC handle stays shape-stable.
                pad_needed = target_local_seq - vals.shape[1]
                if pad_needed > 0:
                    vals = torch.nn.functional.pad(
                        vals, (0, 0, 0, pad_needed, 0, 0), mode="constant", value=0.0
                    )
                batch_size_mb, seq_len_mb, local_vocab_size = vals.shape

                self._teacher_ipc_storage, self._teacher_ipc_handle = (
                    ensure_teacher_ipc_buffer(
                        self._teacher_ipc_storage,
                        self._teacher_ipc_handle,
                        iterator_len,
                        batch_size_mb,
                        target_local_seq,
                        local_vocab_size,
                        vals.dtype,
                        vals.device,
                    )
                )
                storage = self._teacher_ipc_storage
                payload_ipc = self._teacher_ipc_handle
                storage[buf_idx, :batch_size_mb, :seq_len_mb, :local_vocab_size].copy_(
                    vals
                )
                del vals
                full_vocab_size = local_vocab_size * self.tp_size
                vocab_start_index = tp_rank * local_vocab_size
                vocab_end_index = (tp_rank + 1) * local_vocab_size
                for sample_index_in_buf in range(batch_size_mb):
                    per_sample_handles.append(
                        {
                            "payload_ipc": payload_ipc,
                            "buf_idx": buf_idx,
                            "sample_index_in_buf": sample_index_in_buf,
                            "storage_shape": tuple(storage.shape),
                            "actual_shape": (target_local_seq, local_vocab_size),
                            "dtype": storage.dtype,
                            "tp_rank": tp_rank,
                            "cp_rank": cp_rank,
                            "tp_size": self.tp_size,
                            "cp_size": self.cp_size,
                            "world_rank": world_rank,
                            "vocab_start_index": vocab_start_index,
                            "vocab_end_index": vocab_end_index,
                            "global_seq_start": global_seq_start,
                            "full_vocab_size": full_vocab_size,
                            "full_seq_len": full_seq_len,
                            "vocab_sharded": self.tp_size > 1,
                            "sequence_sharded": self.cp_size > 1,
                        }
                    )
        # The storage copies above are async on the current stream; force them
        # to complete before the IPC handles are consumed by the student
        # process, so the consumer can't observe a partially written buffer
        # (ports the sync added upstream for the single-buffer export path).
        torch.cuda.synchronize()
        return {"per_sample_handles": per_sample_handles, "dp_rank": dp_rank}

    def release_ipc_buffer(self) -> None:
        """Free the persistent teacher-logit IPC storage. Called once at end of training/validation."""
        self._teacher_ipc_storage = None
        self._teacher_ipc_handle = None
        gc.collect()
        torch.cuda.empty_cache()

    @contextmanager
    def use_reference_model(self) -> Generator[None, None, None]:
        """Context manager that temporarily swaps the reference model and active model.

        On entry: Moves model to CPU, moves reference_model to CUDA. Swaps the references.
                  Also disables top-k/top-p filtering since the reference policy's distribution
                  is different from the current policy, making filtered logprobs incompatible.
        On exit: Restores original references and re-flips cuda/cpu, restores sampling_params.
        """
        with torch.no_grad():
            # Save train model state_dict
            curr_state_dict = get_cpu_state_dict(
                self.model.state_dict().items(), pin_memory=True
            )

            # Swap reference model state_dict to self.model
            for k, v in self.model.state_dict().items():
                val = to_local_if_dtensor(v)
                val.copy_(self.reference_model_state_dict[k])

            # Temporarily disable top-k/top-p filtering for reference policy logprobs.
            # The reference policy has different weights, so its top-k/top-p set is
            # inherently different from the current policy. Using filtered logprobs
            # would cause -inf mismatches that cannot be resolved by masking.
            # Note: We keep temperature scaling since it was applied to prev_logprobs.
            saved_sampling_params = self.sampling_params
            if saved_sampling_params is not None:
                self.sampling_params = TrainingSamplingParams(
                    top_k=None,
                    top_p=1.0,
                    temperature=saved_sampling_params.temperature,
                )
            else:
                self.sampling_params = None

            # - self.model is the original reference_model, now on CUDA
            # - curr_state_dict is the train model, now on CPU
            yield

            # Restore sampling_params
            self.sampling_params = saved_sampling_params

            # Restore train model state_dict
            for k, v in self.model.state_dict().items():
                val = to_local_if_dtensor(v)
                val.copy_(curr_state_dict[k])

    def _add_noise_to_weights(self) -> None:
        """Add small Gaussian noise to the weights of the model. Note that this is used for testing purposes only."""
        noise_std = 0.01  # Standard deviation for the noise
        for p in self.model.parameters():
            if p.requires_grad:
                noise = torch.randn_like(p.data) * noise_std
                p.data.add_(noise)  # Add noise in-place
        torch.cuda.synchronize()

    def return_state_dict(self):
        return self.model.state_dict()

    def return_model_config(self) -> dict[str, Any]:
        """Return the model configuration as a dictionary.

        Returns:
            dict: Model configuration dictionary
        """
        return self.model.config

    @torch.no_grad()
    def prepare_refit_info(self) -> Optional[dict[str, Any]]:
        """Prepare state dict metadata for weight refitting and IPC streaming."""
        state_dict_info = {}
        for name, tensor in self.model.state_dict().items():
            if name.endswith(".lora_A.weight") or name.endswith(".lora_B.weight"):
                continue
            full_tensor = (
                tensor.full_tensor() if isinstance(tensor, DTensor) else tensor
            )
            # all tensor will be casted to self.dtype in stream_weights_via_ipc_zmq/broadcast_weights_for_collective
            adapted_fqn_tensors = _maybe_adapt_tensor_to_hf(
                self.model, name, full_tensor
            )
            for adapted_fqn, adapted_tensor in adapted_fqn_tensors:
                state_dict_info[adapted_fqn] = (adapted_tensor.shape, self.dtype)

        return state_dict_info

    @torch.no_grad()
    def calibrate_qkv_fp8_scales(
        self,
        data: BatchedDataDict[Any],
        micro_batch_size: Optional[int] = None,
        percentile: float = 99.9,
        margin: float = 1.05,
        include_q: bool = False,
    ) -> dict[str, Any]:
        """Placeholder for FP8 Q/K/V scale calibration, not implemented for DTensorPolicyWorkerV2."""
        raise NotImplementedError(
            "calibrate_qkv_fp8_scales is not implemented for DTensorPolicyWorkerV2"
        )

    @torch.no_grad()
    @wrap_with_nvtx_name("dtensor_policy_worker_v2/stream_weights_via_ipc_zmq")
    def stream_weights_via_ipc_zmq(
        self,
        buffer_size_bytes: int = 0,
        kv_scales: Optional[dict[str, float]] = None,
    ) -> None:
        """Stream model weights to peer process via ZMQ IPC socket."""
        if kv_scales is not None:
            raise NotImplementedError(
                "FP8 kvcache is not currently supported for DTensor path, we will support it in the future."
            )

        self.maybe_init_zmq()
        # Manually move model to cuda for cpu offload case
        if self.cpu_offload:
            self.model = self.move_to_cuda(self.model)

        from nemo_rl.models.policy.utils import stream_weights_via_ipc_zmq_impl

        # Use the shared implementation
        stream_weights_via_ipc_zmq_impl(
            params_generator=dtensor_params_generator(self.model, self.dtype),
            buffer_size_bytes=buffer_size_bytes,
            zmq_socket=self.zmq_socket,
            rank=self.rank,
            worker_name=str(self),
        )

    @torch.no_grad()
    @wrap_with_nvtx_name("dtensor_policy_worker_v2/stream_weights_via_http")
    def stream_weights_via_http(
        self,
        rollout_engine_urls: list[str],
        buffer_size_bytes: int,
    ) -> None:
        """Stream FSDP weights to colocated SGLang engines via CUDA IPC over HTTP.

        Args:
            rollout_engine_urls: ``http://host:port`` base URLs of each
                engine's ``node_rank=0`` SGLang HTTP server. The driver
                resolves these once via ``engine.get_base_url`` and passes
                them down so every FSDP rank doesn't redo the Ray RPC.
            buffer_size_bytes: Max bucket size in bytes before flushing.

        ``num_gpus_per_engine`` is recorded once via
        ``set_rollout_num_gpus_per_engine`` after the SGLang generation handle
        is created, so the caller doesn't have to pass it on every refit.
        """
        assert self._rollout_num_gpus_per_engine is not None, (
            "stream_weights_via_http called before set_rollout_num_gpus_per_engine; "
            "wire the rollout TP size on the policy after SGLangGeneration is built."
        )

        # Manually move model to cuda for cpu offload case
        if self.cpu_offload:
            self.model = self.move_to_cuda(self.model)

        from nemo_rl.models.policy.utils import stream_weights_via_http_impl

        stream_weights_via_http_impl(
            params_generator=dtensor_params_generator(self.model, self.dtype),
            rollout_engine_urls=rollout_engine_urls,
            num_gpus_per_engine=self._rollout_num_gpus_per_engine,
            rank=self.rank,
            world_size=torch.distributed.get_world_size(),
            worker_name=str(self),
            buffer_size_bytes=buffer_size_bytes,
            worker_state=self._ipc_worker_state,
        )

    @torch.no_grad()
    def broadcast_weights_for_collective(
        self, kv_scales: Optional[dict[str, float]] = None
    ) -> None:
        """Broadcast the weights for collective communication."""
        if kv_scales is not None:
            raise NotImplementedError(
                "FP8 kvcache is not currently supported for DTensor path, we will support it in the future."
            )

        # Manually move model to cuda for cpu offload case
        if self.cpu_offload:
            print(
                "[WARNING]: Unless you are lacking of memory, it is not recommended to enable cpu_offload when "
                "using non-colocated generation since it will have an extra onload and offload at refit stage."
            )
            self.model = self.move_to_cuda(self.model)

        # param_iterator will return (name, tensor), we only need tensor
        dtensor_post_iter_func = lambda x: x[1]

        packed_broadcast_producer(
            iterator=dtensor_params_generator(self.model, self.dtype),
            group=self.model_update_group,
            src=0,
            post_iter_func=dtensor_post_iter_func,
        )

        # Manually move model to cpu for cpu offload case
        # cpu offload needs model on CPU before model forward
        if self.cpu_offload:
            self.model = self.move_to_cpu(self.model)

    @wrap_with_nvtx_name("dtensor_policy_worker_v2/prepare_for_lp_inference")
    def prepare_for_lp_inference(self) -> None:
        # onload model to cuda
        if not self.cpu_offload:
            self.move_to_cuda(self.model)
        else:
            self.model = self.move_buffer_to_device(self.model, "cuda")

        self.model.eval()

        # offload optimizer to cpu
        torch.randn(1).cuda()  # wake up torch allocator
        if self.optimizer is not None and self.offload_optimizer_for_logprob:
            self.move_optimizer_to_device("cpu")

        gc.collect()
        torch.cuda.empty_cache()

    @wrap_with_nvtx_name("dtensor_policy_worker_v2/prepare_for_training")
    def prepare_for_training(self, *args, **kwargs) -> None:
        # onload models and optimizer state to cuda
        if not self.cpu_offload:
            self.move_to_cuda(self.model)
        else:
            # when cpu offload is enabled, the buffers do not get moved
            # to cuda automatically, so we need to do that manually
            self.model = self.move_buffer_to_device(self.model, "cuda")

        self.model.train()
        # Training expects optimizer state on CUDA. Restore unconditionally rather
        # than tracking which path offloaded it; move_optimizer_to_device is a no-op
        # when the state is already resident.
        if self.optimizer is not None and not self.cpu_offload:
            self.move_optimizer_to_device("cuda")

        torch.cuda.empty_cache()

    def finish_inference(self) -> None:
        """Offload model params to CPU after inference. Only used in PPO."""
        self.model = self.move_to_cpu(self.model)
        self.model.eval()

        gc.collect()
        torch.cuda.empty_cache()

    @torch.no_grad()
    @wrap_with_nvtx_name("dtensor_policy_worker_v2/offload_before_refit")
    def offload_before_refit(self) -> None:
        """Offload the optimizer to the CPU."""
        torch.randn(1).cuda()  # wake up torch allocator
        if self.optimizer is not None:
            self.move_optimizer_to_device("cpu")

        gc.collect()
        torch.cuda.empty_cache()

    @torch.no_grad()
    @wrap_with_nvtx_name("dtensor_policy_worker_v2/offload_after_refit")
    def offload_after_refit(self) -> None:
        """Offload as much as possible on the CPU."""
        self.model = self.move_to_cpu(self.model)
        self.model.eval()
        torch.randn(1).cuda()  # wake up torch allocator
        self.offload_before_refit()  # rerun the old offload function

        # Print memory stats after offloading
        allocated = torch.cuda.memory_allocated() / (1024**3)  # Convert to GB
        reserved = torch.cuda.memory_reserved() / (1024**3)  # Convert to GB
        print(
            f"GPU Memory after optimizer offload: {allocated:.2f}GB allocated, {reserved:.2f}GB reserved"
        )

    def move_optimizer_to_device(self, device: str | torch.device) -> None:
        for state in self.optimizer.state.values():
            for k, v in state.items():
                if isinstance(v, (DTensor, torch.Tensor)):
                    state[k] = v.to(device)

    def move_to_device(self, model: nn.Module, device: str | torch.device) -> nn.Module:
        model = self.move_buffer_to_device(model, device)
        return model.to(device)

    def move_buffer_to_device(
        self, model: nn.Module, device: str | torch.device
    ) -> nn.Module:
        # FSDP modules do not move buffers to the device automatically
        for v in model.buffers():
            torch.utils.swap_tensors(v, v.to(device))

        return model

    def move_to_cuda(self, model: torch.nn.Module) -> torch.nn.Module:
        model = self.move_to_device(model, "cuda")
        gc.collect()
        torch.cuda.empty_cache()
        return model

    def move_to_cpu(self, model: torch.nn.Module) -> torch.nn.Module:
        model = self.move_to_device(model, "cpu")
        gc.collect()
        torch.cuda.empty_cache()
        return model

    def save_checkpoint(
        self,
        weights_path: str,
        optimizer_path: Optional[str] = None,
        tokenizer_path: Optional[str] = None,
        checkpointing_cfg: Optional[CheckpointingConfig] = None,
    ) -> None:
        """Save a checkpoint of the model.

        the optimizer states are saved only if `optimizer` and `optimizer_path` are provided.
        """
        self.checkpoint_manager.save_checkpoint(
            model=self.model,
            weights_path=weights_path,
            optimizer=self.optimizer,
            optimizer_path=optimizer_path,
            scheduler=self.scheduler,
            tokenizer=self.tokenizer if tokenizer_path else None,
            tokenizer_path=tokenizer_path,
            checkpointing_cfg=checkpointing_cfg,
            lora_enabled=self.lora_enabled,
            peft_config=self.peft_config,
        )

    def load_checkpoint(
        self,
        weights_path: str,
        optimizer_path: Optional[str] = None,
    ) -> None:
        """Load a checkpoint into the model using Automodel Checkpointer."""
        self.checkpoint_manager.load_checkpoint(
            model=self.model,
            weights_path=weights_path,
            optimizer=self.optimizer,
            optimizer_path=optimizer_path,
            scheduler=self.scheduler,
        )

    def _init_checkpoint_manager(
        self,
        config_updates: Optional[dict[str, Any]] = None,
        checkpoint_root: Optional[str] = None,
    ) -> None:
        """Initialize the AutomodelCheckpointManager for this worker.

        This creates the checkpoint manager bound to this worker's device meshes
        and initializes its underlying checkpointer.

        Args:
            config_updates: Dict of CheckpointingConfig fields to set during initialization.
            checkpoint_root: Optional root directory for checkpoints.
        """
        if self.checkpoint_manager is None:
            self.checkpoint_manager = AutomodelCheckpointManager(
                dp_mesh=self.dp_mesh,
                tp_mesh=self.tp_mesh,
                moe_mesh=self.moe_mesh,
            )
            self.checkpoint_manager.init_checkpointer(
                config_updates=config_updates,
                checkpoint_root=checkpoint_root,
            )


@ray.remote(
    runtime_env=get_runtime_env_for_policy_worker("dtensor_policy_worker_v2")
)  # pragma: no cover
class DTensorPolicyWorkerV2(DTensorPolicyWorkerV2Impl):
    pass
