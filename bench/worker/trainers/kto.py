"""KTO: TRL's KTOTrainer over the pairs unpaired (a desirable and an undesirable row per pair, interleaved:
bench/assets/method_data.py), with the reference its init mode places, as DPO's. The desirable and undesirable
weights stay at TRL's 1.0 (bench/judge/learning.py derives the first-step loss from them)."""

from typing import Any

from bench.worker.models import build_models
from bench.worker.spec import WorkerSpec
from bench.worker.trainer_args import common_arguments, precompute_ref_log_probs
from bench.worker.trainers import assemble, inputs


def arguments(spec: WorkerSpec) -> dict[str, Any]:
    """KTOConfig's keyword arguments (also what an exported recipe writes)."""
    return common_arguments(spec) | {
        "beta": spec.workload.train.beta,
        "precompute_ref_log_probs": precompute_ref_log_probs(spec),
    }


def trainer(spec: WorkerSpec, callbacks: list[Any]) -> Any:
    from trl import KTOConfig, KTOTrainer

    args = KTOConfig(**arguments(spec))
    tokenizer, dataset = inputs(spec)
    return assemble(KTOTrainer, args, build_models(spec), tokenizer, dataset, callbacks, reference=True)
