"""The cell's real training step, ready to trace: its method's TRL trainer built by the worker (bench/worker/) from
the workload's assets in its method's data form (as a run gives them, bench/run/one_cell.py), and the first batch
its own data loader yields (the workload's real lengths, padded as the collator pads them, not max_length).

The step runs on the CPU whatever the profile's device: the trace counts operations and tensor bytes, which do not
depend on where they run; the profile's precision is kept (bf16 autocast on the CPU as on a GPU). The CPU's autocast
policy is not CUDA's (CUDA runs softmax and log_softmax in fp32, the CPU cross-entropy), and TRL's Triton log-prob
kernel runs only on a GPU: a GPU cell's loss keeps other logits-sized tensors than its trace."""

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.assets.prepare import cell_dataset, prepare
from bench.matrix.plan import Plan, plan_for
from bench.worker.build import trl_trainer
from bench.worker.spec import WorkerSpec


@dataclass
class Step:
    trainer: Any
    batch: dict[str, Any]
    context: Callable[[], Any] = field(default=contextlib.nullcontext)
    """What the step runs under: nothing for a real step, the fake tensor mode for a fake one (fake_step.py)."""

    @property
    def shape(self) -> tuple[int, int]:
        """(sequences, padded length) the model runs: the batch's input ids where its collator made one tensor
        (DPO's and the reward model's hold chosen and rejected already concatenated), else its chosen and rejected
        ids stacked at the longer one's length, as the experimental ORPO and CPO trainers' `concatenated_inputs`
        pads them for their one forward."""
        if "input_ids" in self.batch:
            rows, length = self.batch["input_ids"].shape
            return int(rows), int(length)
        halves = [self.batch[f"{side}_input_ids"].shape for side in ("chosen", "rejected")]
        return sum(int(rows) for rows, _ in halves), max(int(length) for _, length in halves)


def build_step(plan: Plan, out_dir: Path) -> Step:
    """The trainer of `plan`'s cell and its first batch, everything on the CPU; `out_dir` holds the trainer's
    files and the cell's own view of the dataset."""
    import torch

    cpu = plan.profile.model_copy(update={"device": "cpu", "device_count": 1})
    torch.manual_seed(plan.workload.train.seed)
    assets = prepare(plan.workload)
    rows = assets.dataset_for(plan.method.data)
    assets = assets.model_copy(update={"dataset": cell_dataset(rows, out_dir / "dataset")})
    spec = WorkerSpec.from_plan(plan_for(plan.cell, cpu, plan.workload), assets, str(out_dir))
    trainer = trl_trainer(spec, [])
    batch = next(iter(trainer.get_train_dataloader()))
    ready_to_step(trainer, plan.workload.train.steps)
    return Step(trainer=trainer, batch=batch)


def ready_to_step(trainer: Any, steps: int) -> None:
    """What Trainer.train does before its first step: the optimizer and schedule for `steps`, the accumulation
    count training_step divides the loss by, checkpointing, train mode, and the model's forward wrapped in the
    trainer's autocast (`accelerator.prepare_model`: the Trainer's own autocast context is empty, accelerate's
    wrapper is where mixed precision comes from)."""
    trainer.create_optimizer_and_scheduler(num_training_steps=steps)
    trainer.current_gradient_accumulation_steps = 1
    enable_checkpointing(trainer)
    trainer.model = trainer.accelerator.prepare_model(trainer.model, device_placement=False)
    trainer.model.train()


def enable_checkpointing(trainer: Any) -> None:
    """What Trainer.train does before its first step for `activation_checkpointing` (transformers' trainer.py):
    the trainer's constructor leaves the model without it, and a step traced without it misses the recompute."""
    args = trainer.args
    if not getattr(args, "activation_checkpointing", args.gradient_checkpointing):
        return
    kwargs = dict(getattr(args, "activation_checkpointing_kwargs", None) or args.gradient_checkpointing_kwargs or {})
    every, offload = kwargs.pop("every_n_layers", 1), kwargs.pop("offload", False)
    trainer.model.activation_checkpointing_enable(
        activation_checkpointing_kwargs=kwargs or None, every_n_layers=every, offload=offload
    )


def run_step(step: Step) -> None:
    """One optimizer step: the trainer's training_step (forward, loss, backward), then the optimizer's update. The
    caller enters the step's context (a tracker entered inside it sees a fake step's ops)."""
    step.trainer.training_step(step.trainer.model, step.batch)
    step.trainer.optimizer.step()
    step.trainer.optimizer.zero_grad(set_to_none=True)
