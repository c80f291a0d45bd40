"""Which kernels a CPU cell's bf16 matmuls take, keyed on the CPU's features (env.json `cpu_features`), and what
those kernels keep: oneDNN's JIT primitives for a quantized cell's bf16 LoRA adapters (docs/estimator.md, "CPUs").

TRL casts a quantized model's adapters to bf16 and PEFT casts their inputs to match, so the adapters are a CPU cell's
only bf16 matmuls. ATen sends a bf16 matmul to oneDNN where the CPU has AVX-512 BW, VL and DQ; oneDNN JIT-compiles a
primitive for every new problem shape and keeps up to 1,024; TRL pads each batch to its longest row, so a cell keeps
(distinct problems per length) x (distinct lengths) primitives (`batch_lengths`: their expected number). The
measurements: docs/evidence/cpus.md.
"""

from typing import Literal

from bench.results.cpu_features import CpuFeatures
from bench.units import KiB

Bf16Path = Literal["aten", "avx512_core", "avx512_core_bf16", "amx"]

BF16_PRIMITIVE_BYTES: dict[Bf16Path, float] = {
    "amx": 682 * KiB,
    "avx512_core_bf16": 654 * KiB,
    "avx512_core": 59 * KiB,
    "aten": 0.0,
}
"""Anonymous memory one bf16 matmul primitive keeps, per path: `python -m bench selfbench onednn-primitives` (100
new shapes of each of an adapter's three products, ONEDNN_MAX_CPU_ISA capping oneDNN's ISA below this CPU's), on
an Intel Xeon with AMX: AMX 682 (676 on a re-run), AVX-512 BF16 654, AVX-512 without BF16 59 (61), oneDNN's AVX2
path creates no primitive (0.3)."""

REFERENCE: Bf16Path = "aten"
"""Where no CPU features are known: the path of the CPU the first runs measured on (an AMD EPYC without AVX-512;
its quantized cells measure what its unquantized ones do, as torch's own bf16 matmul keeps nothing)."""

DEFAULT_CACHE_CAPACITY = 1024
"""oneDNN's primitive cache (ONEDNN_PRIMITIVE_CACHE_CAPACITY unset)."""


def bf16_path(cpu: CpuFeatures | None) -> Bf16Path:
    """The path a bf16 matmul takes on `cpu`: the implementation oneDNN created in the probe where recorded (it
    follows ONEDNN_MAX_CPU_ISA), else what the flags imply. Pure."""
    if cpu is None:
        return REFERENCE
    implementation = cpu.onednn.bf16_matmul
    if implementation:
        if "amx" in implementation:
            return "amx"
        # brgemm kernels need native bf16 (AVX-512 BF16, AVX10); oneDNN's `gemm:jit:bf16` converts in AVX-512
        return "avx512_core_bf16" if implementation.startswith("brg") else "avx512_core"
    flags = set(cpu.flags)
    if cpu.torch_onednn_bf16 is False or not {"avx512bw", "avx512vl", "avx512dq"} <= flags:
        return "aten"
    if "amx_bf16" in flags:
        return "amx"
    return "avx512_core_bf16" if "avx512_bf16" in flags else "avx512_core"


def primitive_bytes(cpu: CpuFeatures | None) -> float:
    return BF16_PRIMITIVE_BYTES[bf16_path(cpu)]


def cache_capacity(cpu: CpuFeatures | None) -> int:
    """oneDNN's primitive cache size: ONEDNN_PRIMITIVE_CACHE_CAPACITY (or DNNL_...) where the run set it."""
    env = cpu.onednn.env if cpu is not None else {}
    for name in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "DNNL_PRIMITIVE_CACHE_CAPACITY"):
        if env.get(name, "").isdigit():
            return int(env[name])
    return DEFAULT_CACHE_CAPACITY


def adapter_problems(linears: list[tuple[int, int]], rank: int) -> int:
    """Distinct matmul problems the LoRA adapters of `linears` ((in, out) each) make per batch shape: A's forward
    [M, in] x [in, r] (weight transposed), the gradient of its input [M, r] x [r, in], of its weight [r, M] x
    [M, in]; B's likewise over (r, out). Adapters of equal shape share them (tiny's q, k, v, o: 6). Pure."""
    problems = set()
    for fan_in, fan_out in linears:
        problems |= {
            ("forward", fan_in, rank),
            ("input_grad", rank, fan_in),
            ("weight_grad", rank, fan_in),
            ("forward", rank, fan_out),
            ("input_grad", fan_out, rank),
            ("weight_grad", fan_out, rank),
        }
    return len(problems)


def batch_lengths(micro_steps: int, max_length: int) -> float:
    """Distinct padded batch lengths a rank meets in `micro_steps` batches, expected where each batch's length is
    any of 1..max_length alike: L (1 - (1 - 1/L)^n). Never above min(n, L), the worst case (every batch a new
    length); tiny (30 steps, max_length 128): 26.8, where one_adapter-int8-single met 26. Pure."""
    return max_length * (1 - (1 - 1 / max_length) ** micro_steps)


def adapter_kernels(
    cpu: CpuFeatures | None, linears: list[tuple[int, int]], rank: int, micro_steps: int, max_length: int
) -> float:
    """Bytes oneDNN keeps for the bf16 adapters' matmuls by the end of training, per rank."""
    primitives = min(adapter_problems(linears, rank) * batch_lengths(micro_steps, max_length), cache_capacity(cpu))
    return primitives * primitive_bytes(cpu)
