"""DPO: TRL's DPOTrainer over the preference pairs, with the reference its init mode places."""

from typing import Any

from bench.worker.models import build_models
from bench.worker.spec import WorkerSpec
from bench.worker.trainer_args import trainer_arguments
from bench.worker.trainers import assemble, inputs


def arguments(spec: WorkerSpec) -> dict[str, Any]:
    """DPOConfig's keyword arguments (also what an exported recipe writes)."""
    return trainer_arguments(spec)


def config(spec: WorkerSpec) -> Any:
    from trl import DPOConfig

    return DPOConfig(**arguments(spec))


def trainer(spec: WorkerSpec, callbacks: list[Any]) -> Any:
    from trl import DPOTrainer

    args = config(spec)
    tokenizer, dataset = inputs(spec)
    return assemble(DPOTrainer, args, build_models(spec), tokenizer, dataset, callbacks, reference=True)
