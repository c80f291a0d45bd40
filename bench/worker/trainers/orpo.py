"""ORPO: trl.experimental.orpo's ORPOTrainer over the pairs: the chosen answer's NLL plus an odds-ratio term, no
reference. Its lambda (ORPOConfig.beta) stays at TRL's 0.1: the workload's beta is DPO's."""

from typing import Any

from bench.worker.models import build_models
from bench.worker.spec import WorkerSpec
from bench.worker.trainer_args import common_arguments
from bench.worker.trainers import assemble, inputs


def arguments(spec: WorkerSpec) -> dict[str, Any]:
    """ORPOConfig's keyword arguments (also what an exported recipe writes)."""
    return common_arguments(spec)


def trainer(spec: WorkerSpec, callbacks: list[Any]) -> Any:
    from trl.experimental.orpo import ORPOConfig, ORPOTrainer

    args = ORPOConfig(**arguments(spec))
    tokenizer, dataset = inputs(spec)
    return assemble(ORPOTrainer, args, build_models(spec), tokenizer, dataset, callbacks, reference=False)
