"""Intel Gaudi (HPU) path of the worker: optimum-habana's GaudiDPOTrainer. Written without Gaudi hardware and
never run in this project so far: on a machine without `habana_frameworks` the runner records every cell of an
hpu profile as `untested` (bench/hardware.py) and this module is not reached.

How the Gaudi path differs from the CUDA one (optimum-habana 1.1x, Gaudi software 1.1x):
- `adapt_transformers_to_gaudi()` must patch transformers before any model is built.
- The trainer is `optimum.habana.trl.GaudiDPOTrainer` with a `GaudiConfig` (fused AdamW, fused clip-norm,
  torch autocast to bf16) and Gaudi training arguments (`use_habana=True`, `use_lazy_mode=True`: graphs are
  compiled in the first steps, hence the profile's long timeout and the warm-up steps).
- optimum-habana pins its own (older) TRL and transformers: the hpu image (docker/hpu/) must use those pins,
  not the CUDA lock file. Newer releases take a `GaudiDPOConfig` (TRL's DPOConfig fields); older ones take
  `GaudiTrainingArguments` plus `beta`/`max_length` as trainer arguments: both are handled below.
- bitsandbytes has no HPU backend: int8/nf4 cells are expected to fail with `error (import|incompatible)`.
- Multi-card runs use the HCCL backend through `deepspeed` or `gaudi_spawn.py` (optimum-habana) rather than
  NCCL; DDP/ZeRO cells launch as on CUDA with `deepspeed`/`torchrun`, which habana's torch integration patches.

To validate on a Gaudi2 node: build the hpu image (docker/hpu/), then
`python -m bench run --hw 8xGaudi2 --filter 'one_adapter-none-single'`, and check that the engagement record
shows the HPU device, then widen the filter.
"""

from typing import Any

from bench.worker.spec import WorkerSpec


def gaudi_modules() -> tuple[Any, Any, Any | None, Any | None]:
    """(GaudiConfig, GaudiDPOTrainer, GaudiDPOConfig or None, GaudiTrainingArguments or None); ImportError
    with the missing package's name when the Habana stack is absent."""
    import habana_frameworks.torch.core  # noqa: F401  # type: ignore[import-not-found]
    from optimum.habana import GaudiConfig  # type: ignore[import-not-found]
    from optimum.habana.transformers.modeling_utils import (  # type: ignore[import-not-found]
        adapt_transformers_to_gaudi,
    )
    from optimum.habana.trl import GaudiDPOTrainer  # type: ignore[import-not-found]

    adapt_transformers_to_gaudi()
    try:
        from optimum.habana.trl import GaudiDPOConfig  # type: ignore[import-not-found]
    except ImportError:
        GaudiDPOConfig = None  # older optimum-habana
    from optimum.habana import GaudiTrainingArguments  # type: ignore[import-not-found]

    return GaudiConfig, GaudiDPOTrainer, GaudiDPOConfig, GaudiTrainingArguments


def gaudi_arguments(spec: WorkerSpec) -> dict[str, Any]:
    """The DPOConfig fields the CUDA worker sets, plus the Gaudi switches. Pure."""
    train = spec.workload.train
    return {
        "output_dir": str(spec.out_dir) + "/trainer",
        "max_steps": train.steps,
        "per_device_train_batch_size": train.per_device_train_batch_size,
        "learning_rate": train.learning_rate,
        "seed": train.seed,
        "gradient_checkpointing": train.gradient_checkpointing,
        "bf16": spec.profile.precision == "bf16",
        "use_habana": True,
        "use_lazy_mode": True,
        "logging_steps": train.steps,
        "save_strategy": "no",
        "report_to": "none",
        "deepspeed": spec.deepspeed_config,
    }


def build_gaudi_trainer(spec: WorkerSpec, callbacks: list[Any]) -> Any:
    from datasets import load_from_disk
    from transformers import AutoTokenizer

    from bench.worker.build import build_models

    gaudi_config_cls, trainer_cls, dpo_config_cls, training_args_cls = gaudi_modules()
    gaudi_config = gaudi_config_cls(use_fused_adam=True, use_fused_clip_norm=True, use_torch_autocast=True)
    train = spec.workload.train
    arguments = gaudi_arguments(spec)
    extra: dict[str, Any] = {}
    if dpo_config_cls is not None:
        args = dpo_config_cls(**arguments, beta=train.beta, max_length=train.max_length)
    else:
        args = training_args_cls(**arguments)
        extra = {"beta": train.beta, "max_length": train.max_length}
    built = build_models(spec)
    return trainer_cls(
        model=built.model,
        ref_model=built.ref_model,
        args=args,
        gaudi_config=gaudi_config,
        train_dataset=load_from_disk(spec.assets.dataset),
        tokenizer=AutoTokenizer.from_pretrained(spec.assets.tokenizer),
        peft_config=built.peft_config,
        callbacks=callbacks,
        **extra,
    )
