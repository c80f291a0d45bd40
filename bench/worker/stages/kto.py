"""KTO: TRL's KTOTrainer over the pairs unpaired (a desirable and an undesirable row per pair, interleaved:
bench/assets/method_data.py), with the reference its init mode places, as DPO's. The desirable and undesirable
weights stay at TRL's 1.0 (bench/judge/learning.py derives the first-step loss from them)."""

from typing import Any

from bench.worker.models import build_models
from bench.worker.spec import WorkerSpec
from bench.worker.stages import inputs
from bench.worker.trainer_args import common_arguments, precompute_ref_log_probs


def trainer(spec: WorkerSpec, callbacks: list[Any]) -> Any:
    from trl import KTOConfig, KTOTrainer

    args = KTOConfig(
        **common_arguments(spec),
        beta=spec.workload.train.beta,
        precompute_ref_log_probs=precompute_ref_log_probs(spec),
    )
    tokenizer, dataset = inputs(spec)
    built = build_models(spec)
    return KTOTrainer(
        model=built.model,
        ref_model=built.ref_model,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=built.peft_config,
        callbacks=callbacks,
    )
