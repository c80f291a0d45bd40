"""Model(s), adapters and trainer for one cell, per init mode, quantization and backend (TRL 1.16)."""

from dataclasses import dataclass
from typing import Any

import torch

from bench.scenario import Backend, Init, Option, Quant
from bench.worker.emulate import apply_memory_cap
from bench.worker.spec import WorkerSpec

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class Built:
    model: Any
    ref_model: Any
    peft_config: Any


def quantization_config(quant: Quant, compute_dtype: torch.dtype) -> Any:
    from transformers import BitsAndBytesConfig

    if quant == Quant.INT8:
        return BitsAndBytesConfig(load_in_8bit=True)
    if quant == Quant.NF4:
        return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=compute_dtype)
    return None


def device_map(spec: WorkerSpec) -> Any:
    """None lets accelerate place the model; quantized and device_map cells must be placed at load time."""
    if spec.cell.backend == Backend.DEVICE_MAP:
        return "balanced"
    if spec.profile.device == "cpu":
        return None
    if spec.cell.quant != Quant.NONE:
        from accelerate import PartialState

        return {"": PartialState().local_process_index}
    return None


def load_causal_lm(spec: WorkerSpec) -> Any:
    from transformers import AutoModelForCausalLM

    dtype = DTYPES[spec.profile.precision]
    return AutoModelForCausalLM.from_pretrained(
        spec.assets.model,
        dtype=dtype,
        quantization_config=quantization_config(spec.cell.quant, dtype),
        device_map=device_map(spec),
        trust_remote_code=False,
    )


def lora_config(spec: WorkerSpec) -> Any:
    from peft import LoraConfig

    lora = spec.workload.lora
    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        task_type="CAUSAL_LM",
    )


def build_models(spec: WorkerSpec) -> Built:
    model = load_causal_lm(spec)
    init = spec.cell.init
    if init == Init.TWO_MODELS:
        return Built(model=model, ref_model=load_causal_lm(spec), peft_config=None)
    if init == Init.ONE_ADAPTER:
        return Built(model=model, ref_model=None, peft_config=lora_config(spec))
    from peft import get_peft_model, prepare_model_for_kbit_training

    if spec.cell.quant != Quant.NONE:
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=gradient_checkpointing(spec))
    # Adapter `default` is trained; TRL adds a frozen copy named `ref` and uses it as the reference.
    return Built(model=get_peft_model(model, lora_config(spec)), ref_model=None, peft_config=None)


def gradient_checkpointing(spec: WorkerSpec) -> bool:
    return spec.workload.train.gradient_checkpointing and Option.NO_GRADIENT_CHECKPOINTING not in spec.cell.options


def dpo_config(spec: WorkerSpec) -> Any:
    from trl import DPOConfig

    train = spec.workload.train
    return DPOConfig(
        output_dir=str(spec.out_dir) + "/trainer",
        max_steps=train.steps,
        per_device_train_batch_size=train.per_device_train_batch_size,
        learning_rate=train.learning_rate,
        beta=train.beta,
        max_length=train.max_length,
        seed=train.seed,
        gradient_checkpointing=gradient_checkpointing(spec),
        precompute_ref_log_probs=Option.PRECOMPUTE_REF in spec.cell.options,
        use_liger_kernel=Option.LIGER in spec.cell.options,
        bf16=spec.profile.precision == "bf16",
        fp16=spec.profile.precision == "fp16",
        use_cpu=spec.profile.device == "cpu",
        deepspeed=spec.deepspeed_config,
        logging_steps=train.steps,
        save_strategy="no",
        report_to="none",
        dataloader_num_workers=0,
        disable_tqdm=True,
    )


def build_trainer(spec: WorkerSpec, callbacks: list[Any]) -> Any:
    from datasets import load_from_disk
    from transformers import AutoTokenizer

    if spec.profile.device == "hpu":
        from bench.worker.hpu import build_gaudi_trainer

        return build_gaudi_trainer(spec, callbacks)
    from trl import DPOTrainer

    # --emulate: cap this process's CUDA memory at the profile's before anything is allocated
    apply_memory_cap(all_devices=spec.cell.backend == Backend.DEVICE_MAP)
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
