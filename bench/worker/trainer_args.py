"""A cell's trainer arguments, stated once for every path that trains a cell (the TRL worker, the Gaudi worker, which
adds its own switches, and the plain-TRL baseline bench/selfbench/plain_dpo.py): the fields every TRL config of
the methods shares, and DPO's own. Pure."""

from typing import Any

from bench.matrix.axes import Option
from bench.matrix.inits import init_spec
from bench.matrix.methods import method_spec
from bench.matrix.precision import trains_pure_bf16
from bench.worker.spec import WorkerSpec
from bench.worker.trackers import trainer_value


def gradient_checkpointing(spec: WorkerSpec) -> bool:
    return spec.workload.train.gradient_checkpointing and Option.NO_GRADIENT_CHECKPOINTING not in spec.cell.options


def precompute_ref_log_probs(spec: WorkerSpec) -> bool:
    """Asked by the option, the recipe or the workload (bench/matrix/reference.py)."""
    return spec.reference.precomputed


def pure_bf16(spec: WorkerSpec) -> bool:
    """`--precision pure-bf16`: the weights loaded in bf16 and trained without autocast or an fp32 master copy."""
    return trains_pure_bf16(spec.profile.precision, spec.workload.train.master_weights)


def liger(spec: WorkerSpec) -> bool:
    """`--liger on|off` where given, else the cell's `liger` option."""
    given = spec.workload.train.use_liger_kernel
    return Option.LIGER in spec.cell.options if given is None else given


def learning_rate(spec: WorkerSpec) -> float:
    """Adapters train with their own (usually ~10x larger) rate when the workload gives one; the method's table
    entry may scale it (bench/matrix/methods.py)."""
    rate = spec.workload.train.learning_rate
    if init_spec(spec.cell.init).adapters and spec.workload.lora.learning_rate is not None:
        rate = spec.workload.lora.learning_rate
    return rate * method_spec(spec.cell.method).learning_rate_scale


def common_arguments(spec: WorkerSpec) -> dict[str, Any]:
    """Keyword arguments every method's TRL config takes (TrainingArguments' fields and max_length); the optimizer
    and gradient accumulation only where the workload sets them (else the library's defaults), `torch_compile` only
    where `--torch-compile` gave it; bf16 autocast unless pure bf16."""
    train = spec.workload.train
    chosen = {"optim": train.optim, "gradient_accumulation_steps": train.gradient_accumulation_steps}
    chosen["torch_compile"] = train.torch_compile
    return {k: v for k, v in chosen.items() if v is not None} | {
        "output_dir": str(spec.out_dir) + "/trainer",
        "max_steps": train.steps,
        "per_device_train_batch_size": train.per_device_train_batch_size,
        "learning_rate": learning_rate(spec),
        "max_length": train.max_length,
        "seed": train.seed,
        "gradient_checkpointing": gradient_checkpointing(spec),
        "use_liger_kernel": liger(spec),
        "bf16": spec.profile.precision == "bf16" and not pure_bf16(spec),
        "fp16": spec.profile.precision == "fp16",
        "use_cpu": spec.profile.device == "cpu",
        "deepspeed": spec.deepspeed_config,
        "logging_steps": train.steps,
        "save_strategy": "no",
        "report_to": trainer_value(spec.report_to),
        "dataloader_num_workers": 0,
        "disable_tqdm": True,
    }


def trainer_arguments(spec: WorkerSpec) -> dict[str, Any]:
    """Keyword arguments of DPOConfig for this cell."""
    return common_arguments(spec) | {
        "beta": spec.workload.train.beta,
        "precompute_ref_log_probs": precompute_ref_log_probs(spec),
    }
