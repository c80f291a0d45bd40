"""The published throughput rows (scenarios/published/memory.yaml: torchtune's tokens/s; Qwen's s/it, every
length of its LoRA and Q-LoRA rows from QWEN_README) as step setups the speed model can predict. Each row states
the configuration its source gives; what the source leaves open is an assumption named in `assumed`."""

import functools
from dataclasses import dataclass

from bench.estimate.speed import work
from bench.estimate.speed.mfu_sources import model_config
from bench.estimate.speed.model import StepSetup
from bench.judge.mfu import ModelShape, shape_of
from bench.matrix.axes import Backend
from bench.matrix.backends import backend_spec

MODELS = {"llama31": "llama-3.1-8b", "qwen7b": "qwen-7b"}
"""The rows' models, by their names in scenarios/published/mfu.yaml (their config.json numbers)."""
QWEN_README = "https://github.com/QwenLM/Qwen/blob/main/README.md"
QWEN7B_LORA_S_PER_IT = {256: 1.2, 512: 1.5, 1024: 2.8, 2048: 5.2, 4096: 10.1, 8192: 21.3}
QWEN7B_QLORA_S_PER_IT = {256: 3.0, 512: 3.0, 1024: 3.5, 2048: 7.0, 4096: 11.6, 8192: 22.3}
"""Qwen-7B on one A100-SXM4-80G, s/it by sequence length (QWEN_README, "Profiling of Memory and Speed": transformers
Trainer + PEFT, FlashAttention 2, batch 1, gradient accumulation 8, bf16, CUDA 11.8, PyTorch 2.0)."""


@dataclass(frozen=True)
class PublishedSpeedRow:
    id: str
    """`<memory.yaml id>: <setup>`."""
    card: str
    model: str
    lora_r: int | None
    quant: str
    sequences: int
    """Sequences per optimizer step."""
    seq_len: int
    measured_tokens_per_s: float
    assumed: str
    micro_steps: int = 1
    """Micro-batches per optimizer step (gradient accumulation)."""
    dropout: bool = False
    """LoRA dropout above 0 (one more pass over each adapted input)."""
    peft: bool = True
    """LoRA through PEFT (float32 adapters, work.adapter_bytes); torchtune's adapters are in the model's bf16."""


ROWS = (
    PublishedSpeedRow(
        "torchtune-llama31-8b-single-device: full, 1x RTX 4090",
        "NVIDIA GeForce RTX 4090",
        "llama31",
        None,
        "none",
        2,
        2048,
        1650,
        "activation checkpointing on; AdamW bytes (the recipe's paged 8-bit AdamW moves fewer)",
    ),
    PublishedSpeedRow(
        "torchtune-llama31-8b-single-device: LoRA, 1x RTX 4090",
        "NVIDIA GeForce RTX 4090",
        "llama31",
        8,
        "none",
        2,
        2048,
        3083,
        "activation checkpointing on; r=8",
        peft=False,
    ),
    PublishedSpeedRow(
        "torchtune-llama31-8b-single-device: QLoRA, 1x RTX 4090",
        "NVIDIA GeForce RTX 4090",
        "llama31",
        8,
        "nf4",
        2,
        2048,
        2413,
        "activation checkpointing on; r=8",
        peft=False,
    ),
    PublishedSpeedRow(
        "torchtune-llama31-8b-single-device: full, 1x A6000",
        "NVIDIA RTX A6000",
        "llama31",
        None,
        "none",
        2,
        2048,
        2579,
        "activation checkpointing on; AdamW bytes",
    ),
    PublishedSpeedRow(
        "torchtune-llama31-8b-single-device: LoRA, 1x A6000",
        "NVIDIA RTX A6000",
        "llama31",
        8,
        "none",
        2,
        2048,
        4699,
        "activation checkpointing on; r=8",
        peft=False,
    ),
    *(
        PublishedSpeedRow(
            f"qwen7b-{kind}-a100: seq {seq}",
            "NVIDIA A100-SXM4-80GB",
            "qwen7b",
            64,
            "nf4" if kind == "qlora" else "none",
            8,
            seq,
            8 * seq / s_per_it,
            "8 full-length sequences per iteration (batch 1 x grad_accum 8); LoRA on every decoder linear, dropout "
            "0.05 (finetune.py)"
            + (
                "; Q-LoRA loads the GPTQ Int4 checkpoint: modelled as 4-bit weights dequantized per pass"
                if kind == "qlora"
                else ""
            ),
            micro_steps=8,
            dropout=True,
        )
        for kind, table in (("lora", QWEN7B_LORA_S_PER_IT), ("qlora", QWEN7B_QLORA_S_PER_IT))
        for seq, s_per_it in table.items()
    ),
)
FITTED = tuple(f"qwen7b-{kind}-a100: seq {seq}" for kind in ("lora", "qlora") for seq in (256, 1024, 4096))
"""The published rows the GPU constants are fitted on (with this project's fitted GPU run, validate.GPU_FIT_RUNS),
named before the fit: Qwen-7B LoRA and Q-LoRA on one A100 at 256, 1024 and 4096 tokens. Every other row is held
out: Qwen's LoRA and Q-LoRA rows at 512, 2048 and 8192, and torchtune's five (another stack: torch.compile, packed
sequences)."""


@functools.cache
def _model(model: str):
    """The model on the meta device (no memory, no weights)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    with torch.device("meta"):
        return LlamaForCausalLM(LlamaConfig(**model_config(MODELS[model])))


@functools.cache
def _shapes(model: str) -> tuple[ModelShape, int, int]:
    """(MFU shape, every parameter, decoder linear weights) of the model."""
    import torch

    built = _model(model)
    head = built.get_output_embeddings().weight
    linear = sum(m.weight.numel() for m in built.modules() if isinstance(m, torch.nn.Linear) and m.weight is not head)
    return shape_of(built), sum(p.numel() for p in built.parameters()), linear


@functools.cache
def _layer_bytes(model: str) -> float:
    """Qwen-7B's own model code calls flash-attn's fused RMSNorm and rotary kernels (its README has them installed
    with FlashAttention for speed); torchtune's rows ran under torch.compile, which fuses them too."""
    c = model_config(MODELS[model])
    head_dim = c["hidden_size"] // c["num_attention_heads"]
    return work.layer_elementwise_bytes(
        c["hidden_size"],
        c["num_attention_heads"] * head_dim,
        c["num_key_value_heads"] * head_dim,
        c["intermediate_size"],
        2,
        fused_norm_rope=True,
    )


def _adapted(model: str) -> list[tuple[int, int]]:
    import torch

    built = _model(model)
    head = built.get_output_embeddings()
    return [
        (m.in_features, m.out_features) for m in built.modules() if isinstance(m, torch.nn.Linear) and m is not head
    ]


def lora_params(model: str, r: int) -> int:
    """r x (in + out) over every decoder linear (torchtune's and Qwen's adapters target most of them)."""
    import torch

    built = _model(model)
    head = built.get_output_embeddings()
    return sum(
        r * (m.in_features + m.out_features)
        for m in built.modules()
        if isinstance(m, torch.nn.Linear) and m is not head
    )


def setup_of(row: PublishedSpeedRow) -> StepSetup:
    shape, total, linear = _shapes(row.model)
    quantized = linear if row.quant == "nf4" else 0
    trainable = lora_params(row.model, row.lora_r) if row.lora_r else total
    step = work.StepShape(
        shape=shape,
        seq_len=float(row.seq_len),
        sequences=row.sequences,
        trainable_params=trainable,
        adapters=row.lora_r is not None,
        checkpointing=True,
        no_grad_forwards=0,
        vocab=shape.lm_head_params // shape.hidden,
        output="fused_logprobs",
        layer_bytes=_layer_bytes(row.model),
        adapter_bytes=work.adapter_bytes(_adapted(row.model), 2, row.dropout, row.peft) if row.lora_r else 0.0,
        micro_steps=row.micro_steps,
    )
    return StepSetup(
        step=step,
        backend=backend_spec(Backend.SINGLE),
        world=1,
        compute_bytes=2,
        quantized_params=quantized,
        quantized_linears=7 * shape.layers if quantized else 0,
        quant_bytes=0.5 if quantized else 0.0,
        policy_bytes=(total - quantized) * 2 + quantized * 0.5,
        reference_gathered=True,
        param_modules=0,
        gather_units=0,
        trl=False,
    )
