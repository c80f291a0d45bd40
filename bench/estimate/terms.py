"""Each memory term as a pure function of counts and dtype sizes, in bytes, for one device. Formulas in docstrings.

Notation: P parameters, T trainable parameters, N ranks sharing a sharded state, b bytes per element of the compute
dtype (4 fp32, 2 bf16/fp16), B examples per step and rank, L = max_length, R = rows the policy sees per step (2B:
chosen + rejected for the paired methods; B for SFT and KTO), t = R*L tokens per step and rank, V vocabulary.
"""

from bench.units import MiB

NF4_BLOCK = 64
"""bitsandbytes 4-bit block size; one fp32 absmax per block (transformers' default: no double quantisation)."""
DDP_BUCKET_CAP = 25 * MiB
ZERO_REDUCE_BUCKET = 500_000_000
"""DeepSpeed defaults (elements) for a config that does not set them (bench/run/launch.py sets none)."""
ZERO3_PREFETCH_BUCKET = 50_000_000
TOKEN_TILE = 4096
VOCAB_TILE = 32768
"""TRL 1.16 fused LM head (trl/kernels/chunked_logprob.py): the [N, V] logits are never materialised; one
[min(N, 4096), min(V, 32768)] tile at a time."""


def nf4_bytes(params: int) -> float:
    """nf4 storage: 4 bits per weight + one fp32 absmax per 64-weight block = params * (0.5 + 4/64) bytes."""
    return params * (0.5 + 4 / NF4_BLOCK)


def int8_bytes(params: int, rows: int) -> float:
    """LLM.int8 storage: 1 byte per weight + one fp32 scale per output row = params + 4 * rows bytes."""
    return params + 4 * rows


def weight_bytes(
    linear: int, rows: int, other: int, quant: str, compute_bytes: int, unquantized_bytes: int | None = None
) -> float:
    """Stored weights: decoder nn.Linear weights by `quant` (none: linear * b), everything else (embeddings, LM head,
    norms, biases, fused experts) at `unquantized_bytes` (default b): quantized storage + other * b."""
    keep = compute_bytes if unquantized_bytes is None else unquantized_bytes
    if quant == "nf4":
        stored = nf4_bytes(linear)
    elif quant == "int8":
        stored = int8_bytes(linear, rows)
    else:
        stored = linear * compute_bytes
    return stored + other * keep


def placed(total: float, placement: str, ranks: int, devices: int) -> float:
    """Per-device share: replicated -> total; sharded -> total / N ranks; split -> total / devices; cpu_offloaded
    -> 0 (it is in host memory: `offloaded`)."""
    if placement == "sharded":
        return total / ranks
    if placement == "split":
        return total / devices
    if placement == "cpu_offloaded":
        return 0.0
    return total


def offloaded(total: float, placement: str, ranks: int) -> float:
    """Per-rank share in host memory: cpu_offloaded -> total / N ranks (sharded, then moved to the host); else 0."""
    return total / ranks if placement == "cpu_offloaded" else 0.0


def adam_bytes(trainable: int, state_bytes: int) -> float:
    """torch AdamW (transformers' default optimizer): exp_avg + exp_avg_sq, each zeros_like(param): 2 * T * s."""
    return 2 * trainable * state_bytes


def zero2_resident_states(trainable: int, ranks: int) -> float:
    """What ZeRO-1/2 keeps between steps per device beyond the parameters: fp32 master partition 4 (a clone also
    when the model is fp32) + Adam 8, i.e. 12 * T / N."""
    return 12 * trainable / ranks


def zero2_gradient_partitions(trainable: int, trainable_bytes: int, ranks: int) -> float:
    """ZeRO-2's gradient partitions, alive only from the end of backward through the optimizer step: the reduced
    partition in the gradient dtype g + its fp32 copy (4, when g != 4): (g + 4*[g != 4]) * T / N. DeepSpeed frees
    both after the step (stage_1_and_2.py: `single_partition_of_fp32_groups[i].grad = None`, `_release_ipg_buffers`)."""
    return (trainable_bytes + (4 if trainable_bytes != 4 else 0)) * trainable / ranks


def zero2_model_states(
    params_bytes: float, trainable: int, trainable_bytes: int, ranks: int, offload: bool = False
) -> float:
    """ZeRO-1/2 model states per device, everything alive at once: parameters replicated + resident states +
    gradient partitions = params + (g + 4*[g != 4] + 4 + 8) * T / N; with the optimizer offloaded only the
    parameters stay (the rest is `zero_offloaded_host`). With every parameter trainable in bf16 this is DeepSpeed's
    own 2P + 18P/N (offload: 2P; estimate_zero2_model_states_mem_needs). A DPO step never holds all of it at its
    peak (bench/estimate/predict.py); this sum is what the agreement test holds against DeepSpeed."""
    if offload:
        return params_bytes
    return (
        params_bytes
        + zero2_resident_states(trainable, ranks)
        + zero2_gradient_partitions(trainable, trainable_bytes, ranks)
    )


def zero3_model_states(
    params_bytes: float,
    trainable: int,
    ranks: int,
    largest_layer: int,
    param_bytes: int,
    offload: bool = False,
    offload_params: bool = False,
) -> float:
    """ZeRO-3 model states per device: parameter partition P*b/N unless the parameters are offloaded + the gathered
    largest layer (params + grads, 2 * b * LL) + (fp32 grads 4 + master 4 + Adam 8) * T / N on the device unless the
    optimizer is offloaded. With every parameter trainable in bf16: DeepSpeed's 4*LL + 18P/N (optimizer offload:
    4*LL + 2P/N; parameters too: 4*LL)."""
    states = 0.0 if offload else 16 * trainable / ranks
    partition = 0.0 if offload_params else params_bytes / ranks
    return partition + 2 * param_bytes * largest_layer + states


def zero_offloaded_host(trainable: int, ranks: int) -> float:
    """What ZeRO-Offload moves to host memory per rank: (fp32 grads 4 + master 4 + Adam 8) * T / N. With every
    parameter trainable this is DeepSpeed's 16P per node (estimate_zero2/3_model_states_mem_needs, zero.Init, without
    their 1.5 buffer factor); offload_param adds the parameter partitions P*b/N (DeepSpeed: 18P per node in bf16)."""
    return 16 * trainable / ranks


def ddp_buckets(trainable: int, grad_bytes: int) -> float:
    """DDP's Reducer allocates flat buckets (each <= 25 MiB) covering every trainable gradient, kept for the run:
    T * g (gradient_as_bucket_view is off in the HF Trainer)."""
    return trainable * grad_bytes


def zero_buckets(trainable: int, grad_bytes: int, stage: int, touched_only: bool) -> float:
    """DeepSpeed's contiguous reduce bucket (reduce_bucket_size, 5e8 elements by default) in the gradient dtype,
    allocated at the first backward when anything is trainable; stage 3 adds the prefetch bucket (5e7). On the CPU only
    the pages gradients are copied into are charged: min(bucket, T) * g."""
    if trainable == 0:
        return 0.0
    bucket = min(ZERO_REDUCE_BUCKET, trainable) if touched_only else ZERO_REDUCE_BUCKET
    prefetch = 0 if stage < 3 or touched_only else ZERO3_PREFETCH_BUCKET
    return (bucket + prefetch) * grad_bytes


def fsdp_gather(largest_block: int, compute_bytes: int) -> float:
    """FSDP2 all-gathers one wrap unit (a decoder layer) at a time and prefetches the next: 2 * block * b."""
    return 2 * largest_block * compute_bytes


def logits_tile(tokens: int, vocab: int, compute_bytes: int) -> int:
    """One tile of TRL 1.16's fused LM head: min(t, 4096) * min(V, 32768) * b. Full-vocabulary logits (2B x L x V)
    are never materialised."""
    return min(tokens, TOKEN_TILE) * min(vocab, VOCAB_TILE) * compute_bytes


def head_backward(
    tokens: int, hidden: int, vocab: int, compute_bytes: int, tiles: float, head_trainable: bool
) -> float:
    """The LM head's backward (the peak of a DPO step): `tiles` logits tiles live (1 with the Triton kernel on GPU;
    the torch fallback on CPU keeps more temporaries) + the fp32 hidden-gradient accumulator t*H*4 + the fp32
    weight-gradient accumulator V*H*4 when the head is trained."""
    tile = logits_tile(tokens, vocab, compute_bytes)
    return tiles * tile + tokens * hidden * 4 + (vocab * hidden * 4 if head_trainable else 0)


def full_logits(rows: int, seq: int, vocab: int, compute_bytes: int, kept: float) -> float:
    """Where the loss reads the model's full logits (the experimental ORPO and CPO/SimPO trainers call the model
    without TRL's fused head): `kept` logits-sized [R, L, V] tensors of b bytes are alive in the backward. Pure."""
    return kept * rows * seq * vocab * compute_bytes


def scalar_head(rows: int, seq: int, compute_bytes: int) -> float:
    """A one-output sequence-classification head scores every position before the last one is pooled: R * L * b."""
    return rows * seq * compute_bytes


def no_grad_forward(per_layer: float, tokens: int, vocab: int, compute_bytes: int) -> float:
    """A forward pass without gradient (KTO's KL batch) keeps nothing for a backward: its peak is one layer's
    working set and one logits tile of the fused head."""
    return per_layer + logits_tile(tokens, vocab, compute_bytes)


def layer_activations(
    tokens: int,
    rows: int,
    seq: int,
    hidden: int,
    kv_dim: int,
    intermediate: int,
    heads: int,
    act_bytes: int,
    materialised_scores: bool,
) -> float:
    """One decoder layer's saved activations for backward: t * b * (5H + 2*kv + 3I) (norm inputs, QKV, attention
    output, MLP input, gate/up/act; I summed over routed experts), + rows * heads * L^2 * 2b for attention scores and
    probabilities where attention materialises them (eager / sdpa-math on CPU; flash / memory-efficient on GPU: 0)."""
    dense = tokens * act_bytes * (5 * hidden + 2 * kv_dim + 3 * intermediate)
    scores = rows * heads * seq * seq * 2 * act_bytes if materialised_scores else 0
    return dense + scores


def activations(layers: int, per_layer: float, tokens: int, hidden: int, act_bytes: int, checkpointing: bool) -> float:
    """With gradient checkpointing: every layer's input t*H*b kept + one layer recomputed in full; without it: all
    layers' activations."""
    if checkpointing:
        return layers * tokens * hidden * act_bytes + per_layer
    return layers * per_layer


DEEPSPEED_CPU_SHM_BYTES = 2 * MiB + 2 * 32 * MiB
"""DeepSpeed's CPU shared-memory allreduce buffer, one per rank (deepspeed/ops/csrc/cpu/comm/shm.cpp:
2 x NAIVE_ALLREDUCE_THRESHOLD (1 MiB) + 2 x MAX_BUF_SIZE (32 MiB)). shm_interface.cpp creates it only when every rank
is local by the launcher's LOCAL_SIZE, which only the `deepspeed` launcher sets: the same ZeRO cell launched by
accelerate or mpirun does without it (measured: 67-69 MiB less on the largest rank, results/cpu-budget-4g)."""


def deepspeed_cpu_shm(device: str, launcher: str, world: int) -> float:
    return float(DEEPSPEED_CPU_SHM_BYTES) if device == "cpu" and launcher == "deepspeed" and world > 1 else 0.0
