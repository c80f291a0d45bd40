"""The published throughput rows (scenarios/published/memory.yaml: torchtune's tokens/s, Qwen's s/it) as step
setups the speed model can predict. Each row states the configuration its source gives; what the source leaves
open is an assumption named in `assumed`."""

import functools
from dataclasses import dataclass

from bench.estimate.speed import work
from bench.estimate.speed.model import StepSetup
from bench.judge.mfu import ModelShape, shape_of
from bench.matrix.axes import Backend
from bench.matrix.backends import backend_spec

LLAMA31_8B = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
}
"""meta-llama/Llama-3.1-8B config.json."""
QWEN_7B = {
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "vocab_size": 151936,
}
"""Qwen/Qwen-7B config.json (its intermediate_size 22016 counts both halves of the SwiGLU: 11008 each), as the
Llama layout it matches."""


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
    ),
    PublishedSpeedRow(
        "qwen7b-lora-a100: seq 256",
        "NVIDIA A100-SXM4-80GB",
        "qwen7b",
        64,
        "none",
        8,
        256,
        8 * 256 / 1.2,
        "8 full-length sequences per iteration (batch 1 x grad_accum 8)",
    ),
    PublishedSpeedRow(
        "qwen7b-lora-a100: seq 2048",
        "NVIDIA A100-SXM4-80GB",
        "qwen7b",
        64,
        "none",
        8,
        2048,
        8 * 2048 / 5.2,
        "8 full-length sequences per iteration (batch 1 x grad_accum 8)",
    ),
    PublishedSpeedRow(
        "qwen7b-lora-a100: seq 8192",
        "NVIDIA A100-SXM4-80GB",
        "qwen7b",
        64,
        "none",
        8,
        8192,
        8 * 8192 / 21.3,
        "8 full-length sequences per iteration (batch 1 x grad_accum 8)",
    ),
)
FITTED = tuple(r.id for r in ROWS if "RTX 4090" in r.id)
"""The rows the GPU efficiency is fitted on: torchtune's three RTX 4090 rows; the A6000 and Qwen rows are held out."""


@functools.cache
def _model(model: str):
    """The model on the meta device (no memory, no weights)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    with torch.device("meta"):
        return LlamaForCausalLM(LlamaConfig(**{"llama31": LLAMA31_8B, "qwen7b": QWEN_7B}[model]))


@functools.cache
def _shapes(model: str) -> tuple[ModelShape, int, int]:
    """(MFU shape, every parameter, decoder linear weights) of the model."""
    import torch

    built = _model(model)
    head = built.get_output_embeddings().weight
    linear = sum(m.weight.numel() for m in built.modules() if isinstance(m, torch.nn.Linear) and m.weight is not head)
    return shape_of(built), sum(p.numel() for p in built.parameters()), linear


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
    )
