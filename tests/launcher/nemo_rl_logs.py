"""What NeMo RL's GRPO driver prints for one training step, in each supported release's format.

Each line below is written in the format of the `print` call named beside it, read in the release's
own source (git tags v0.5.0, v0.6.0, v0.7.0 of NVIDIA-NeMo/RL); the figures are made up. The step
header's M differs by path: grpo_train prints the step within the epoch out of
min(len(dataloader), max_num_steps) (out of max_num_steps with several dataloaders, v0.6.0+);
async_grpo_train prints the run's step out of max_num_steps.

- nemo_rl/algorithms/grpo.py, grpo_train: the epoch and step headers, "▶ Preparing batch...",
  "▶ Generating responses for batch of size N...", "📊 Training Results:" with "  • Loss: %.4f",
  "  • Generation KL Error: %.4f", "  • Avg Reward: %.4f" (or, with grpo.use_dynamic_sampling,
  "  • Avg Filtered Reward: %.4f" and "  • Avg Total Reward: %.4f"), "  • Mean Generation Length:
  %.4f", "⏱️  Timing:" with "  • Total step time: %.2fs" and "  • {k}: %.2fs (%.1f%)".
- nemo_rl/algorithms/grpo.py, async_grpo_train: the step header, "📦 Sampling from replay
  buffer...", the same results with "  • Buffer Size: %d" and "  • Avg Trajectory Age: %.2f steps".
- nemo_rl/algorithms/utils.py, print_performance_metrics: "🔍 Performance Metrics:", "  •
  Throughputs (per GPU):" with "    - E2E (Samples/sec/gpu): %.2f" and "    - E2E (Tokens/sec/gpu):
  %.2f", then "  • Throughputs (per Group):" with "    - E2E (Samples/sec): %.2f", "    - E2E
  (Tokens/sec): %.2f", "    - Training Worker Group (Tokens/sec): %.2f" and "    - Generation Worker
  Group (Tokens/sec): %.2f".
- grpo_train's end: "Max number of steps has been reached, stopping training early", or at the
  save deadline "Timeout has been reached, stopping training early"; no line of its own when its
  epoch loop runs out (grpo.max_num_epochs passes over the data).
"""

from __future__ import annotations

from dataclasses import dataclass

# The ways each release numbers its steps (grpo.py): grpo_train within the epoch; with
# data.use_multiple_dataloader (v0.6.0+) out of max_num_steps; async_grpo_train across the run.
PATHS = {
    "v0.5.0": ("grpo_train", "async_grpo_train"),
    "v0.6.0": ("grpo_train", "multiple_dataloaders", "async_grpo_train"),
    "v0.7.0": ("grpo_train", "multiple_dataloaders", "async_grpo_train"),
}
BAR = "=" * 25


@dataclass(frozen=True)
class Figures:
    reward: float
    step_time_s: float
    tokens_per_s: float
    gpus: int = 16


def epoch_header(epoch: int, epochs: int) -> list[str]:
    return ["", f"{BAR} Epoch {epoch}/{epochs} {BAR}"]


def step_block(header: tuple[int, int], f: Figures, *, dynamic_sampling: bool = False, async_grpo: bool = False) -> list[str]:
    """The lines of one step, header to the last throughput line."""
    n, m = header
    lines = ["", f"{BAR} Step {n}/{m} {BAR}"]
    if async_grpo:
        lines += ["📦 Sampling from replay buffer..."]
    else:
        lines += ["▶ Preparing batch...", "▶ Generating responses for batch of size 1024...", "▶ Processing rewards...,"]
        lines += ["▶ Computing advantages...", "▶ Preparing for logprob inference...", "▶ Computing logprobs..."]
        lines += ["▶ Preparing for training...", "▶ Training policy..."]
    lines += ["", "📊 Training Results:", "  • Loss: 0.0123", "  • Generation KL Error: 0.0011"]
    if dynamic_sampling:
        lines += [f"  • Avg Filtered Reward: {f.reward + 0.25:.4f}", f"  • Avg Total Reward: {f.reward:.4f}"]
    else:
        lines += [f"  • Avg Reward: {f.reward:.4f}"]
    if async_grpo:
        lines += ["  • Buffer Size: 2048", "  • Avg Trajectory Age: 0.50 steps"]
    else:
        lines += ["  • Mean Generation Length: 187.2500"]
    generation = f.step_time_s * 0.6
    lines += ["", "⏱️  Timing:", f"  • Total step time: {f.step_time_s:.2f}s"]
    lines += [f"  • generation: {generation:.2f}s (60.0%)", f"  • policy_training: {f.step_time_s - generation:.2f}s (40.0%)"]
    per_gpu = f.tokens_per_s / f.gpus
    lines += ["", "🔍 Performance Metrics:", "  • Mean Total Tokens per Sample: 312.40", "  • Throughputs (per GPU):"]
    lines += ["    - E2E (Samples/sec/gpu): 0.67", f"    - E2E (Tokens/sec/gpu): {per_gpu:.2f}"]
    lines += ["    - Policy Training (Tokens/sec/gpu): 512.00", "    - Policy and Reference Logprobs (Tokens/sec/gpu): 1024.00"]
    lines += ["    - Training Worker Group (Tokens/sec/gpu): 341.33", "    - Generation Worker Group (Tokens/sec/gpu): 853.33"]
    lines += ["  • Throughputs (per Group):", f"    - E2E (Samples/sec): {0.67 * f.gpus:.2f}"]
    lines += [f"    - E2E (Tokens/sec): {f.tokens_per_s:.2f}"]
    lines += ["    - Training Worker Group (Tokens/sec): 2730.67", "    - Generation Worker Group (Tokens/sec): 6826.67"]
    return lines


ENDS = {
    "max-steps": ["Max number of steps has been reached, stopping training early"],
    "deadline": ["Timeout has been reached, stopping training early"],
    "epochs-ended": [],
}


def run_log(
    path: str,
    max_steps: int,
    figures: list[Figures],
    *,
    dataloader_len: int = 0,
    dynamic_sampling: bool = False,
    end: str = "max-steps",
    epochs: int = 0,
) -> list[str]:
    """A run's driver log along one of PATHS, one step block per entry of `figures`, then the
    end-of-run line (ENDS). grpo_train runs epochs of `dataloader_len` steps (default: one epoch),
    `epochs` of them (default: enough for max_steps)."""
    lines = ["  ✓ Training dataloader loaded with 7473 samples"]
    per_epoch = min(dataloader_len or max_steps, max_steps)
    for i, f in enumerate(figures):
        if path == "async_grpo_train":
            lines += step_block((i + 1, max_steps), f, dynamic_sampling=dynamic_sampling, async_grpo=True)
            continue
        if path == "multiple_dataloaders":  # one endless epoch; the header counts to max_num_steps
            lines += epoch_header(1, 1) if i == 0 else []
            lines += step_block((i + 1, max_steps), f, dynamic_sampling=dynamic_sampling)
            continue
        epoch, within = divmod(i, per_epoch)
        lines += epoch_header(epoch + 1, epochs or -(-max_steps // per_epoch)) if within == 0 else []
        lines += step_block((within + 1, per_epoch), f, dynamic_sampling=dynamic_sampling)
    lines += ENDS[end]
    return lines


def driver_script(lines: list[str], pause_s: float = 0.0) -> str:
    """A stand-in NeMo RL driver (a Ray job's entrypoint) that prints `lines`, as the real one does."""
    return f"import time\nfor line in {lines!r}:\n    print(line, flush=True)\n    time.sleep({pause_s} if line.startswith('=') else 0)\n"
