"""Model FLOPs utilisation of a cell (after PaLM appendix B); the convention is stored in every result as
Metrics.mfu_convention. Reading a model's shape instantiates it on the meta device; the arithmetic is pure.

N: parameters that do a matmul per token (not the input lookup tables; the LM head counts, tied or not; of a
mixture of experts only the routed ones; the reward model's one-output head instead of the LM head). Per token:
6N + 12LHQT for forward and backward, plus 2N + 4LHQT per forward without gradient (each method's count:
bench/matrix/methods.py), with T = max_length (an upper bound). The same formula for every init mode, so cells
compare (LoRA's real work is lower); recomputation is not counted. MFU = tokens/s x FLOPs per token / (devices x
peak), devices being the world size or, for a backend that splits one process's layers, the profile's devices."""

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.assets.config_cache import cached
from bench.matrix.methods import method_spec
from bench.matrix.plan import Plan
from bench.results.schema import Metrics

CONVENTION = (
    "flops/token = 6N+12LHQT (policy fwd+bwd) + 2N+4LHQT per forward without gradient (DPO: the reference's, 8N+16LHQT "
    "in all; KTO: reference + KL batch, 12N+24LHQT; none with precomputed reference log-probs, nor for SFT, ORPO, "
    "SimPO, reward); N = matmul params excl. input/position embeddings, LM head included (reward: its scalar head "
    "instead), MoE active experts only; T = max_length; no recompute; mfu = tokens/s*flops/token/(devices*peak)"
)


@dataclass(frozen=True)
class ModelShape:
    matmul_params: int
    layers: int
    heads: int
    head_dim: int
    lm_head_params: int = 0
    hidden: int = 0


@dataclass(frozen=True)
class MfuInputs:
    shape: ModelShape
    peak_tflops: float
    seq_len: int
    devices: int
    precomputed_ref: bool
    no_grad_forwards: int = 1
    """Forward passes without gradient per step: DPO's reference (the default), KTO's three, none for the
    reference-free methods."""
    head_params: int = 0
    """Matmul parameters to take out of N: the LM head of a reward model, which has a scalar head instead."""


def no_grad_forwards(method: str, precomputed_ref: bool) -> int:
    return method_spec(method).no_grad_forwards(precomputed_ref)


def flops_per_token(shape: ModelShape, seq_len: int, precomputed_ref: bool, no_grad: int | None = None) -> float:
    """`no_grad`: forwards without gradient (default: DPO's, the reference's unless precomputed)."""
    n = shape.matmul_params
    attention = shape.layers * shape.heads * shape.head_dim * seq_len
    forwards = no_grad if no_grad is not None else (0 if precomputed_ref else 1)
    return 6.0 * n + 12.0 * attention + forwards * (2.0 * n + 4.0 * attention)


def mfu(tokens_per_s: float, flops: float, devices: int, peak_tflops: float) -> float:
    if devices < 1 or peak_tflops <= 0:
        raise ValueError(f"devices ({devices}) must be >= 1 and peak_tflops ({peak_tflops}) > 0")
    return tokens_per_s * flops / (devices * peak_tflops * 1e12)


def with_mfu(metrics: Metrics, inputs: MfuInputs | None) -> Metrics:
    if inputs is None:
        return metrics
    shape = inputs.shape
    if inputs.head_params:
        shape = ModelShape(shape.matmul_params - inputs.head_params, shape.layers, shape.heads, shape.head_dim)
    flops = flops_per_token(shape, inputs.seq_len, inputs.precomputed_ref, inputs.no_grad_forwards)
    return metrics.model_copy(
        update={
            "mfu": mfu(metrics.tokens_per_s, flops, inputs.devices, inputs.peak_tflops),
            "flops_per_token": flops,
            "mfu_convention": CONVENTION,
            "peak_tflops": inputs.peak_tflops,
        }
    )


def shape_of(model: Any) -> ModelShape:
    """The MFU shape of a (meta-device) transformers causal LM."""
    import torch

    config = model.config
    embeddings = {id(m.weight): m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    n = sum(p.numel() for p in model.parameters()) - sum(embeddings.values())
    output = model.get_output_embeddings()
    if output is not None and id(output.weight) in embeddings:
        n += output.weight.numel()  # tied LM head: a lookup table on input, a matmul on output
    experts = getattr(config, "num_local_experts", None)
    if experts:
        expert_params = sum(p.numel() for name, p in model.named_parameters() if ".experts." in name)
        n -= expert_params - expert_params * config.num_experts_per_tok // experts
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    lm_head = output.weight.numel() if output is not None else 0
    return ModelShape(n, config.num_hidden_layers, heads, head_dim, lm_head, config.hidden_size)


@functools.cache
def model_shape(model_ref: str) -> ModelShape | None:
    """Shape of the model in a local folder holding a config.json; None for a hub id (the runner stays offline)."""
    config_file = Path(model_ref) / "config.json"
    if not config_file.is_file():
        return None
    return cached("mfu", config_file, lambda: built_on_meta(model_ref), dataclasses.asdict, lambda d: ModelShape(**d))


def built_on_meta(model_ref: str) -> ModelShape:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_ref)
    with torch.device("meta"):
        return shape_of(AutoModelForCausalLM.from_config(config))


def inputs_for(plan: Plan, model_ref: str, peak_tflops: float | None = None) -> MfuInputs | None:
    """What the MFU of the planned cell needs, or None when no peak is known or the model's config.json is not on
    this machine (a hub id: the runner does not download). Its reference's log-probs are precomputed as its DPOConfig
    asks (the option, the recipe or the workload: plan.reference). `peak_tflops`: the card that ran
    (bench/run/preflight.py Preflight.peak_tflops); default: the profile's."""
    peak = peak_tflops if peak_tflops is not None else plan.profile.peak_tflops
    if peak is None:
        return None
    shape = model_shape(model_ref)
    if shape is None:
        return None
    precomputed = plan.reference.precomputed
    return MfuInputs(
        shape,
        peak,
        plan.workload.train.max_length,
        plan.devices,
        precomputed,
        plan.no_grad_forwards,
        shape.lm_head_params - shape.hidden if plan.method.output == "scalar" else 0,
    )
