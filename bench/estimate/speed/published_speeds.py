"""The published throughput rows as step setups the speed model can predict: the speeds are read from
scenarios/published/ (memory.yaml: torchtune's tokens/s, Qwen-7B's LoRA s/it and Answer.AI's run times on two
RTX 3090s and two RTX 4090s; speeds.yaml: Qwen-7B's Q-LoRA s/it, both of QWEN_README); each row here states the
configuration its source gives, and what the source leaves open is an assumption named in `assumed`."""

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from bench.estimate.speed import offload, work
from bench.estimate.speed.mfu_sources import model_config
from bench.estimate.speed.model import StepSetup, gather_units, paged_state_of, param_modules
from bench.judge.mfu import ModelShape, shape_of
from bench.matrix.axes import Backend, Quant
from bench.matrix.backends import backend_spec
from bench.matrix.quants import quant_spec
from bench.paths import scenarios_dir

if TYPE_CHECKING:
    from bench.estimate.published import LoraSetup, PublishedSetup

MODELS = {"llama31": "llama-3.1-8b", "qwen7b": "qwen-7b", "llama2": "llama-2-7b"}
"""The rows' models, by their names in scenarios/published/mfu.yaml (their config.json numbers)."""
QWEN_README = "https://github.com/QwenLM/Qwen/blob/main/README.md"
QWEN_ENTRIES = {"lora": "qwen7b-lora-a100", "qlora": "qwen7b-qlora-a100"}
"""Qwen-7B on one A100-SXM4-80G, s/it by sequence length (QWEN_README, "Profiling of Memory and Speed": transformers
Trainer + PEFT, FlashAttention 2, batch 1, gradient accumulation 8, bf16, CUDA 11.8, PyTorch 2.0): the entries of
scenarios/published/ that hold each table."""
TORCHTUNE_ENTRY = "torchtune-llama31-8b-single-device"
ANSWERAI_ENTRIES = ("answerai-fsdp-qlora-ddp-mode", "answerai-fsdp-qlora-4090-sharded")
"""Llama-2-7B on two RTX 3090s or two RTX 4090s (fsdp_qlora's train.py): each card with a full copy (its sharding
`ddp`), or the weights sharded over two RTX 4090s, on the cards or offloaded to the CPU (FSDP full_shard): the
seconds to train the entry's `samples` at the context length, over `gpus` cards."""
SPEED_FILES = ("memory.yaml", "speeds.yaml")


def _entries(folder: Path | None = None) -> dict[str, dict]:
    """The published entries of SPEED_FILES by id (default: the scenario folder in use's)."""
    found = folder or scenarios_dir() / "published"
    return _entries_at(found)


@functools.cache
def _entries_at(folder: Path) -> dict[str, dict]:
    loaded = [yaml.safe_load((folder / name).read_text(encoding="utf-8")) for name in SPEED_FILES]
    return {entry["id"]: entry for entries in loaded for entry in entries}


def qwen7b_s_per_it(kind: str) -> dict[int, float]:
    """Qwen-7B's s/it by sequence length, shortest first, for `lora` or `qlora` (QWEN_ENTRIES)."""
    figures = _entries()[QWEN_ENTRIES[kind]]["figures"]
    return {int(f["seq_len"]): float(f["s_per_it"]) for f in sorted(figures, key=lambda f: f["seq_len"])}


def entry_of(row: "PublishedSpeedRow") -> str:
    """The id of the published entry a row comes from (a row's id is `<entry id>: <setup>`)."""
    return row.id.split(": ", 1)[0]


def source_key(row: "PublishedSpeedRow") -> str:
    """The publishing project of a row (its entry's source_key)."""
    return _entries()[entry_of(row)]["source_key"]


def entry_url(entry_id: str) -> str:
    """The address of a published entry's source."""
    return _entries()[entry_id]["url"]


def answerai_tokens_per_s(entry_id: str, figure: dict) -> float:
    """Tokens/s per GPU of a figure of one of ANSWERAI_ENTRIES: every dummy sample is cut to the context length
    (train.py's dummy output is twice as long), and the samples are split over the cards."""
    entry = _entries()[entry_id]
    return entry["samples"] * figure["seq_len"] / figure["time_s"] / entry["gpus"]


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
    """float32 adapters (PEFT's autocast_adapter_dtype, work.adapter_bytes); False: in the model's bf16 (torchtune's;
    PEFT before it cast them to the base weight's dtype)."""
    targets: tuple[str, ...] | None = None
    """The adapted linears' names; None: every decoder linear."""
    world: int = 1
    """Cards (the figure is per card), talking over PCIe: each source says its cards have no NVLink."""
    backend: Backend = Backend.SINGLE
    """How the cards share the work: DDP (a full copy each), FSDP or FSDP with the parameters on the CPU."""
    fused_norm_rope: bool = True
    """RMSNorm and RoPE in fused kernels (work.layer_elementwise_bytes); False: transformers' eager ops."""
    optimizer: str = "adamw_torch_fused"
    """The optimizer as transformers names it (work.optimizer_pass_bytes)."""
    param_bytes: int = 4
    """A trained parameter's and its gradient's bytes: 2 in pure bf16 training (torchtune's), 4 with fp32 ones."""
    memory_setup: "PublishedSetup | None" = field(default=None, compare=False)
    """The row's memory setup (scenarios/published/setups.yaml) where a paged optimizer's state may not fit the card:
    setup_of predicts its memory for its offload.PagedState."""


QWEN_ASSUMED = (
    "8 full-length sequences per iteration (batch 1 x grad_accum 8); LoRA on every decoder linear, dropout "
    "0.05 (finetune.py)"
)
QWEN_QLORA_ASSUMED = "; Q-LoRA loads the GPTQ Int4 checkpoint: modelled as 4-bit weights dequantized per pass"


def _torchtune(setups: "PublishedSetup") -> list[PublishedSpeedRow]:
    """torchtune's figures, each with its memory row's setup (scenarios/published/setups.yaml: the card, full or LoRA
    with its rank and adapted linears, the quantization, the optimizer): Llama-3.1-8B, batch 2 packed to 2048
    tokens, adapters in the model's bf16 (no PEFT), activation checkpointing on."""
    from bench.matrix.gpus import gpu

    rows = []
    for index, figure in enumerate(_entries()[TORCHTUNE_ENTRY]["figures"]):
        setup = setups.for_row(index)
        lora = setup.lora if setup.init == "lora" else None
        paged = str(setup.knobs.get("optimizer", "")).startswith("paged_")
        assumed = f"r={lora.r} on {', '.join(lora.targets)}" if lora is not None else "every parameter trained"
        if paged:
            assumed += "; the paged optimizer state the card has no room for migrates to the host and back each step"
        rows.append(
            PublishedSpeedRow(
                f"{TORCHTUNE_ENTRY}: {figure['setup'].split(' (')[0]}",
                gpu(setup.gpu).card,
                "llama31",
                None if lora is None else lora.r,
                setup.quant or "none",
                setup.batch_size,
                setup.seq_len,
                float(figure["tokens_per_s"]),
                f"activation checkpointing on; {assumed}",
                peft=lora is None,
                targets=None if lora is None else tuple(lora.targets),
                optimizer=setup.knobs["optimizer"],
                param_bytes=4 if setup.knobs.get("master_weights", True) else 2,
                memory_setup=setup if paged else None,
            )
        )
    return rows


def _paged_state(row: PublishedSpeedRow) -> offload.PagedState:
    """The row's paged optimizer state beside the rest of its memory prediction (bench/estimate/published.py) on its
    card."""
    from bench.estimate.published import predict_setup
    from bench.matrix.gpus import gpu

    setup = row.memory_setup
    if setup is None:
        return offload.NO_PAGED_STATE
    return paged_state_of(predict_setup(setup, setup.seq_len, gpu(setup.gpu).memory_gb))


def _qwen(kind: str, seq: int, s_per_it: float) -> PublishedSpeedRow:
    return PublishedSpeedRow(
        f"{QWEN_ENTRIES[kind]}: seq {seq}", "NVIDIA A100-SXM4-80GB", "qwen7b", 64, "nf4" if kind == "qlora" else "none",
        8, seq, 8 * seq / s_per_it, QWEN_ASSUMED + (QWEN_QLORA_ASSUMED if kind == "qlora" else ""),
        micro_steps=8, dropout=True,
    )  # fmt: skip


ANSWERAI_ASSUMED = (
    "1,024 samples per run (the template command's --dataset_samples); train.py's defaults: pure bf16 with bf16 "
    "adapters (PEFT of the time), AdamW, reentrant checkpointing, transformers' eager norm and rotary; the cards' "
    "traffic over PCIe 4.0 x16, as the 4090s' is stated (the 3090s' board has slower lanes the source does not "
    "quantify; the DDP rows move only the adapters' gradients, about 1 % of a step even at a quarter of that rate); "
    "the 3090s' 280 W power limit, against the 350 W the catalog's matmul rate was measured at, is not modelled"
)


def _answerai_backend(setup: str) -> Backend:
    if "DDP" in setup:
        return Backend.DDP
    return Backend.FSDP_OFFLOAD if "CPU offload" in setup else Backend.FSDP


def _answerai(entry_id: str, figure: dict, lora: "LoraSetup") -> PublishedSpeedRow:
    setup = figure["setup"]
    card = "NVIDIA GeForce RTX 3090" if "3090" in setup else "NVIDIA GeForce RTX 4090"
    batch = int(setup.rsplit("batch ", 1)[1])
    return PublishedSpeedRow(
        f"{entry_id}: {setup}", card, "llama2", lora.r, "nf4" if "QLoRA" in setup else "none", batch,
        figure["seq_len"], answerai_tokens_per_s(entry_id, figure),
        f"LoRA r={lora.r} on {', '.join(lora.targets)}, dropout {lora.dropout}; {ANSWERAI_ASSUMED}",
        dropout=lora.dropout > 0, peft=False,
        targets=tuple(lora.targets), world=_entries()[entry_id]["gpus"], backend=_answerai_backend(setup),
        fused_norm_rope=False,
    )  # fmt: skip


def rows() -> tuple[PublishedSpeedRow, ...]:
    """torchtune's five rows, Qwen-7B's LoRA and Q-LoRA rows by sequence length, then Answer.AI's eight."""
    from bench.estimate.published import load_setups

    setups = load_setups()
    lora = setups[ANSWERAI_ENTRIES[0]].lora  # train.py's defaults, stated on the DDP entry: every entry runs them
    if lora is None:
        raise ValueError(f"{ANSWERAI_ENTRIES[0]}: setups.yaml states no LoRA")
    qwen = [_qwen(k, seq, t) for k in QWEN_ENTRIES for seq, t in qwen7b_s_per_it(k).items()]
    answerai = [_answerai(e, f, lora) for e in ANSWERAI_ENTRIES for f in _entries()[e]["figures"]]
    return (*_torchtune(setups[TORCHTUNE_ENTRY]), *qwen, *answerai)


FITTED = tuple(f"qwen7b-{kind}-a100: seq {seq}" for kind in ("lora", "qlora") for seq in (256, 1024, 4096))
"""The published rows the GPU constants are fitted on (with this project's fitted GPU run, validate.GPU_FIT_RUNS),
named before the fit: Qwen-7B LoRA and Q-LoRA on one A100 at 256, 1024 and 4096 tokens. Every other row is held
out: Qwen's LoRA and Q-LoRA rows at 512, 2048 and 8192, torchtune's five (another stack: torch.compile, packed
sequences) and Answer.AI's eight (two cards, fsdp_qlora)."""


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
def _layer_bytes(model: str, fused_norm_rope: bool) -> float:
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
        fused_norm_rope=fused_norm_rope,
    )


def _adapted(model: str, targets: tuple[str, ...] | None = None) -> list[tuple[int, int]]:
    """(in, out) features of the adapted decoder linears: those named in `targets`, or all of them."""
    import torch

    built = _model(model)
    head = built.get_output_embeddings()
    return [
        (m.in_features, m.out_features)
        for name, m in built.named_modules()
        if isinstance(m, torch.nn.Linear) and m is not head and (targets is None or name.rsplit(".", 1)[-1] in targets)
    ]


def lora_params(model: str, r: int, targets: tuple[str, ...] | None = None) -> int:
    """r x (in + out) over the adapted decoder linears (torchtune's and Qwen's adapters target most of them)."""
    return sum(r * (i + o) for i, o in _adapted(model, targets))


def _adapter_bytes(row: PublishedSpeedRow) -> float:
    if not row.lora_r:
        return 0.0
    return work.adapter_bytes(_adapted(row.model, row.targets), 2, row.dropout, row.peft)


def _trained_tensors(row: PublishedSpeedRow) -> list[tuple[int, int]]:
    """(rows, cols) of the row's trained tensors: each adapter's A and B, or every parameter of the model."""
    if row.lora_r:
        return [t for i, o in _adapted(row.model, row.targets) for t in ((row.lora_r, i), (o, row.lora_r))]
    return [(p.shape[0], p.shape[1] if p.dim() > 1 else 1) for p in _model(row.model).parameters()]


def setup_of(row: PublishedSpeedRow) -> StepSetup:
    shape, total, linear = _shapes(row.model)
    quantized = linear if row.quant == "nf4" else 0
    nf4 = quant_spec(Quant.NF4).bytes_per_weight
    trainable = lora_params(row.model, row.lora_r, row.targets) if row.lora_r else total
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
        layer_bytes=_layer_bytes(row.model, row.fused_norm_rope),
        adapter_bytes=_adapter_bytes(row),
        micro_steps=row.micro_steps,
    )
    return StepSetup(
        step=step,
        backend=backend_spec(row.backend),
        world=row.world,
        compute_bytes=2,
        quantized_params=quantized,
        quantized_linears=7 * shape.layers if quantized else 0,
        quant_bytes=nf4 if quantized else 0.0,
        policy_bytes=(total - quantized) * 2 + quantized * nf4,
        reference_gathered=True,
        param_modules=param_modules(7 * shape.layers, shape.layers),
        gather_units=gather_units(shape.layers),
        trl=False,
        optimizer=row.optimizer,
        trained_tensors=tuple(_trained_tensors(row)),
        trained_bytes=row.param_bytes,
        paged=_paged_state(row),
    )
