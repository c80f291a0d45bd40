"""The worker's trainer for one cell: TRL's DPOTrainer, or optimum-habana's on `device: hpu` profiles."""

from typing import Any

from bench.matrix.backends import backend_spec
from bench.worker.emulate import apply_memory_cap
from bench.worker.hpu import build_gaudi_trainer
from bench.worker.models import build_models
from bench.worker.placement import splits_layers
from bench.worker.spec import WorkerSpec
from bench.worker.trainer_args import trainer_arguments


def import_libraries(spec: WorkerSpec) -> None:
    """Import every library the cell's training will load, so that the memory taken next (the library baseline)
    is the libraries' and what comes after is the model's."""
    import importlib

    names = ["transformers", "datasets", "trl", "peft", "accelerate"]
    if backend_spec(spec.cell.backend).deepspeed is not None:
        names.append("deepspeed")
    if spec.cell.quant != "none":
        names.append("bitsandbytes")
    for name in names:
        importlib.import_module(name)
    from trl import DPOTrainer  # noqa: F401  (the trainer module pulls in most of what training touches)


def build_trainer(spec: WorkerSpec, callbacks: list[Any]) -> Any:
    if spec.profile.device == "hpu":
        return build_gaudi_trainer(spec, callbacks)
    # --emulate: cap this process's CUDA memory at the profile's before anything is allocated, on every device a
    # split model spreads over
    apply_memory_cap(all_devices=splits_layers(spec), launcher=spec.cell.launcher)
    return trl_trainer(spec, callbacks)


def dpo_config(spec: WorkerSpec) -> Any:
    from trl import DPOConfig

    return DPOConfig(**trainer_arguments(spec))


def trl_trainer(spec: WorkerSpec, callbacks: list[Any]) -> Any:
    """TRL's DPOTrainer for the cell, nothing else: also the plain-TRL baseline's trainer
    (bench/selfbench/plain_dpo.py)."""
    from datasets import load_from_disk
    from transformers import AutoTokenizer
    from trl import DPOTrainer

    args = dpo_config(spec)
    tokenizer = AutoTokenizer.from_pretrained(spec.assets.tokenizer)
    dataset = load_from_disk(spec.assets.dataset)
    built = build_models(spec)
    return DPOTrainer(
        model=built.model,
        ref_model=built.ref_model,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=built.peft_config,
        callbacks=callbacks,
    )
