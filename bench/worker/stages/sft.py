"""SFT: TRL's SFTTrainer over each prompt and its chosen answer (the loss is on the answer), one model, no
reference."""

from typing import Any

from bench.worker.models import build_models
from bench.worker.spec import WorkerSpec
from bench.worker.stages import inputs
from bench.worker.trainer_args import common_arguments


def trainer(spec: WorkerSpec, callbacks: list[Any]) -> Any:
    from trl import SFTConfig, SFTTrainer

    tokenizer, dataset = inputs(spec)
    built = build_models(spec)
    return SFTTrainer(
        model=built.model,
        args=SFTConfig(**common_arguments(spec)),
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=built.peft_config,
        callbacks=callbacks,
    )
