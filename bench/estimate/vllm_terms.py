"""vLLM's memory where it generates for an online method (GRPO, RLOO), per training device, in bytes, and the GPUs
a vLLM server needs besides the training ones. Pure; derivation and sources in docs/evidence/vllm.md.

TRL 1.16 runs vLLM in one of two modes (trl/trainer/grpo_config.py, `vllm_mode`): `colocate`, one vLLM engine in
each training process on its GPU, which reserves `vllm_gpu_memory_utilization` of the card ("Ratio (between 0 and
1) of GPU memory to reserve for the model weights, activations, and KV cache", trl/generation/vllm_generation.py
`gpu_memory_utilization`; vLLM then fills what its weights and profiled activations leave with KV-cache blocks);
`server`, `trl vllm-serve` on GPUs of its own, the training GPUs holding no vLLM share."""

import math
from dataclasses import dataclass

from bench.matrix.axes import Option
from bench.matrix.cell import Cell
from bench.matrix.profiles import Workload
from bench.units import GB

COLOCATE_UTILIZATION = 0.3
"""TRL's default share in colocate mode: GRPOConfig/RLOOConfig `vllm_gpu_memory_utilization` defaults to 0.3
(trl/trainer/grpo_config.py, "defaults to `0.3`")."""
SERVER_UTILIZATION = 0.9
"""`trl vllm-serve`'s default share of each server GPU (trl/scripts/vllm_serve.py, `gpu_memory_utilization`
"defaults to `0.9`", vLLM's own default)."""
DEFAULT_UTILIZATION = {"colocate": COLOCATE_UTILIZATION, "server": SERVER_UTILIZATION}


@dataclass(frozen=True)
class VllmUse:
    mode: str
    """colocate or server."""
    utilization: float


def vllm_use(cell: Cell, workload: Workload) -> VllmUse | None:
    """Who generates for `cell`: `--vllm` (the workload's `generation.vllm`) where given, else the cell's `+vllm`
    option, colocated as the worker runs it; None: transformers' generate."""
    gen = workload.generation
    mode = gen.vllm or ("colocate" if Option.VLLM in cell.options else "none")
    if mode == "none":
        return None
    return VllmUse(mode, gen.vllm_gpu_memory_utilization or DEFAULT_UTILIZATION[mode])


def default_utilization(mode: str | None) -> float | None:
    """TRL's default share for `mode` (colocate, server); None for none or a cell's own choice."""
    return DEFAULT_UTILIZATION.get(mode or "")


def engine_need(weights: float, kv_per_token: float, sequence: int) -> float:
    """The least a vLLM engine starts with: its weight copy and the KV cache of one sequence of the longest length
    (vLLM refuses to start when its KV blocks cannot hold one max_model_len sequence; TRL sets max_model_len to
    vllm_max_model_length, taken here as P + C)."""
    return weights + kv_per_token * sequence


@dataclass(frozen=True)
class VllmTerms:
    device: dict[str, float]
    """Per training device: `vllm_reserved` (colocate) or nothing (server)."""
    notes: list[str]
    server_gpus: int = 0
    """GPUs of the same card `trl vllm-serve` needs besides the training ones (server mode)."""


def vllm_terms(use: VllmUse, card_bytes: float, weights: float, kv_per_token: float, sequence: int) -> VllmTerms:
    """`card_bytes`: one card's memory; `weights`: vLLM's copy of the model in its compute dtype (it loads the
    checkpoint and TRL syncs merged weights into it, so adapters and 4/8-bit training do not shrink it)."""
    need = engine_need(weights, kv_per_token, sequence)
    share = use.utilization * card_bytes
    if use.mode == "server":
        tp = tensor_parallel(need, share)
        note = (
            f"vLLM server: {tp} more GPU(s) of this card for `trl vllm-serve --tensor_parallel_size {tp} "
            f"--gpu_memory_utilization {use.utilization:g}` (its weights and one {sequence}-token sequence's KV "
            f"cache, {need / GB:.1f} GB, within {use.utilization:g} of each); the training GPUs hold no vLLM share"
        )
        return VllmTerms({}, [note], tp)
    notes = [f"vLLM colocated: {use.utilization:g} of each card ({share / GB:.1f} GB) reserved by vLLM"]
    if need > share:
        least = math.ceil(100 * need / card_bytes) / 100
        notes.append(
            f"vLLM's weights and one {sequence}-token sequence's KV cache ({need / GB:.1f} GB) exceed its share at "
            f"--vllm-gpu-memory-utilization {use.utilization:g}, so vLLM would not start: charged at the need, "
            f"{least:g} of the card"
        )
    return VllmTerms({"vllm_reserved": max(share, need)}, notes)


def tensor_parallel(need: float, share_per_gpu: float) -> int:
    """The fewest GPUs, a power of two (vLLM splits attention heads evenly over them), whose shares hold `need`."""
    tp = 1
    while need / tp > share_per_gpu and tp < 64:
        tp *= 2
    return tp
