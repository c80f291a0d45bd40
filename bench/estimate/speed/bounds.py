"""The best PUBLISHED model-FLOPs utilisation per kind of setup, and the MFU a PREDICTED speed implies: what no
prediction may exceed (tests/unit/estimate/test_speed_bounds.py holds a grid of predictions to it).

A kind is (method, adapter, backend family, card generation). Every figure is in this project's MFU convention
(bench/judge/mfu.py: 6N + 12LHQT per token for a training step, 2N + 4LHQT more per forward without gradient, T the
run's maximum length, the card's dense datasheet peak): computed from the source's own throughput and model shape,
or the source's stated MFU where its convention is that one. A kind without a figure of its own takes the best of
the nearest kind that has one (KIND_LEVELS): a looser bound, never an invented one.
"""

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bench.estimate.speed import published
from bench.estimate.speed.devices import GENERATIONS, MAMF_TFLOPS
from bench.estimate.speed.work import hardware_ratio
from bench.judge.mfu import ModelShape, flops_per_token

if TYPE_CHECKING:
    from bench.estimate.speed.model import SpeedPrediction
    from bench.matrix.cell import Cell
    from bench.matrix.profiles import HardwareProfile, Workload

MAX_MATMUL_FRACTION = max(m / t for m, t in MAMF_TFLOPS.values() if t != 432)
"""The best NVIDIA or AMD achievable matmul fraction measured (A100 SXM, 271.2 of 312)."""

COVERED_BY = {
    "single": ("single", "data_parallel", "sharded"),
    "data_parallel": ("data_parallel", "sharded"),
    "sharded": ("sharded",),
}
"""The backend families whose figures count for a kind's: a run with less communication can reach at least what
one with more reached per GPU, so a sharded figure is evidence for a single-GPU kind too (never the reverse)."""

BACKEND_FAMILIES = {
    "single": "single",
    "device_map": "single",
    "ddp": "data_parallel",
}
"""Backend -> family; every other backend (fsdp*, zero2*, zero3*) shards: `sharded`."""


LARGE_MODEL = 20e9
"""Matmul parameters from which a model is `large`: bigger matmuls and relatively less elementwise traffic per FLOP
(work.layer_elementwise_bytes grows with the width, the FLOPs with its square) reach a higher MFU, so a small
model's figure does not bound a large model's prediction, nor the other way."""


def size_class(matmul_params: float) -> str:
    return "large" if matmul_params >= LARGE_MODEL else "small"


@dataclass(frozen=True)
class PublishedMfu:
    id: str
    url: str
    figure: str
    """The source's own numbers, as it states them."""
    stack: str
    method: str
    """`sft` (pretraining counts: the same step) or `dpo`."""
    adapter: str
    """`full`, `lora` or `qlora` (a LoRA over quantized weights)."""
    backend: str
    """`single`, `data_parallel` or `sharded`."""
    generation: str
    size: str
    """`small` or `large` (size_class of the model's matmul parameters)."""
    mfu: float
    """In this project's convention."""
    how: str
    hardware_ratio: float = 1.0
    """Its hardware FLOPs over its model FLOPs (work.hardware_ratio: the recompute of activation checkpointing, a
    LoRA policy's skipped weight gradients): mfu x this is the hardware utilisation it shows."""

    @property
    def hfu(self) -> float:
        return self.mfu * self.hardware_ratio

    @property
    def comparable(self) -> bool:
        """False where the hardware utilisation it implies is above the best measured achievable matmul fraction
        of any card (devices.MAMF_TFLOPS: A100 SXM, 86.9 %): no run reaches that on a whole step, so the source's
        tokens or setup are not what this convention assumes (torchtune's LoRA rows, 91 % on the RTX 4090 and
        148 % on the A6000, and its full A6000 row, 107 % with the recompute counted). Kept as data, never a
        bound."""
        return self.hfu <= MAX_MATMUL_FRACTION


def llama_shape(hidden: int, layers: int, heads: int, kv_heads: int, intermediate: int, vocab: int) -> ModelShape:
    """The MFU shape of a Llama-layout decoder from its config numbers: per layer the q, k, v, o projections and the
    three SwiGLU matrices, plus the untied LM head (bench/judge/mfu.py: input embeddings do no matmul)."""
    head_dim = hidden // heads
    per_layer = hidden * head_dim * (2 * heads + 2 * kv_heads) + 3 * hidden * intermediate
    return ModelShape(layers * per_layer + vocab * hidden, layers, heads, head_dim, vocab * hidden, hidden)


QWEN_7B = llama_shape(4096, 32, 32, 32, 11008, 151936)
"""Qwen/Qwen-7B (published.QWEN_7B)."""
LLAMA31_8B = llama_shape(4096, 32, 32, 8, 14336, 128256)
"""meta-llama/Llama-3.1-8B (published.LLAMA31_8B)."""
LLAMA2_7B = llama_shape(4096, 32, 32, 32, 11008, 32000)
"""meta-llama/Llama-2-7b-hf config.json (fms-fsdp trains a replica of it)."""
LLAMA2_13B = llama_shape(5120, 40, 40, 40, 13824, 32000)
"""meta-llama/Llama-2-13b-hf config.json."""
LLAMA2_70B = llama_shape(8192, 80, 64, 8, 28672, 32000)
"""meta-llama/Llama-2-70b-hf config.json."""
OLMO2_7B = llama_shape(4096, 32, 32, 32, 11008, 100352)
"""allenai/OLMo-2-1124-7B config.json: hidden 4096, 32 layers and heads, intermediate 11008, vocab 100352."""


def ratio(shape: ModelShape, seq_len: int, adapter: str, checkpointing: bool) -> float:
    """work.hardware_ratio of a source's training step (no forward without gradient)."""
    return hardware_ratio(shape, seq_len, adapter != "full", checkpointing, 0)


def computed(tokens_per_s_per_gpu: float, shape: ModelShape, seq_len: int, peak_tflops: float, ref: bool) -> float:
    """MFU in this project's convention from a source's throughput per GPU; `ref`: a reference forward per token
    (DPO without cached reference log-probs)."""
    flops = flops_per_token(shape, seq_len, precomputed_ref=not ref, no_grad=1 if ref else 0)
    return tokens_per_s_per_gpu * flops / (peak_tflops * 1e12)


TORCHTUNE = "https://github.com/pytorch/torchtune/blob/main/README.md"
FMS_FSDP = "https://github.com/foundation-model-stack/fms-fsdp/blob/main/README.md"
OPEN_INSTRUCT_1466 = "https://github.com/allenai/open-instruct/pull/1466"
MODULA_1 = "https://github.com/modula-systems/modula/pull/1"
LLM_FOUNDRY = "https://github.com/mosaicml/llm-foundry/blob/main/scripts/train/benchmarking/README.md"
LLM_FOUNDRY_HOW = (
    "stated by the source: mfu = (6 x n_params + 12 x n_layers x d_model x seq_len) x tokens/s / (GPUs x peak), "
    "this convention"
)
COMPUTED = "computed: tokens/s per GPU x flops/token (bench/judge/mfu.py, T = the source's length) / datasheet peak"


def _qwen() -> list[PublishedMfu]:
    rows = []
    for kind, table in (("lora", published.QWEN7B_LORA_S_PER_IT), ("qlora", published.QWEN7B_QLORA_S_PER_IT)):
        for seq, s_per_it in table.items():
            rows.append(
                PublishedMfu(
                    f"qwen7b-{kind}-a100: seq {seq}",
                    published.QWEN_README,
                    f"{'Q-LoRA' if kind == 'qlora' else 'LoRA'}, Qwen-7B, seq {seq}: {s_per_it} s/it, batch 1 x "
                    "accumulation 8, one A100-SXM4-80G",
                    "transformers Trainer + PEFT, FlashAttention 2" + (", GPTQ Int4" if kind == "qlora" else ""),
                    "sft",
                    kind,
                    "single",
                    "ampere",
                    "small",
                    computed(8 * seq / s_per_it, QWEN_7B, seq, 312, ref=False),
                    COMPUTED,
                    ratio(QWEN_7B, seq, kind, checkpointing=True),
                )
            )
    return rows


@functools.cache
def figures() -> tuple[PublishedMfu, ...]:
    """Every published figure, by kind."""
    tt = "torchtune, torch.compile, packed sequences"
    return (
        *_qwen(),
        PublishedMfu(
            "torchtune: full, 1x RTX 4090",
            TORCHTUNE,
            "Llama-3.1-8B full, 1x RTX 4090: 1650 tokens/s (batch 2, packed to 2048)",
            tt,
            "sft",
            "full",
            "single",
            "ada",
            "small",
            computed(1650, LLAMA31_8B, 2048, 165, ref=False),
            COMPUTED,
            ratio(LLAMA31_8B, 2048, "full", checkpointing=True),
        ),
        PublishedMfu(
            "torchtune: LoRA, 1x RTX 4090",
            TORCHTUNE,
            "Llama-3.1-8B LoRA, 1x RTX 4090: 3083 tokens/s",
            tt,
            "sft",
            "lora",
            "single",
            "ada",
            "small",
            computed(3083, LLAMA31_8B, 2048, 165, ref=False),
            COMPUTED,
            ratio(LLAMA31_8B, 2048, "lora", checkpointing=True),
        ),
        PublishedMfu(
            "torchtune: QLoRA, 1x RTX 4090",
            TORCHTUNE,
            "Llama-3.1-8B QLoRA, 1x RTX 4090: 2413 tokens/s",
            tt,
            "sft",
            "qlora",
            "single",
            "ada",
            "small",
            computed(2413, LLAMA31_8B, 2048, 165, ref=False),
            COMPUTED,
            ratio(LLAMA31_8B, 2048, "qlora", checkpointing=True),
        ),
        PublishedMfu(
            "torchtune: full, 1x A6000",
            TORCHTUNE,
            "Llama-3.1-8B full, 1x A6000: 2579 tokens/s",
            tt,
            "sft",
            "full",
            "single",
            "ampere",
            "small",
            computed(2579, LLAMA31_8B, 2048, 154.8, ref=False),
            COMPUTED,
            ratio(LLAMA31_8B, 2048, "full", checkpointing=True),
        ),
        PublishedMfu(
            "torchtune: LoRA, 1x A6000",
            TORCHTUNE,
            "Llama-3.1-8B LoRA, 1x A6000: 4699 tokens/s",
            tt,
            "sft",
            "lora",
            "single",
            "ampere",
            "small",
            computed(4699, LLAMA31_8B, 2048, 154.8, ref=False),
            COMPUTED,
            ratio(LLAMA31_8B, 2048, "lora", checkpointing=True),
        ),
        PublishedMfu(
            "fms-fsdp: 7b, 128x A100, HSDP",
            FMS_FSDP,
            "7b, 128 * A100, HSDP, no activation checkpointing, batch 2: 3760 token/gpu/sec (a Llama2-7B replica, "
            "4k context)",
            "PyTorch FSDP + SDPA (FlashAttention 2)",
            "sft",
            "full",
            "sharded",
            "ampere",
            "small",
            computed(3760, LLAMA2_7B, 4096, 312, ref=False),
            COMPUTED,
            ratio(LLAMA2_7B, 4096, "full", checkpointing=False),
        ),
        PublishedMfu(
            "fms-fsdp: 13b, 128x A100, HSDP",
            FMS_FSDP,
            "13b, 128 * A100, HSDP, no activation checkpointing, batch 1: 1700 token/gpu/sec",
            "PyTorch FSDP + SDPA (FlashAttention 2)",
            "sft",
            "full",
            "sharded",
            "ampere",
            "small",
            computed(1700, LLAMA2_13B, 4096, 312, ref=False),
            COMPUTED,
            ratio(LLAMA2_13B, 4096, "full", checkpointing=False),
        ),
        PublishedMfu(
            "fms-fsdp: 70b, 128x A100, FSDP",
            FMS_FSDP,
            "70b, 128 * A100, FSDP, activation checkpointing, batch 6: 380 token/gpu/sec",
            "PyTorch FSDP + SDPA (FlashAttention 2)",
            "sft",
            "full",
            "sharded",
            "ampere",
            "large",
            computed(380, LLAMA2_70B, 4096, 312, ref=False),
            COMPUTED,
            ratio(LLAMA2_70B, 4096, "full", checkpointing=True),
        ),
        PublishedMfu(
            "open-instruct #1466: DPO, OLMo2-7B, 2x8 H100",
            OPEN_INSTRUCT_1466,
            "DPO, 2 nodes x 8 H100, OLMo2-7B, 16k seq len, 16-way FSDP, packing + compile, bs=32: MFU 22.48%, "
            "5,282 TPS/GPU",
            "open-instruct (cached reference log-probs), torch.compile, packing",
            "dpo",
            "full",
            "sharded",
            "hopper",
            "small",
            computed(5282, OLMO2_7B, 16384, 989, ref=False),
            COMPUTED + "; the source's own 22.48% counts attention at the packed documents' lengths, this at 16k; "
            "its activation_memory_budget=0.1 keeps a tenth of the activations and recomputes the rest: counted as "
            "checkpointing",
            ratio(OLMO2_7B, 16384, "full", checkpointing=True),
        ),
        *(
            PublishedMfu(
                f"llm-foundry: {model}, {gpus}x {card}, seq {seq}",
                LLM_FOUNDRY,
                f"MPT-{model}, seq {seq}, {gpus} GPUs, {card}, FULL_SHARD: MFU {mfu}, HFU {hfu}",
                "MosaicML Composer + FSDP, FlashAttention",
                "sft",
                "full",
                "sharded",
                generation,
                size,
                mfu / 100,
                LLM_FOUNDRY_HOW + "; HFU/MFU as the source states them (its HFU counts the recompute)",
                hfu / mfu,
            )
            for model, seq, gpus, card, generation, size, mfu, hfu in (
                ("7b", 2048, 8, "a100_80gb", "ampere", "small", 64.23, 64.23),
                ("30b", 512, 8, "a100_80gb", "ampere", "large", 56.4, 75.2),
                ("70b", 2048, 64, "a100_80gb", "ampere", "large", 53.33, 71.1),
                ("7b", 2048, 8, "h100_80gb", "hopper", "small", 46.44, 46.44),
                ("30b", 2048, 32, "h100_80gb", "hopper", "large", 43.92, 58.57),
                ("70b", 2048, 64, "h100_80gb", "hopper", "large", 42.57, 56.76),
            )
        ),
        PublishedMfu(
            "modula #1: GPT, 1x A10",
            MODULA_1,
            "On an A10 ... tokens/gpu/sec: 14982.88  MFU: 43.46% (assuming an A10 has peak 16 bit 125 TFLOPs)",
            "nanoGPT-style PyTorch training script",
            "sft",
            "full",
            "single",
            "ampere",
            "small",
            0.4346,
            "stated by the source against the A10's 125 TFLOP/s (nanoGPT's 6N + 12LHQT: this convention)",
        ),
    )


KIND_LEVELS = (
    ("size", "method", "adapter", "backend", "generation"),
    ("size", "adapter", "backend", "generation"),
    ("size", "adapter", "generation"),
    ("size", "adapter"),
)
"""The kinds a prediction is held to, most specific first: the first that has a published figure sets the bound.
Method, backend family and generation are given up in that order; the model's size and the adapter never are."""


@dataclass(frozen=True)
class Kind:
    size: str
    method: str
    adapter: str
    backend: str
    generation: str


def kind_of(cell: "Cell", gpu_name: str, matmul_params: float) -> Kind:
    from bench.matrix.inits import init_spec
    from bench.matrix.quants import quant_spec

    adapter = "full"
    if init_spec(cell.init).adapters:
        adapter = "qlora" if quant_spec(cell.quant).quantized else "lora"
    return Kind(
        size_class(matmul_params),
        "dpo" if str(cell.method) == "dpo" else "sft",
        adapter,
        BACKEND_FAMILIES.get(str(cell.backend), "sharded"),
        GENERATIONS.get(gpu_name, "unknown"),
    )


def _matches(figure: PublishedMfu, kind: Kind, level: tuple[str, ...]) -> bool:
    for key in level:
        if key == "backend":
            if figure.backend not in COVERED_BY[kind.backend]:
                return False
        elif getattr(figure, key) != getattr(kind, key):
            return False
    return True


def bound(kind: Kind) -> tuple[float, list[PublishedMfu], tuple[str, ...]] | None:
    """The best published hardware utilisation (PublishedMfu.hfu) for `kind`: (the figure, the figures of the
    level it came from, that level); None where no comparable figure of its size and adapter was found (no bound:
    docs/estimator.md lists them). A prediction's MFU bound is this over its own hardware ratio (mfu_bound): at
    equal method, adapter and checkpointing the two ratios are equal and the bound is the published MFU itself."""
    for level in KIND_LEVELS:
        mine = [f for f in figures() if f.comparable and _matches(f, kind, level)]
        if mine:
            return max(f.hfu for f in mine), mine, level
    return None


def implied_mfu(prediction: "SpeedPrediction", cell: "Cell", profile: "HardwareProfile", workload: "Workload") -> float:
    """The MFU (bench/judge/mfu.py's convention, at the workload's max_length, the profile's peak) that a PREDICTED
    tokens/s would measure."""
    from bench.estimate.shapes import config_path
    from bench.judge.mfu import inputs_for, mfu
    from bench.matrix.recipes import resolve
    from bench.matrix.reference import reference_plan

    if prediction.tokens_per_s is None:
        raise ValueError(f"{cell.id}: no PREDICTED tokens/s")
    inputs = inputs_for(
        profile,
        workload,
        str(config_path(workload).parent),
        cell,
        prediction.world_size,
        reference_plan(cell, resolve(cell, profile.device).settings, workload).precomputed,
    )
    if inputs is None:
        raise ValueError(f"{cell.id}: no peak or no model shape for {profile.name}")
    shape = inputs.shape
    if inputs.head_params:
        shape = ModelShape(shape.matmul_params - inputs.head_params, shape.layers, shape.heads, shape.head_dim)
    flops = flops_per_token(shape, inputs.seq_len, inputs.precomputed_ref, inputs.no_grad_forwards)
    return mfu(prediction.tokens_per_s, flops, inputs.devices, inputs.peak_tflops)


def prediction_ratio(cell: "Cell", profile: "HardwareProfile", workload: "Workload") -> float:
    """work.hardware_ratio of `cell`'s step (its method's forwards without gradient, its checkpointing, adapters)."""
    from bench.estimate.speed.model import setup_for

    step = setup_for(cell, profile, workload).step
    return hardware_ratio(step.shape, step.seq_len, step.adapters, step.checkpointing, step.no_grad_forwards)


def mfu_bound(cell: "Cell", profile: "HardwareProfile", workload: "Workload") -> tuple[float, PublishedMfu] | None:
    """The most MFU `cell` may imply: the best published hardware utilisation of its kind expressed in its own
    step's MFU, and the figure it comes from; None where its kind has no published figure."""
    found = bound(kind_for(cell, profile, workload))
    if found is None:
        return None
    best, mine, _ = found
    figure = next(f for f in mine if f.hfu == best)
    return best / prediction_ratio(cell, profile, workload), figure


def kind_for(cell: "Cell", profile: "HardwareProfile", workload: "Workload") -> Kind:
    """The kind of `cell` on `profile` with `workload`'s model."""
    from bench.estimate.shapes import config_path
    from bench.judge.mfu import model_shape
    from bench.matrix.gpus import gpu_by_card

    name = profile.gpu or (gpu_by_card(profile.card).name if profile.card else "unknown")
    shape = model_shape(str(config_path(workload).parent))
    if shape is None:
        raise ValueError(f"{workload.name}: no config.json to read the model's size from")
    return kind_of(cell, name, shape.matmul_params)
