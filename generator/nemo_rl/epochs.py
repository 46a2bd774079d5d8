"""How many GRPO steps a run's data allows: GSM8K's train split, the dataloader's batches per
epoch and grpo.max_num_epochs, as NeMo RL's synchronous GRPO loop counts them.

NeMo RL v0.5.0, v0.6.0 and v0.7.0 (nemo_rl/algorithms/grpo.py):
- `setup` builds the training `StatefulDataLoader` with `batch_size=grpo.num_prompts_per_step`
  (times `grpo.batch_multiplier` only with `grpo.use_dynamic_sampling`) and `drop_last=True`: an
  epoch is floor(rows / prompts per step) steps;
- `grpo_train` loops `while current_epoch < max_num_epochs and total_steps < max_num_steps`: with
  the data spent it returns normally, without the "Max number of steps has been reached" line,
  short of `grpo.max_num_steps`;
- `async_grpo_train` (grpo.async_grpo.enabled) loops on `max_num_steps` alone; v0.6.0+ with
  `data.use_multiple_dataloader` ignores `max_num_epochs` (its warning says so).

GSM8K's train split (openai/gsm8k, config "main") has 7473 rows, every one of them trained on:
v0.5.0 reads the JSONL the preparation Job writes from the whole split (ResponseDataset,
data.train_data_path); v0.6.0+ load it with `GSM8KDataset` (nemo_rl/data/datasets/
response_datasets/gsm8k.py: `load_dataset("openai/gsm8k", "main")[split]`), which takes the
recipe's `split_validation_size` in its `**kwargs` and never splits.
"""

from __future__ import annotations

from dataclasses import dataclass

GSM8K_TRAIN_ROWS = 7473
GRPO_PY = "nemo_rl/algorithms/grpo.py (setup: StatefulDataLoader drop_last=True; grpo_train: the epoch loop)"
RECIPE_EPOCHS = 1  # grpo.max_num_epochs of every release's grpo_math_1B.yaml; no preset's recipe changes it


def steps_per_epoch(prompts_per_step: int, rows: int = GSM8K_TRAIN_ROWS) -> int:
    """Full batches of `prompts_per_step` in `rows` (the last partial batch is dropped)."""
    return rows // prompts_per_step if prompts_per_step > 0 else 0


def epochs_needed(max_steps: int, prompts_per_step: int, rows: int = GSM8K_TRAIN_ROWS) -> int:
    """The fewest epochs whose steps reach `max_steps`; 0 when an epoch has no full batch."""
    per_epoch = steps_per_epoch(prompts_per_step, rows)
    return -(-max_steps // per_epoch) if per_epoch else 0


@dataclass(frozen=True)
class Reach:
    """The last step a synchronous GRPO run on GSM8K reaches, and why it stops there."""

    steps: int  # the step the run ends at
    per_epoch: int
    epochs: int

    def short_of(self, max_steps: int) -> bool:
        return self.steps < max_steps


def reach(max_steps: int, prompts_per_step: int, epochs: int, rows: int = GSM8K_TRAIN_ROWS) -> Reach:
    per_epoch = steps_per_epoch(prompts_per_step, rows)
    return Reach(min(max_steps, per_epoch * epochs), per_epoch, epochs)
