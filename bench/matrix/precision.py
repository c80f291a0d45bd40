"""The training precisions a setup can name, and the dtypes each loads and computes in. A profile's `precision` is
the compute dtype (fp32, bf16, fp16); the mode adds whether an fp32 copy of the weights is kept:
- `mixed`: bf16 compute, the trained weights as the backend keeps them (FSDP and DeepSpeed keep an fp32 master copy);
- `pure-bf16`: weights, gradients and optimizer state in bf16, no fp32 copy anywhere (FSDP-QLoRA scripts,
  `torch_dtype=bfloat16` with accelerate's mixed precision `no`);
- `fp16-mixed`: fp32 weights with fp16 autocast and a GradScaler, the working setup on cards without bf16 (T4, V100):
  fp16 weights fail at the first step ("Attempting to unscale FP16 gradients", torch.amp.GradScaler.unscale_);
- `fp32`: everything in fp32. Pure."""

from typing import Literal

Precision = Literal["fp32", "bf16", "fp16"]
MODES = ("mixed", "pure-bf16", "fp16-mixed", "fp32")
Mode = Literal[MODES]  # type: ignore[valid-type]

COMPUTE_DTYPE: dict[str, str] = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
"""torch's name of the dtype a profile's matmuls run in (autocast, bitsandbytes' compute dtype)."""
DTYPE_BYTES: dict[str, int] = {"float32": 4, "bfloat16": 2, "float16": 2}
"""Bytes of one element of each dtype named above."""


def load_dtype(precision: str, quantized: bool = False) -> str:
    """torch's name of the dtype from_pretrained loads the weights in (an exported recipe's `dtype`, which TRL also
    takes as bitsandbytes' compute dtype): fp16 training loads fp32 weights, which the GradScaler needs, and
    autocasts the matmuls to fp16; a quantized model loads fp16 (its trained adapters are fp32: PEFT's
    autocast_adapter_dtype), so that its 4-/8-bit matmuls compute in fp16."""
    if precision == "fp16" and quantized:
        return COMPUTE_DTYPE["fp16"]
    return {"fp16": "float32"}.get(precision, COMPUTE_DTYPE[precision])


def mode_of(precision: str, master_weights: bool = True) -> Mode:
    """The mode a profile's precision trains in; `master_weights=False` is pure 16-bit training."""
    if precision == "fp32":
        return "fp32"
    if precision == "fp16":
        return "fp16-mixed"
    return "mixed" if master_weights else "pure-bf16"


PURE_BF16_DEEPSPEED = "DeepSpeed's bf16 engine keeps an fp32 master copy"
"""Why no DeepSpeed setup trains pure bf16 (a run records such cells not applicable; an export refuses them)."""


def trains_pure_bf16(precision: str, master_weights: bool | None) -> bool:
    """Whether a profile's compute precision with a workload's `master_weights` (None: as the backend keeps them) is
    pure bf16: bf16 weights trained without autocast or an fp32 copy."""
    return precision == "bf16" and master_weights is False


def cuda_autocast(device: str, precision: str, master_weights: bool, deepspeed: bool) -> bool:
    """Whether the forward runs under torch.autocast on a CUDA device: 16-bit compute with fp32 master weights
    outside DeepSpeed (accelerate's `native_amp`, accelerator.py; DeepSpeed's bf16 and fp16 engines run the 16-bit
    module as it is). CUDA's autocast runs layer_norm, pow and softmax in fp32, the CPU's does not (torch's
    testing/_internal/autocast_test_lists.py: AutocastTestLists.torch_fp32 against AutocastCPUTestLists')."""
    return device == "cuda" and precision != "fp32" and master_weights and not deepspeed


def precision_of(mode: Mode) -> Precision:
    """The compute dtype a mode trains in."""
    return {"fp32": "fp32", "fp16-mixed": "fp16"}.get(mode, "bf16")  # type: ignore[return-value]


def in_effect(mode: Mode | None, precision: str, master_weights: bool) -> tuple[str, bool]:
    """(compute precision, master weights) a setup trains with: the mode's where one is named, else the profile's
    precision with `master_weights`."""
    if mode is None:
        return precision, master_weights
    return precision_of(mode), mode != "pure-bf16"


NOTES: dict[str, str] = {
    "mixed": "bf16 compute, an fp32 master copy where the backend keeps one (FSDP, DeepSpeed, PEFT's adapters)",
    "pure-bf16": "weights, gradients and optimizer state in bf16, no fp32 master copy",
    "fp16-mixed": "weights, gradients and optimizer state in fp32 (the GradScaler needs fp32 trained weights; "
    "DeepSpeed's fp16 engine casts the weights to fp16 and keeps the fp32 copy in its optimizer), matmuls in fp16",
    "fp32": "everything in fp32",
}
"""What each mode keeps, as a prediction's note says it (its memory terms: `weights` and the state that follows)."""


def note(named: Mode | None, precision: str, master_weights: bool) -> str | None:
    """The precision's note: where it is not the plain default (`mixed`, `fp32`) or where a mode was `named`."""
    mode = mode_of(precision, master_weights)
    if named is None and mode in ("mixed", "fp32"):
        return None
    return f"precision {mode}: {NOTES[mode]}"
