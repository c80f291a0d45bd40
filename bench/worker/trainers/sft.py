"""SFT: TRL's SFTTrainer over each prompt and its chosen answer (the loss is on the answer), one model, no
reference."""

from typing import Any

from bench.worker.models import build_models
from bench.worker.spec import WorkerSpec
from bench.worker.trainer_args import common_arguments
from bench.worker.trainers import assemble, inputs


def arguments(spec: WorkerSpec) -> dict[str, Any]:
    """SFTConfig's keyword arguments (also what an exported recipe writes)."""
    return common_arguments(spec)


def trainer(spec: WorkerSpec, callbacks: list[Any]) -> Any:
    from trl import SFTConfig, SFTTrainer

    args = SFTConfig(**arguments(spec))
    tokenizer, dataset = inputs(spec)
    return assemble(SFTTrainer, args, build_models(spec), tokenizer, dataset, callbacks, reference=False)
