"""What the online methods (GRPO, RLOO: bench/matrix/methods.py `generates`) hold that no offline method does, per
device, in bytes. Pure; sources in docs/estimator.md (Generation).

Notation as in bench/estimate/terms.py, and: G completions sampled per prompt (`num_generations`), C their most
tokens (`max_completion_length`), P a prompt's tokens, g = B x s the completions one rank generates at once (s:
steps_per_generation, bench/matrix/online_rules.py), n_kv key/value heads of d_h dims, layers l."""

from dataclasses import dataclass

from pydantic import BaseModel

from bench.estimate import terms
from bench.matrix.online_rules import steps_per_generation
from bench.matrix.profiles import Workload

SAMPLING_BYTES = 4 + 4
"""Bytes per vocabulary entry of one decoding step's next-token scores held at once: the model's last-position
logits, upcast to fp32 (transformers' generate: `outputs.logits[:, -1, :].to(dtype=torch.float32)`), and the
processed scores / probabilities the sampler builds from them (softmax before torch.multinomial), both fp32."""


@dataclass(frozen=True)
class Generation:
    completions: int
    """g: completions one rank generates in one call to generate."""
    prompt_tokens: int
    """P: a prompt's tokens: the workload's `generation.prompt_length` where its data is known, else its max_length
    (TRL 1.16 truncates no prompt)."""
    completion_tokens: int
    """C."""

    @property
    def sequence(self) -> int:
        """P + C: the longest sequence a training row holds."""
        return self.prompt_tokens + self.completion_tokens


def generation_of(
    workload: Workload, world: int, batch: int | None = None, max_length: int | None = None
) -> Generation:
    """What one rank generates at once, under the workload's settings or the knobs' batch and length."""
    per_device = batch or workload.train.per_device_train_batch_size
    gen = workload.generation
    steps = steps_per_generation(
        per_device, world, gen.num_generations, workload.train.gradient_accumulation_steps or 1
    )
    prompt = max_length or gen.prompt_length or workload.train.max_length
    return Generation(per_device * steps, prompt, gen.max_completion_length)


def kv_cache(completions: int, tokens: int, layers: int, kv_heads: int, head_dim: int, compute_bytes: int) -> float:
    """transformers' DynamicCache after the last decoding step: a key and a value of n_kv x d_h per token and layer,
    g x (P + C) tokens: l x 2 x n_kv x d_h x b x g x (P + C)."""
    return layers * 2 * kv_heads * head_dim * compute_bytes * completions * tokens


def sampling_scores(completions: int, vocab: int) -> float:
    """One decoding step's next-token scores: g x V x SAMPLING_BYTES (prefill keeps the last position's logits
    only: generate passes logits_to_keep=1)."""
    return completions * vocab * SAMPLING_BYTES


def generation_phase(gen: Generation, layers: int, kv_heads: int, head_dim: int, vocab: int, b: int) -> dict:
    """The generation phase at its largest, the last decoding step: the step's gradients were freed (the Trainer's
    zero_grad sets them to None) and nothing is saved for a backward."""
    return {
        "kv_cache": kv_cache(gen.completions, gen.sequence, layers, kv_heads, head_dim, b),
        "sampling_scores": sampling_scores(gen.completions, vocab),
    }


def scoring_forward(per_layer: float, tokens: int, vocab: int, b: int) -> float:
    """The reference's forward over one training batch of completions (and the old policy's where TRL computes it),
    without gradient: TRL runs them in chunks of per_device_train_batch_size (`_get_per_token_logps_and_entropies`,
    batch_size=...), each one layer's working set and one fused-head tile at a time."""
    return terms.no_grad_forward(per_layer, tokens, vocab, b)


class GenerationHeader(BaseModel):
    """The generation settings an online answer was predicted under (advise's header)."""

    num_generations: int
    prompt_length: int
    completion_length: int
    vllm: str | None
    """none, colocate, server; None: each cell's own (its `+vllm` option, colocated)."""
    vllm_gpu_memory_utilization: float | None
    """The share given, else TRL's default for the mode (bench/estimate/vllm_terms.py); None without vLLM."""


def generation_header(workload: Workload) -> GenerationHeader:
    from bench.estimate.vllm_terms import default_utilization

    gen = workload.generation
    share = gen.vllm_gpu_memory_utilization or default_utilization(gen.vllm)
    return GenerationHeader(
        num_generations=gen.num_generations,
        prompt_length=gen.prompt_length or workload.train.max_length,
        completion_length=gen.max_completion_length,
        vllm=gen.vllm,
        vllm_gpu_memory_utilization=share,
    )
