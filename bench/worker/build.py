"""The worker's trainer for one cell: its method's TRL trainer, or optimum-habana's on `device: hpu` profiles."""

from typing import Any

from bench.matrix.axes import Method
from bench.matrix.backends import backend_spec
from bench.matrix.methods import method_spec
from bench.worker.emulate import apply_memory_cap
from bench.worker.hpu import build_gaudi_trainer
from bench.worker.placement import splits_layers
from bench.worker.spec import WorkerSpec
from bench.worker.trainers import trainer_module


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
    # the trainer's own module pulls in most of what training touches
    module, _, cls = method_spec(spec.cell.method).trainer.rpartition(".")
    getattr(importlib.import_module(module), cls)


def build_trainer(spec: WorkerSpec, callbacks: list[Any]) -> Any:
    if spec.profile.device == "hpu":
        if spec.cell.method != Method.DPO:
            raise ValueError(f"the Gaudi path builds optimum-habana's GaudiDPOTrainer only, not {spec.cell.method}")
        return build_gaudi_trainer(spec, callbacks)
    # --emulate: cap this process's CUDA memory at the profile's before anything is allocated, on every device a
    # split model spreads over
    apply_memory_cap(all_devices=splits_layers(spec), launcher=spec.cell.launcher)
    return trl_trainer(spec, callbacks)


def trl_trainer(spec: WorkerSpec, callbacks: list[Any]) -> Any:
    """TRL's trainer for the cell's method (bench/worker/trainers/), nothing else: also the plain-TRL baseline's
    trainer (bench/selfbench/plain_dpo.py)."""
    return trainer_module(spec.cell.method).trainer(spec, callbacks)
