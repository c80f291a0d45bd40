"""Intel Gaudi (HPU) path of the worker: optimum-habana's GaudiDPOTrainer. Written without Gaudi hardware and never
run in this project: on a machine without `habana_frameworks` every cell of an hpu profile is recorded `untested`
(bench/run/preflight.py) and this module is not reached. How the path differs from CUDA's, and how to validate it on
a Gaudi node: docs/hpu.md."""

import dataclasses
from typing import Any

from bench.worker.models import build_models
from bench.worker.spec import WorkerSpec
from bench.worker.trainer_args import trainer_arguments

GAUDI_SWITCHES: dict[str, Any] = {"use_habana": True, "use_lazy_mode": True}

TRAINER_KEYWORDS = frozenset({"beta", "max_length", "precompute_ref_log_probs"})
"""DPO fields that GaudiDPOTrainer takes as its own arguments where the arguments class lacks them (releases
without GaudiDPOConfig)."""


def gaudi_modules() -> tuple[Any, Any, Any]:
    """(GaudiConfig, GaudiDPOTrainer, GaudiDPOConfig or, in older releases, GaudiTrainingArguments); ImportError
    with the missing package's name when the Habana stack is absent."""
    import habana_frameworks.torch.core  # noqa: F401  # type: ignore[import-not-found]
    from optimum.habana import GaudiConfig  # type: ignore[import-not-found]
    from optimum.habana.transformers.modeling_utils import (  # type: ignore[import-not-found]
        adapt_transformers_to_gaudi,
    )
    from optimum.habana.trl import GaudiDPOTrainer  # type: ignore[import-not-found]

    adapt_transformers_to_gaudi()
    try:
        from optimum.habana.trl import GaudiDPOConfig as arguments_cls  # type: ignore[import-not-found]
    except ImportError:
        from optimum.habana import GaudiTrainingArguments as arguments_cls  # type: ignore[import-not-found]
    return GaudiConfig, GaudiDPOTrainer, arguments_cls


def gaudi_arguments(spec: WorkerSpec) -> dict[str, Any]:
    """The cell's trainer arguments plus the Gaudi switches. Pure."""
    return trainer_arguments(spec) | GAUDI_SWITCHES


def gaudi_split(arguments: dict[str, Any], fields: frozenset[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(arguments for the arguments class, which has `fields`; keyword arguments for the trainer). A field neither
    takes is dropped when off (False/None), and refused when set, so no requested option is silently lost. Pure."""
    for_class: dict[str, Any] = {}
    for_trainer: dict[str, Any] = {}
    for name, value in arguments.items():
        if name in fields:
            for_class[name] = value
        elif name in TRAINER_KEYWORDS:
            for_trainer[name] = value
        elif value is not None and value is not False:
            raise ValueError(f"{name}={value!r} is not supported by this optimum-habana release's arguments")
    return for_class, for_trainer


def build_gaudi_trainer(spec: WorkerSpec, callbacks: list[Any]) -> Any:
    from datasets import load_from_disk
    from transformers import AutoTokenizer

    gaudi_config_cls, trainer_cls, arguments_cls = gaudi_modules()
    gaudi_config = gaudi_config_cls(use_fused_adam=True, use_fused_clip_norm=True, use_torch_autocast=True)
    fields = frozenset(field.name for field in dataclasses.fields(arguments_cls))
    for_class, for_trainer = gaudi_split(gaudi_arguments(spec), fields)
    args = arguments_cls(**for_class)
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
        **for_trainer,
    )
