"""DPO: TRL's DPOTrainer over the preference pairs, with the reference its init mode places."""

from typing import Any

from bench.worker.models import build_models
from bench.worker.spec import WorkerSpec
from bench.worker.stages import inputs
from bench.worker.trainer_args import trainer_arguments


def config(spec: WorkerSpec) -> Any:
    from trl import DPOConfig

    return DPOConfig(**trainer_arguments(spec))


def trainer(spec: WorkerSpec, callbacks: list[Any]) -> Any:
    args = config(spec)
    tokenizer, dataset = inputs(spec)
    return assemble(args, build_models(spec), tokenizer, dataset, callbacks)


def assemble(args: Any, built: Any, tokenizer: Any, dataset: Any, callbacks: list[Any]) -> Any:
    """TRL's DPOTrainer over what the cell built (also bench/selfbench/memory_phases.py, which measures each part)."""
    from trl import DPOTrainer

    return DPOTrainer(
        model=built.model,
        ref_model=built.ref_model,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=built.peft_config,
        callbacks=callbacks,
    )
