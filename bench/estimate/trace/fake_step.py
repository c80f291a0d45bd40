"""The step of a model too large to run on the CPU (above prepare.py's LARGE_MODEL_PARAMS: llama-3.2-1b, phi-2),
built under fake tensors (fake_mode.py): the model from the workload's config.json with no weights (the random
checkpoint is never written or read), the trainer as the worker builds it (bench/worker/build.py `trl_trainer`,
its models through `build_models`' loader), and the first batch from the workload's real tokenizer, dataset and
collator (real tensors: the real lengths). FlopCounterMode counts the same ops over it that it counts over a real
step (tested on `tiny`): FLOPs depend on shapes only."""

import contextlib
from pathlib import Path
from typing import Any

from bench.assets.prepare import LARGE_MODEL_PARAMS, cell_dataset, parameter_count, prepare_text
from bench.estimate.shapes import config_path
from bench.estimate.trace.fake_mode import fake_parameters, stand_in_mode
from bench.estimate.trace.step import Step, ready_to_step
from bench.matrix.plan import Plan, plan_for
from bench.worker import models
from bench.worker.build import trl_trainer
from bench.worker.spec import WorkerSpec


def runs_fake(plan: Plan) -> bool:
    """Whether `plan`'s step is traced under fake tensors: its model is one prepare.py would not build in memory."""
    from transformers import AutoConfig

    return parameter_count(AutoConfig.from_pretrained(str(config_path(plan.workload).parent))) > LARGE_MODEL_PARAMS


def fake_refusal(plan: Plan) -> str | None:
    """Why `plan`'s cell cannot be traced under fake tensors (None: it can): only the causal-LM loader is
    replaced, and the reward model loads through its own (bench/worker/trainers/reward.py)."""
    from bench.worker.trainers import model_class

    auto_class = model_class(plan.cell.method)[0]
    if auto_class != "AutoModelForCausalLM":
        return f"a {auto_class} is not built under fake tensors (only the causal-LM loader is replaced)"
    return None


@contextlib.contextmanager
def _fake_loader(mode: Any) -> Any:
    """The worker's causal-LM loader replaced by the model built from its config under `mode`, in the dtype the
    worker would load (every model the cell builds goes through it: policy and separate reference)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    def load(spec: WorkerSpec) -> Any:
        config = AutoConfig.from_pretrained(spec.assets.model)
        dtype = models.torch_dtype(spec.profile.precision)
        with mode:
            return AutoModelForCausalLM.from_config(config, dtype=dtype, **models.load_kwargs(spec))

    original = models.load_causal_lm
    models.load_causal_lm = load
    try:
        yield
    finally:
        models.load_causal_lm = original


def build_fake_step(plan: Plan, out_dir: Path) -> Step:
    """The trainer of `plan`'s cell over fake weights and its first real batch, on the CPU's fake device; the
    step's context (Step.context) is the mode, letting all-real ops run and standing in for reads of fake data."""
    cpu = plan.profile.model_copy(update={"device": "cpu", "device_count": 1})
    assets = prepare_text(plan.workload)
    rows = cell_dataset(assets.dataset_for(plan.method.data), out_dir / "dataset")
    assets = assets.model_copy(update={"dataset": rows, "model": str(config_path(plan.workload).parent)})
    spec = WorkerSpec.from_plan(plan_for(plan.cell, cpu, plan.workload), assets, str(out_dir))
    mode = stand_in_mode()
    with _fake_loader(mode), fake_parameters(mode), mode:
        trainer = trl_trainer(spec, [])
    batch = next(iter(trainer.get_train_dataloader()))
    with fake_parameters(mode), mode:
        ready_to_step(trainer, plan.workload.train.steps)
    mode.real_through = True
    return Step(trainer=trainer, batch=batch, context=lambda: mode)
