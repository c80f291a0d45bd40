"""Per-step measurement during training: a TrainerCallback that records step-end times, TRL's cumulative
global token count and memory, with nothing heavier than a clock read and a /proc read per step."""

import time
from collections.abc import Callable
from typing import Any

import torch
from transformers import TrainerCallback

from bench.worker import memory


class StepRecorder(TrainerCallback):
    """Step-end timestamps (CUDA-synchronised), cumulative global tokens and memory per step.

    `trainer` and `on_first_step` are attached after construction, once the trainer exists: TRL keeps its
    rank-gathered token count on the trainer.
    """

    def __init__(self) -> None:
        self.trainer: Any = None
        self.on_first_step: Callable[[], None] | None = None
        self.train_start: float | None = None
        self.step_ends: list[float] = []
        self.tokens: list[int] = []
        self.memory_now: list[int] = []
        self._synchronize = torch.cuda.is_available()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._sync()
        self.train_start = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._sync()
        self.step_ends.append(time.perf_counter())
        self.tokens.append(int(getattr(self.trainer, "_total_train_tokens", 0)))
        now = memory.cuda_allocated_now() if memory.cuda_used() else memory.current_rss_bytes()
        self.memory_now.append(now or 0)
        if len(self.step_ends) == 1 and self.on_first_step is not None:
            self.on_first_step()

    def _sync(self) -> None:
        if self._synchronize and torch.cuda.is_initialized():
            torch.cuda.synchronize()
