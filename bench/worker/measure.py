"""Per-step measurement during training: a TrainerCallback that records step-end times, the cumulative global
token count, memory, the training loss and the trainer's reward accuracy, with nothing heavier than a clock read, a
/proc read and a scalar copy per step."""

import math
import time
from collections.abc import Callable
from typing import Any

import torch
from transformers import TrainerCallback

from bench.isolation import step_marks
from bench.worker import memory, phases
from bench.worker.rewards import PART_PREFIX, PART_SUFFIX, REWARD_METRIC

ACCURACY_METRICS = ("rewards/accuracies", "accuracy")
"""The trainers' names for the share of pairs whose chosen answer scores higher: the preference trainers' implicit
reward (DPO, ORPO, CPO) and the reward model's score (RewardTrainer)."""
PAIR_MASKS = ("chosen_attention_mask", "rejected_attention_mask")


def train_metric(trainer: Any, names: tuple[str, ...]) -> float | None:
    """The latest value of the first of `names` the trainer logged in training: TRL's stable trainers keep their
    metrics in `_metrics`, the experimental ORPO and CPO trainers in `_stored_metrics`."""
    for store in (getattr(trainer, "_metrics", None), getattr(trainer, "_stored_metrics", None)):
        train = (store or {}).get("train") or {}
        for name in names:
            if train.get(name):
                return float(train[name][-1])
    return None


def batch_tokens(inputs: dict[str, Any]) -> Any:
    """Non-padding tokens of the sequences the policy sees in a batch: chosen + rejected (each with its prompt) for
    the paired inputs of the experimental trainers, else the batch's attention mask."""
    masks = [inputs[k] for k in PAIR_MASKS if k in inputs] or [inputs["attention_mask"]]
    return sum(mask.sum() for mask in masks)


def batch_width(inputs: dict[str, Any]) -> int:
    """Tokens per row of the longest sequence the policy sees in a batch, padding included (the collators pad to the
    batch's longest row, cut at max_length): the widest `*input_ids` tensor, or an online batch's prompt +
    completion."""
    if "completion_ids" in inputs:
        return int(inputs["prompt_ids"].shape[-1] + inputs["completion_ids"].shape[-1])
    return max((int(v.shape[-1]) for k, v in inputs.items() if k.endswith("input_ids")), default=0)


class StepRecorder(TrainerCallback):
    """Step-end timestamps (CUDA-synchronised), cumulative global tokens and memory per step.

    `trainer`, `on_train_start` and `on_first_step` are attached after construction, once the trainer exists: TRL
    keeps its rank-gathered token count on the trainer. `devices`: the CUDA devices this process runs on, each
    synchronised before a timestamp (a split model runs on several; torch.cuda.synchronize() waits for the current
    one only); None: the current device.
    """

    def __init__(self, devices: list[int] | None = None) -> None:
        self.trainer: Any = None
        self.devices = devices
        self.on_train_start: Callable[[], None] | None = None
        """Called when training begins, after the trainer has placed the model (accelerator.prepare)."""
        self.on_first_step: Callable[[], None] | None = None
        self.train_start: float | None = None
        self.step_ends: list[float] = []
        self.cpu_times: list[float] = []
        """Process CPU seconds (user + system, all threads: time.process_time) at each step end."""
        self.tokens: list[int] = []
        self.memory_now: list[int] = []
        self.losses: list[float | None] = []
        self.batch_widths: list[int] = []
        """This rank's padded row length of each training batch (batch_width)."""
        self.reward_accuracies: list[float | None] = []
        self.sampled_rewards: list[float | None] = []
        """Online methods: each generation's mean total reward over every rank's completions; empty otherwise."""
        self.reward_parts: dict[str, list[float | None]] = {}
        """Online methods: each reward function's mean per generation, by the name TRL logs it under."""
        self._rewards_logged = 0
        self.counted_tokens = 0
        """Global tokens counted from the batches (record_losses), for trainers that keep no count of their own."""
        self.progress: step_marks.StepMarks | None = None
        """Where each step's beginning and end are marked for the runner's progress watchdog
        (bench/isolation/step_marks.py)."""
        self._synchronize = torch.cuda.is_available()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._sync()
        if self.on_train_start is not None:
            self.on_train_start()
        self.train_start = time.perf_counter()
        phases.mark("train_begun")

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._sync()
        self.step_ends.append(time.perf_counter())
        self.cpu_times.append(time.process_time())
        phases.mark("last_step")
        # GRPO and RLOO keep `_total_train_tokens` at 0 and count prompt + completion tokens, rank-gathered, in the
        # Trainer's state instead
        counted = getattr(self.trainer, "_total_train_tokens", self.counted_tokens) or getattr(
            state, "num_input_tokens_seen", 0
        )
        self.tokens.append(int(counted or 0))
        now = memory.cuda_allocated_now(self.devices) if memory.cuda_used() else memory.current_rss_bytes()
        self.memory_now.append(now or 0)
        self.reward_accuracies.append(train_metric(self.trainer, ACCURACY_METRICS))
        self._record_generation()
        if len(self.step_ends) == 1 and self.on_first_step is not None:
            self.on_first_step()
        if self.progress is not None:
            self.progress.mark("ended", len(self.step_ends))

    def _record_generation(self) -> None:
        """The rewards of a generation that happened in this step (the total and each function's part). A generation
        serves steps_per_generation steps (bench/matrix/online_rules.py), and the trainers log its reward once: one
        value per generation, so that the learning check's spread counts each sample once."""
        metrics = (getattr(self.trainer, "_metrics", None) or {}).get("train") or {}
        logged = metrics.get(REWARD_METRIC) or []
        if len(logged) != self._rewards_logged:
            self._rewards_logged = len(logged)
            self.sampled_rewards.append(_finite(logged[-1]))
            for name, values in metrics.items():
                if name.startswith(PART_PREFIX) and name.endswith(PART_SUFFIX) and values:
                    part = name.removeprefix(PART_PREFIX).removesuffix(PART_SUFFIX)
                    self.reward_parts.setdefault(part, []).append(_finite(values[-1]))

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self.step_ends and not phases.marked("first_step"):
            phases.mark("first_step")
        if self.progress is not None:
            self.progress.mark("began", len(self.step_ends) + 1)

    def _sync(self) -> None:
        if self._synchronize and torch.cuda.is_initialized():
            for device in self.devices or [None]:
                torch.cuda.synchronize(device)


def _finite(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def record_losses(trainer: Any, recorder: StepRecorder) -> None:
    """Append this rank's loss and batch width of every training step to `recorder.losses` (None when not finite)
    and `recorder.batch_widths`, and count the batch's global tokens for a trainer that keeps no count
    (`_total_train_tokens`) of its own.

    The Trainer keeps the loss in a local of its training loop; every trainer's compute_loss returns it, so the
    bound method is wrapped.
    """
    compute_loss = trainer.compute_loss
    counts_tokens = hasattr(trainer, "_total_train_tokens")

    def recording_compute_loss(model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        training = getattr(trainer.model, "training", True)
        if training and not counts_tokens:
            recorder.counted_tokens += int(trainer.accelerator.gather_for_metrics(batch_tokens(inputs)).sum().item())
        result = compute_loss(model, inputs, *args, **kwargs)
        loss = result[0] if isinstance(result, tuple) else result
        if training:
            value = float(loss.detach().float().item())
            recorder.losses.append(value if math.isfinite(value) else None)
            recorder.batch_widths.append(batch_width(inputs))
        return result

    trainer.compute_loss = recording_compute_loss
