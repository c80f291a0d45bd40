"""The online methods' generation time per training step (GRPO, RLOO), PREDICTED: a prefill of the prompts, compute
bound, then one decoding step per completion token, memory bound. Pure; derivation in docs/evidence/vllm.md.

Each decoding step of a batch of g completions reads every weight once and the KV cache written so far, g x (P + i)
tokens at step i, whatever g is (the step's matmuls are g rows thin: far below the card's FLOP/byte ridge); so the
C steps read C x weights + kv x g x (C x P + C(C - 1)/2) bytes at the card's memory bandwidth (the catalog's
datasheet figure). Transformers' generate also launches every layer's kernels once per step from Python, the
calibration's fitted `layer_pass_s` per decoder layer; vLLM replays CUDA graphs (its default, `enforce_eager=False`)
and has no such term. One generation serves `steps_per_generation` training steps (TRL), so a step carries its
share."""

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.estimate.generation_terms import Generation
    from bench.estimate.vllm_terms import VllmUse
    from bench.matrix.profiles import Workload


@dataclass(frozen=True)
class Decode:
    completions: int
    """g: completions one engine generates at once."""
    prompt_tokens: int
    """P."""
    completion_tokens: int
    """C."""
    weight_bytes: float
    """What one decoding step reads of the weights (as stored, plus a quantized layer's dequantized copy)."""
    kv_bytes_per_token: float
    prefill_flops_per_token: float
    """The forward's matmul FLOPs per prompt token (2 x the matmul parameters)."""


def decode_bytes(d: Decode) -> float:
    """Bytes the C decoding steps read: C x weights + kv x g x (C x P + C (C - 1) / 2)."""
    c = d.completion_tokens
    kv_tokens = d.completions * (c * d.prompt_tokens + c * (c - 1) / 2)
    return c * d.weight_bytes + d.kv_bytes_per_token * kv_tokens


def generation_seconds(
    d: Decode, memory_bytes_s: float, matmul_flops_s: float, layer_launch_s: float = 0.0
) -> dict[str, float]:
    """Seconds of one generation by term: `decode` (memory bound), `prefill` (g x P tokens' matmuls at the
    achievable matmul rate), `decode_launches` (`layer_launch_s` per step: transformers' generate's per-layer
    launch time times the layers, 0 under vLLM)."""
    return {
        "decode": decode_bytes(d) / memory_bytes_s,
        "prefill": d.completions * d.prompt_tokens * d.prefill_flops_per_token / matmul_flops_s,
        "decode_launches": d.completion_tokens * layer_launch_s,
    }


def per_step(seconds: dict[str, float], steps_per_generation: int) -> dict[str, float]:
    """One training step's share of a generation, the terms named `generation_*`."""
    return {f"generation_{k}": v / steps_per_generation for k, v in seconds.items() if v}


@dataclass(frozen=True)
class OnlineCell:
    """What an online cell's generation depends on, read off its Plan once (model.py `setup_for`)."""

    workload: "Workload"
    world: int
    generation: "Generation"
    """What one rank generates at once (bench/estimate/generation_terms.py)."""
    vllm: "VllmUse | None"
    """Who generates: vLLM (on a CUDA profile, where the cell or `--vllm` asks for it); None: transformers'."""
    card_bytes: float
    """One card's memory (a served vLLM engine's tensor parallelism); 0 where the profile states none."""

    @property
    def training_row(self) -> float:
        """A prompt and its completion (P + C): the row the step trains on."""
        return float(self.generation.sequence)


def online_terms(
    online: OnlineCell, read: tuple[float, float, float, int], rates: tuple[float, float, float]
) -> dict[str, float]:
    """One training step's share of its generation, for an online cell: who generates (transformers'
    generate, or vLLM colocated or served: bench/estimate/vllm_terms.py), on this card's figures. `read`: (the
    policy as stored, what dequantizing its quantized layers writes and reads per forward (a batched decode step of
    bitsandbytes' layers runs the dequantize-then-matmul path), the model's matmul parameters, bytes per element of
    its compute dtype); `rates`: (memory bytes/s, achievable matmul FLOP/s, the calibration's `layer_pass_s`)."""
    policy_bytes, dequant_bytes, matmul_params, b = read
    memory_bytes_s, matmul_flops_s, layer_s = rates
    from bench.estimate import generation_terms, vllm_terms
    from bench.estimate.shapes import shapes_for
    from bench.matrix.online_rules import steps_per_generation

    workload, shapes, gen, use = online.workload, shapes_for(online.workload), online.generation, online.vllm
    kv = generation_terms.kv_cache(1, 1, shapes.layers, shapes.kv_heads, shapes.head_dim, b)
    flops = 2 * matmul_params
    if use is None:
        d = Decode(gen.completions, gen.prompt_tokens, gen.completion_tokens, policy_bytes + dequant_bytes, kv, flops)
        seconds = generation_seconds(d, memory_bytes_s, matmul_flops_s, shapes.layers * layer_s)
    else:
        weights, tp, completions = shapes.total * b, 1, gen.completions
        if use.mode == "server":  # one `trl vllm-serve` engine, tensor-parallel over tp GPUs, serves every rank
            card = online.card_bytes
            tp = vllm_terms.tensor_parallel(vllm_terms.engine_need(weights, kv, gen.sequence), use.utilization * card)
            completions *= online.world
        d = Decode(completions, gen.prompt_tokens, gen.completion_tokens, weights / tp, kv / tp, flops / tp)
        seconds = generation_seconds(d, memory_bytes_s, matmul_flops_s)
    accumulation = workload.train.gradient_accumulation_steps or 1
    steps = steps_per_generation(
        workload.train.per_device_train_batch_size, online.world, workload.generation.num_generations, accumulation
    )
    return per_step(seconds, steps)
