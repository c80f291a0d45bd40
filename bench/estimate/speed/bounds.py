"""The best PUBLISHED model-FLOPs utilisation per kind of setup, and the MFU a PREDICTED speed implies: what no
prediction may exceed (tests/unit/estimate/test_speed_bounds.py holds a grid of predictions to it).

A kind is (method, adapter, backend family, card generation). The figures are data (scenarios/published/mfu.yaml);
every one is turned into this project's MFU convention
(bench/judge/mfu.py: 6N + 12LHQT per token for a training step, 2N + 4LHQT more per forward without gradient, T the
run's maximum length, the card's dense datasheet peak): computed from the source's own throughput and model shape,
or the source's stated MFU where its convention is that one. A kind without a figure of its own takes the best of
the nearest kind that has one (KIND_LEVELS): a looser bound, never an invented one.
"""

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bench.estimate.speed import published_speeds
from bench.estimate.speed.devices import generation_of, matmul_fraction
from bench.estimate.speed.mfu_sources import FigureRow, LlamaLayout, mfu_file
from bench.estimate.speed.work import hardware_ratio, step_hardware_ratio
from bench.judge.mfu import ModelShape, flops_per_token

if TYPE_CHECKING:
    from bench.estimate.speed.model import SpeedPrediction
    from bench.matrix.cell import Cell
    from bench.matrix.plan import Plan

COVERED_BY = {
    "single": ("single", "data_parallel", "sharded"),
    "data_parallel": ("data_parallel", "sharded"),
    "sharded": ("sharded",),
}
"""The backend families whose figures count for a kind's: a run with less communication can reach at least what
one with more reached per GPU, so a sharded figure is evidence for a single-GPU kind too (never the reverse)."""


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
    gpu: str
    """The catalog entry of the card it ran on (scenarios/gpus.yaml)."""
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
    def generation(self) -> str:
        return generation_of(self.gpu)

    @property
    def comparable(self) -> bool:
        """False where the hardware utilisation it implies is above its own card's achievable matmul fraction
        (devices.matmul_fraction): no run reaches that on a whole step, so the source's tokens or setup are not what
        this convention assumes (torchtune's A6000 rows, 148 % for LoRA and 107 % for full with the recompute
        counted, against the 64.5 % that unmeasured card is granted). Kept as data, never a bound."""
        return self.hfu <= matmul_fraction(self.gpu)[0]


def llama_shape(config: LlamaLayout) -> ModelShape:
    """The MFU shape of a Llama-layout decoder from its config numbers: per layer the q, k, v, o projections and the
    three SwiGLU matrices, plus the untied LM head (bench/judge/mfu.py: input embeddings do no matmul)."""
    hidden, heads, kv_heads = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
    head_dim = hidden // heads
    per_layer = hidden * head_dim * (2 * heads + 2 * kv_heads) + 3 * hidden * config.intermediate_size
    layers, head = config.num_hidden_layers, config.vocab_size * hidden
    return ModelShape(layers * per_layer + head, layers, heads, head_dim, head, hidden)


def ratio(shape: ModelShape, seq_len: int, adapter: str, checkpointing: bool) -> float:
    """work.hardware_ratio of a source's training step (no forward without gradient)."""
    return hardware_ratio(shape, seq_len, adapter != "full", checkpointing, 0)


def computed(tokens_per_s_per_gpu: float, shape: ModelShape, seq_len: int, peak_tflops: float, ref: bool) -> float:
    """MFU in this project's convention from a source's throughput per GPU; `ref`: a reference forward per token
    (DPO without cached reference log-probs)."""
    flops = flops_per_token(shape, seq_len, precomputed_ref=not ref, no_grad=1 if ref else 0)
    return tokens_per_s_per_gpu * flops / (peak_tflops * 1e12)


COMPUTED = "computed: tokens/s per GPU x flops/token (bench/judge/mfu.py, T = the source's length) / datasheet peak"


def from_row(row: FigureRow) -> PublishedMfu:
    """A figure of scenarios/published/mfu.yaml in this project's convention."""
    kind = row.kind
    head = (row.id, row.url, row.figure, row.stack, kind.method, kind.adapter, kind.backend, kind.gpu, kind.size)
    if row.stated is not None:
        stated = row.stated
        hfu_ratio = stated.hfu_percent / stated.mfu_percent if stated.hfu_percent is not None else 1.0
        return PublishedMfu(*head, stated.mfu_percent / 100, row.note or "stated by the source", hfu_ratio)
    run = row.throughput
    assert run is not None  # mfu_sources.mfu_file: one of the two
    shape = llama_shape(mfu_file().models[run.model])
    how = COMPUTED + (f"; {row.note}" if row.note else "")
    mfu = computed(run.tokens_per_s_per_gpu, shape, run.seq_len, run.peak_tflops, ref=False)
    return PublishedMfu(*head, mfu, how, ratio(shape, run.seq_len, kind.adapter, run.checkpointing))


def _qwen() -> list[PublishedMfu]:
    """Qwen-7B's LoRA and Q-LoRA rows on one A100, every length of its s/it table."""
    shape = llama_shape(mfu_file().models["qwen-7b"])
    rows = []
    for kind, table in (
        ("lora", published_speeds.qwen7b_s_per_it("lora")),
        ("qlora", published_speeds.qwen7b_s_per_it("qlora")),
    ):
        for seq, s_per_it in table.items():
            rows.append(
                PublishedMfu(
                    f"qwen7b-{kind}-a100: seq {seq}",
                    published_speeds.QWEN_README,
                    f"{'Q-LoRA' if kind == 'qlora' else 'LoRA'}, Qwen-7B, seq {seq}: {s_per_it} s/it, batch 1 x "
                    "accumulation 8, one A100-SXM4-80G",
                    "transformers Trainer + PEFT, FlashAttention 2" + (", GPTQ Int4" if kind == "qlora" else ""),
                    "sft",
                    kind,
                    "single",
                    "A100-80G",
                    "small",
                    computed(8 * seq / s_per_it, shape, seq, 312, ref=False),
                    COMPUTED,
                    ratio(shape, seq, kind, checkpointing=True),
                )
            )
    return rows


def _answerai() -> list[PublishedMfu]:
    """Answer.AI's Llama-2-7B LoRA and QLoRA rows on two RTX 3090s and two RTX 4090s."""
    from bench.matrix.backends import backend_spec
    from bench.matrix.gpus import gpu_by_card

    shape = llama_shape(mfu_file().models["llama-2-7b"])
    rows = []
    for row in published_speeds.rows():
        entry = published_speeds.entry_of(row)
        if entry not in published_speeds.ANSWERAI_ENTRIES:
            continue
        card = gpu_by_card(row.card)
        adapter = "qlora" if row.quant == "nf4" else "lora"
        rows.append(
            PublishedMfu(
                row.id,
                published_speeds.entry_url(entry),
                f"{row.id.removeprefix(entry + ': ')}, Llama-2-7B, context {row.seq_len}: "
                f"{row.measured_tokens_per_s:.0f} tokens/s per card (1,024 samples over the stated seconds)",
                "fsdp_qlora train.py (FSDP, sharded or in its ddp mode), transformers + PEFT, bitsandbytes for QLoRA",
                "sft",
                adapter,
                backend_spec(row.backend).family,
                card.name,
                size_class(shape.matmul_params),
                computed(row.measured_tokens_per_s, shape, row.seq_len, card.bf16_tflops, ref=False),
                COMPUTED,
                ratio(shape, row.seq_len, adapter, checkpointing=True),
            )
        )
    return rows


@functools.cache
def figures() -> tuple[PublishedMfu, ...]:
    """Every published figure, by kind."""
    return (*_qwen(), *_answerai(), *(from_row(row) for row in mfu_file().figures))


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
    from bench.matrix.backends import backend_spec
    from bench.matrix.inits import init_spec
    from bench.matrix.methods import method_spec
    from bench.matrix.quants import quant_spec

    adapter = "full"
    if init_spec(cell.init).adapters:
        adapter = "qlora" if quant_spec(cell.quant).quantized else "lora"
    return Kind(
        size_class(matmul_params),
        method_spec(cell.method).mfu_kind,
        adapter,
        backend_spec(cell.backend).family,
        generation_of(gpu_name),
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
    docs/estimator.md lists them). mfu_bound turns it into the prediction's own MFU."""
    for level in KIND_LEVELS:
        mine = [f for f in figures() if f.comparable and _matches(f, kind, level)]
        if mine:
            return max(f.hfu for f in mine), mine, level
    return None


def implied_mfu(prediction: "SpeedPrediction", plan: "Plan") -> float:
    """The MFU (bench/judge/mfu.py's convention, at the workload's max_length, the profile's peak) that a PREDICTED
    tokens/s would measure."""
    from bench.estimate.shapes import config_path
    from bench.judge.mfu import inputs_for, mfu

    if prediction.tokens_per_s is None:
        raise ValueError(f"{plan.cell.id}: no PREDICTED tokens/s")
    inputs = inputs_for(plan, str(config_path(plan.workload).parent))
    if inputs is None:
        raise ValueError(f"{plan.cell.id}: no peak or no model shape for {plan.profile.name}")
    shape = inputs.shape
    if inputs.head_params:
        shape = ModelShape(shape.matmul_params - inputs.head_params, shape.layers, shape.heads, shape.head_dim)
    flops = flops_per_token(shape, inputs.seq_len, inputs.precomputed_ref, inputs.no_grad_forwards)
    return mfu(prediction.tokens_per_s, flops, inputs.devices, inputs.peak_tflops)


def prediction_ratio(plan: "Plan") -> float:
    """work.step_hardware_ratio of the planned cell's step, counted as the speed model counts it (its forwards
    without gradient, checkpointing, adapters, TRL's head): the hardware FLOPs its PREDICTED time runs."""
    from bench.estimate.speed.model import setup_for

    return step_hardware_ratio(setup_for(plan).step)


def mfu_bound(plan: "Plan") -> tuple[float, PublishedMfu] | None:
    """The most MFU the planned cell may imply, and the figure it comes from; None where its kind has no published
    figure: the best published hardware utilisation of its kind over the plan's own hardware ratio (at equal method,
    adapter and checkpointing that is the published MFU itself)."""
    found = bound(kind_for(plan))
    if found is None:
        return None
    best, mine, _ = found
    figure = next(f for f in mine if f.hfu == best)
    return best / prediction_ratio(plan), figure


def kind_for(plan: "Plan") -> Kind:
    """The kind of the planned cell, on its profile's GPU with its workload's model."""
    from bench.estimate.shapes import config_path
    from bench.judge.mfu import model_shape

    name = plan.gpu.name if plan.gpu is not None else "unknown"
    shape = model_shape(str(config_path(plan.workload).parent))
    if shape is None:
        raise ValueError(f"{plan.workload.name}: no config.json to read the model's size from")
    return kind_of(plan.cell, name, shape.matmul_params)


BOUND_TERM = "published_bound"
"""The term that slows a prediction to the best published MFU of its kind (held_to_bound)."""


def held_to_bound(prediction: "SpeedPrediction", plan: "Plan") -> "SpeedPrediction":
    """The prediction with neither its tokens/s nor its range's fast end implying more than mfu_bound: a step the
    model times faster than any published run of its kind reached is slowed to that run's utilisation, the seconds
    added shown as the BOUND_TERM. As it was off CUDA (every figure is an NVIDIA card's), without a peak, or for a
    kind without a published figure."""
    if prediction.tokens_per_s is None or plan.device != "cuda" or not plan.profile.peak_tflops:
        return prediction
    try:
        limit = mfu_bound(plan)
        if limit is None:
            return prediction
        implied = implied_mfu(prediction, plan)
    except ValueError:  # no model shape to count the FLOPs of
        return prediction
    if implied * prediction.s_per_step / prediction.s_per_step_low <= limit[0]:
        return prediction
    at_bound = prediction.s_per_step * implied / limit[0]
    seconds, low, high = (
        max(s, at_bound) for s in (prediction.s_per_step, prediction.s_per_step_low, prediction.s_per_step_high)
    )
    tokens = prediction.tokens_per_step
    terms = prediction.terms | (
        {BOUND_TERM: seconds - prediction.s_per_step} if seconds > prediction.s_per_step else {}
    )
    return prediction.model_copy(
        update={
            "s_per_step": seconds,
            "s_per_step_low": low,
            "s_per_step_high": high,
            "tokens_per_s": tokens / seconds,
            "tokens_per_s_low": tokens / high,
            "tokens_per_s_high": tokens / low,
            "terms": terms,
        }
    )
