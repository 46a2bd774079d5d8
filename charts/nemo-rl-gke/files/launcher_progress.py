"""The run's progress as a user wants to see it, from what NeMo RL's GRPO driver prints.

One line per training step (step of max steps, mean reward, step time, throughput, time left) and a
summary at the end. The launcher feeds it every line of the run's log; `python -m generator status`
feeds it the log it reads through the API server. Standard library only (it runs in the NeMo RL
image).

What NeMo RL prints, the same in v0.5.0, v0.6.0 and v0.7.0 (nemo_rl/algorithms/grpo.py, functions
grpo_train and async_grpo_train; nemo_rl/algorithms/utils.py, print_performance_metrics):
- the step header, 25 '=' on each side: "===... Step N/M ...===". grpo_train numbers steps within
  the epoch (current_step + 1) out of min(len(dataloader), grpo.max_num_steps), or out of
  grpo.max_num_steps with several dataloaders (v0.6.0+); async_grpo_train numbers them across the
  run (step + 1) out of grpo.max_num_steps;
- the epoch header (grpo_train only), the same shape: "===... Epoch E/M ...===";
- under "Training Results": "  • Avg Reward: 0.1234" (with grpo.use_dynamic_sampling: "  • Avg
  Filtered Reward: ..." and "  • Avg Total Reward: ...", the latter over every generated sample);
- under "Timing": "  • Total step time: 12.34s" (the step alone: validation and checkpoint saves
  come after it);
- print_performance_metrics, after the timing: "    - E2E (Tokens/sec/gpu): 123.45", then under
  "Throughputs (per Group)" "    - E2E (Tokens/sec): 1975.20", the step's last line read here;
- how grpo_train ends: "Timeout has been reached, stopping training early" (the save deadline,
  checkpointing.checkpoint_must_save_by) or "Max number of steps has been reached, stopping
  training early" (grpo.max_num_steps), each printed before it returns; when its `while
  current_epoch < max_num_epochs` loop runs out (the data spent, grpo.max_num_epochs passes) it
  returns without a line of its own (`end` tells the three apart).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

_NUMBER = r"(-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|-?nan|-?inf)"
STEP_HEADER = re.compile(r"^={25} Step (\d+)/(\d+) ={25}$")
EPOCH_HEADER = re.compile(r"^={25} Epoch (\d+)/(\d+) ={25}$")
_REWARD = re.compile(rf"^• Avg (Reward|Total Reward|Filtered Reward): {_NUMBER}$")
_STEP_TIME = re.compile(rf"^• Total step time: {_NUMBER}s$")
_TOKENS_PER_GPU = re.compile(rf"^- E2E \(Tokens/sec/gpu\): {_NUMBER}$")
_TOKENS = re.compile(rf"^- E2E \(Tokens/sec\): {_NUMBER}$")
# Which reward line is "the mean reward": Avg Reward, else Avg Total Reward (every sample, as Avg
# Reward is without dynamic sampling); Avg Filtered Reward only when neither is printed.
_REWARD_RANK = {"Reward": 0, "Total Reward": 1, "Filtered Reward": 2}
DEADLINE_LINE = "Timeout has been reached, stopping training early"
MAX_STEPS_LINE = "Max number of steps has been reached"
# How an attempt's log says it ended (`Progress.end`).
DEADLINE, MAX_STEPS, EPOCHS_ENDED = "deadline", "max-steps", "epochs-ended"


def step_header(line: str) -> tuple[int, int] | None:
    """(N, M) of a step header line, else None."""
    m = STEP_HEADER.match(line.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


def epoch_header(line: str) -> tuple[int, int] | None:
    m = EPOCH_HEADER.match(line.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


@dataclass
class Step:
    number: int  # the run's step, 1-based
    of: int  # the run's last step
    reward: float | None = None
    step_time_s: float | None = None
    tokens_per_s: float | None = None  # the whole cluster
    tokens_per_s_per_gpu: float | None = None
    reward_rank: int = field(default=9, repr=False)


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{max(minutes, 1)} min" if seconds >= 30 else f"{max(1, round(seconds))} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _number(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.1f}"


class Progress:
    """Feed it the run's log lines; it answers a progress line when a step's figures are complete."""

    def __init__(self, max_steps: int = 0) -> None:
        self.max_steps = max_steps  # grpo.max_num_steps when known; 0: the header's M
        self.epoch = 1
        self.current: Step | None = None  # the step being logged
        self.steps: list[Step] = []  # steps whose line was given, in log order
        self.new_attempt()

    def new_attempt(self) -> None:
        """Forget how the previous attempt's log ended (its steps stay, for the summary)."""
        self.epoch = 1
        self.stop_line = ""  # DEADLINE or MAX_STEPS when the attempt printed it
        self.epochs: tuple[int, int] | None = None  # the newest epoch header's (E, M)
        self.per_epoch: int | None = None  # steps per epoch, from a step header's M below max_steps

    # --- reading ---------------------------------------------------------------------------

    def saw_line(self, line: str) -> str | None:
        text = line.strip().lstrip("\ufeff")
        if text == DEADLINE_LINE:
            self.stop_line = DEADLINE
        elif text.startswith(MAX_STEPS_LINE):
            self.stop_line = MAX_STEPS
        if (epoch := epoch_header(text)) is not None:
            self.epoch = epoch[0]
            self.epochs = epoch
            return None
        if (header := step_header(text)) is not None:
            if self.max_steps and header[1] < self.max_steps:
                self.per_epoch = header[1]
            done = self.flush()
            self.current = Step(*self._run_step(*header))
            return done
        if self.current is None:
            return None
        return self._figure(text)

    def _run_step(self, n: int, m: int) -> tuple[int, int]:
        """The header's N/M as the run's step of its last step. grpo_train counts N within the
        epoch out of min(len(dataloader), max_num_steps): an M below max_num_steps is the
        dataloader's length, so the run's step is (epoch - 1) * M + N."""
        if self.max_steps and m < self.max_steps:
            return (self.epoch - 1) * m + n, self.max_steps
        return n, self.max_steps or m

    def _figure(self, text: str) -> str | None:
        step = self.current
        assert step is not None
        if m := _REWARD.match(text):
            rank = _REWARD_RANK[m.group(1)]
            if rank < step.reward_rank:
                step.reward, step.reward_rank = float(m.group(2)), rank
        elif m := _STEP_TIME.match(text):
            step.step_time_s = float(m.group(1))
        elif m := _TOKENS_PER_GPU.match(text):
            step.tokens_per_s_per_gpu = float(m.group(1))
        elif m := _TOKENS.match(text):
            step.tokens_per_s = float(m.group(1))
            return self.flush()  # the last figure NeMo RL prints for a step
        return None

    def flush(self) -> str | None:
        """The line of the step being logged, if it has any figure (at the next header, the end)."""
        step, self.current = self.current, None
        if step is None or (step.reward is None and step.step_time_s is None):
            return None
        self.steps.append(step)
        return self.line(step)

    # --- telling ---------------------------------------------------------------------------

    def end(self) -> tuple[str, int | None]:
        """How the attempt whose log was read ended, for a SUCCEEDED job: DEADLINE or MAX_STEPS when
        it printed the line; EPOCHS_ENDED when grpo_train began its last epoch (header E/M, E = M)
        and returned without either line; "" when the log does not say (async GRPO, no log). And
        the step the last epoch ends at (epochs x steps per epoch) when the headers give both."""
        last_epoch = self.epochs is not None and self.epochs[0] == self.epochs[1]
        how = self.stop_line or (EPOCHS_ENDED if last_epoch else "")
        end_step = self.epochs[1] * self.per_epoch if self.epochs and self.per_epoch else None
        return how, end_step

    @property
    def latest(self) -> Step | None:
        return self.steps[-1] if self.steps else None

    def mean_step_time_s(self) -> float | None:
        times = [s.step_time_s for s in self.steps if s.step_time_s is not None]
        return sum(times) / len(times) if times else None

    def time_left_s(self) -> float | None:
        latest, mean = self.latest, self.mean_step_time_s()
        if latest is None or mean is None:
            return None
        return max(0, latest.of - latest.number) * mean

    def line(self, step: Step) -> str:
        parts = []
        if step.reward is not None:
            parts.append(f"mean reward {step.reward:.4f}")
        if step.step_time_s is not None:
            parts.append(f"step time {step.step_time_s:.1f} s")
        if step.tokens_per_s is not None:
            per_gpu = f" ({_number(step.tokens_per_s_per_gpu)} per GPU)" if step.tokens_per_s_per_gpu is not None else ""
            parts.append(f"{_number(step.tokens_per_s)} tokens/s{per_gpu}")
        left = self.time_left_s() if step is self.latest else None
        if left is not None and step.number < step.of:
            parts.append(f"about {_duration(left)} left")
        return f"step {step.number}/{step.of}: " + ", ".join(parts)

    def summary(self, gpu_node_hours: float | None = None) -> str | None:
        """Reward at the first and the last step seen, the mean step time, the GPU-node time."""
        if not self.steps:
            return None
        first, last = self.steps[0], self.steps[-1]
        text = f"progress: {len(self.steps)} step(s) logged, the last step {last.number} of {last.of}"
        rewarded = [s for s in self.steps if s.reward is not None]
        if rewarded:
            a, b = rewarded[0], rewarded[-1]
            text += f"; mean reward {a.reward:.4f} at step {a.number}, {b.reward:.4f} at step {b.number}"
        elif first is not last:
            text += "; no reward logged"
        if (mean := self.mean_step_time_s()) is not None:
            text += f"; mean step time {mean:.1f} s"
        if gpu_node_hours is not None:
            text += f"; {gpu_node_hours:.2f} GPU-node-hours from the GPU workers ready to the end of the run"
        return text

    def as_dict(self) -> dict[str, object]:
        """The latest step and the run's figures, for `status --format json`."""
        latest = self.latest
        first = next((s for s in self.steps if s.reward is not None), None)
        return {
            "step": latest.number if latest else None,
            "max_steps": latest.of if latest else (self.max_steps or None),
            "latest": {k: v for k, v in asdict(latest).items() if k != "reward_rank"} if latest else None,
            "first_reward": first.reward if first else None,
            "first_reward_step": first.number if first else None,
            "mean_step_time_s": self.mean_step_time_s(),
            "time_left_s": self.time_left_s(),
            "line": self.line(latest) if latest else None,
        }
