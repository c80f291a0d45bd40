"""What the settings users turn (`--attention`, `--liger`, `--torch-compile`) do to a GPU step's time: each a named
factor on the step with the published benchmark it comes from, or no term where none states one. The step model
(model.py) prices sdpa attention, no Liger and no compilation; `knob_seconds` is the one term these add."""

from collections.abc import Collection
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.matrix.profiles import TrainSpec

EAGER_ATTENTION_SLOWDOWN = 180 / 130
"""Step time with eager attention over sdpa's (a flash kernel on a GPU): a 1.3B GPT trained on one A100-80GB ran at
180 TFLOP/s with FlashAttention and 130 without (EleutherAI/gpt-neox pull 725, the side-by-side runs in its thread;
their sequence length is not stated there, gpt-neox's 1.3B config trains at 2,048)."""

FLASH_ATTENTION_2_OVER_SDPA = 1.0
"""No speed term: PyTorch's sdpa runs the FlashAttention-2 kernels on a CUDA card since 2.2 ("scaled_dot_product_
attention (SDPA) now supports FlashAttention-2", PyTorch 2.2 release notes), the kernels `flash_attention_2` loads."""

LIGER_SPEEDUP = 1.20
"""Throughput with Liger's kernels over without: "increase multi-GPU training throughput by 20%" (linkedin/Liger-Kernel
README; LLaMA 3-8B, batch 8, bf16, AdamW, gradient checkpointing, FSDP1 on 8 A100s)."""

LIGER_FUSES = ("elementwise", "logprob_tiles")
"""The step terms Liger's kernels replace (its README's list: RMSNorm, RoPE, SwiGLU, and the cross entropy fused with
the LM head's logits): the memory-bound elementwise passes and the loss's tiles. It runs no GEMM of the decoder, so
the time it saves is at most these terms' (the README's 20 % taken where they are that large)."""

TORCH_COMPILE_SPEEDUP = 1.0
"""No speed term: no source states it for an LLM's training step. PyTorch 2.0's figures are geometric means over
model suites (most far smaller than an LLM, whose step is matmul-bound); the torchtune x Liger blog shows torch.compile
ahead of eager on Llama-3.2-1B in plots, without a ratio to take. A compiled step is predicted at eager's speed."""


def step_factor(device: str, train: "TrainSpec") -> float:
    """The step time's factor from the attention and compile settings (`train`) on a `device` kind (1.0 off a GPU:
    each source measured CUDA kernels; and where none is set). Liger is liger_on's term."""
    if device != "cuda":
        return 1.0
    factor = {"eager": EAGER_ATTENTION_SLOWDOWN, "flash_attention_2": FLASH_ATTENTION_2_OVER_SDPA}.get(
        train.attn_implementation or "sdpa", 1.0
    )
    if train.torch_compile:
        factor /= TORCH_COMPILE_SPEEDUP
    return factor


def liger_on(device: str, train: "TrainSpec", options: Collection[str]) -> bool:
    """Liger's kernels take part in the step: asked by the settings or the cell's option, on a GPU."""
    from bench.matrix.axes import Option

    liger = Option.LIGER in options if train.use_liger_kernel is None else train.use_liger_kernel
    return device == "cuda" and bool(liger)


def knob_seconds(terms: dict[str, float], factor: float, liger: bool = False) -> dict[str, float]:
    """`terms` with a `settings` term where a setting moves the step: the seconds it adds (negative: removes) from
    the step those terms sum to; the `step_factor` on all of it, then Liger's saving, no more than the terms it
    fuses (LIGER_FUSES)."""
    step = sum(terms.values()) * factor
    saved = min(step * (1 - 1 / LIGER_SPEEDUP), sum(terms.get(k, 0.0) for k in LIGER_FUSES)) if liger else 0.0
    if factor == 1.0 and not saved:
        return terms
    return terms | {"settings": step - sum(terms.values()) - saved}
