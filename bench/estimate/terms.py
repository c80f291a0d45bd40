"""Each memory term as a pure function of counts and dtype sizes, in bytes, for one device. Formulas in docstrings.

Notation: P parameters, T trainable parameters, N ranks sharing a sharded state, b bytes per element of the compute
dtype (4 fp32, 2 bf16/fp16), B examples per step and rank, L = max_length, R = rows the policy sees per step (2B:
chosen + rejected for the paired methods; B for SFT and KTO), t = R*L tokens per step and rank, V vocabulary.
"""

import math
from dataclasses import dataclass
from typing import Literal

from bench.matrix.axes import Quant
from bench.matrix.precision import COMPUTE_DTYPE, DTYPE_BYTES, load_dtype
from bench.matrix.quants import quant_spec
from bench.units import MiB

NF4_BLOCK = 64
"""bitsandbytes 4-bit block size; one fp32 absmax per block (transformers' default: no double quantisation)."""
ZERO_REDUCE_BUCKET = 500_000_000
"""DeepSpeed defaults (elements) for a config that does not set them (bench/run/launch.py sets none)."""
ZERO3_PREFETCH_BUCKET = 50_000_000
TOKEN_TILE = 4096
VOCAB_TILE = 32768
"""TRL 1.16 fused LM head (trl/kernels/chunked_logprob.py `TOKEN_CHUNK_SIZE`, trl/trainer/utils.py
`_CHUNKED_LOGPROB_CHUNK_SIZE`): the [N, V] logits are never materialised; the projection runs into one buffer
`torch.empty((min(N, 4096), 32768))`, whatever the vocabulary."""
CPU_BACKWARD_FP32_TILES = 7
"""Tile-sized fp32 temporaries alive at once in the torch fallback of the head's backward (`_backward_tile`, CPU):
y = tile.float() * scale, z, log_p, p, grad = zeros_like(z), is_target.float(), is_target.float() - p; with the
projection buffer and the bool is_target: 8.25 tiles in fp32, as torch.profiler's CPU memory events show (small:
8 x 62 MiB + 15.5 MiB, docs/estimator.md)."""


def nf4_bytes(params: int) -> float:
    """nf4 storage: 4 bits per weight (QuantSpec.bytes_per_weight) + one fp32 absmax per 64-weight block =
    params * (0.5 + 4/64) bytes."""
    return params * (quant_spec(Quant.NF4).bytes_per_weight + 4 / NF4_BLOCK)


def int8_bytes(params: int, rows: int) -> float:
    """LLM.int8 storage: 1 byte per weight (QuantSpec.bytes_per_weight) + one fp32 scale per output row =
    params + 4 * rows bytes."""
    return params * quant_spec(Quant.INT8).bytes_per_weight + 4 * rows


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


def stored_weight_bytes(precision: str, quantized: bool, engine_casts: bool) -> int:
    """Bytes of an unquantized weight as loaded: the dtype of bench/matrix/precision.py `load_dtype` (fp32 under
    fp16-mixed, as the GradScaler needs fp32 trained weights, but for a quantized model), or the compute dtype's where
    DeepSpeed's fp16 engine casts the module and keeps its fp32 master copy in the optimizer (`engine_casts`)."""
    dtype = COMPUTE_DTYPE[precision] if engine_casts else load_dtype(precision, quantized)
    return DTYPE_BYTES[dtype]


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


BNB_MIN_8BIT_SIZE = 4096
BNB_BLOCK = 256
BNB_PAGED_MIN = 100_000
"""bitsandbytes 0.50 optim/optimizer.py: tensors under `min_8bit_size` (4096 elements) keep 32-bit states; 8-bit
states carry one fp32 absmax per 256 elements each (`blocksize = 256`); a paged optimizer puts the states of tensors
of at least 1e5 elements in CUDA managed memory (`get_paged`: cudaMallocManaged), the rest in ordinary tensors."""


@dataclass(frozen=True)
class OptimizerState:
    resident: float
    """State on the device, in the caching allocator (what max_memory_allocated counts)."""
    paged: float
    """State in CUDA managed memory: outside torch's allocator, paged out to the host under pressure (0 on CPU,
    where bitsandbytes falls back to ordinary tensors)."""
    step_temporaries: float
    """Alive only during optimizer.step()."""


def optimizer_state(
    optimizer: str, tensors: list[tuple[int, int]], state_bytes: int, device: str = "cuda"
) -> OptimizerState:
    """The optimizer's memory for trainable tensors given as (rows, cols) (cols = 1 for a vector), states in
    `state_bytes` where the optimizer keeps them in the parameter's dtype:
    - adamw_torch: exp_avg + exp_avg_sq (zeros_like(param)) 2*s per element; its foreach step allocates one more
      copy of exp_avg_sq (`torch._foreach_sqrt`, torch/optim/adam.py `_multi_tensor_adam`);
    - adamw_torch_fused: the same states, a fused kernel without temporaries;
    - adamw_8bit / paged_adamw_8bit (bitsandbytes): 2 bytes + 2 fp32 absmax per 256 elements, 8 bytes (fp32) for
      tensors under 4096 elements; paged: tensors of >= 1e5 elements in managed memory;
    - paged_adamw_32bit: 8 bytes per element (fp32 states), paged likewise;
    - adafactor (beta1=None): a factored second moment per matrix, (rows + cols) * s, a full one for vectors; its
      step keeps two fp32 temporaries of the largest matrix."""
    elements = sum(r * c for r, c in tensors)
    if optimizer in ("adamw_torch", "adamw_torch_fused"):
        temp = elements * state_bytes if optimizer == "adamw_torch" else 0
        return OptimizerState(2 * elements * state_bytes, 0.0, temp)
    if optimizer == "adafactor":
        factored = sum((r + c if c > 1 else r) * state_bytes for r, c in tensors)
        largest = max((r * c for r, c in tensors), default=0)
        return OptimizerState(factored, 0.0, 2 * largest * 4)
    paged_optimizer = optimizer.startswith("paged_") and device == "cuda"
    resident = paged = 0.0
    for r, c in tensors:
        n = r * c
        eight_bit = optimizer.endswith("8bit") and n >= BNB_MIN_8BIT_SIZE
        size = 2 * n + 2 * 4 * -(-n // BNB_BLOCK) if eight_bit else 8 * n
        if paged_optimizer and n >= BNB_PAGED_MIN:
            paged += size
        else:
            resident += size
    return OptimizerState(resident, paged, 0.0)


def zero2_resident_states(trainable: int, ranks: int, state_bytes_per_element: float = 8) -> float:
    """What ZeRO-1/2 keeps between steps per device beyond the parameters: fp32 master partition 4 (a clone also
    when the model is fp32) + the optimizer's state over it (Adam: 8), i.e. 12 * T / N."""
    return (4 + state_bytes_per_element) * trainable / ranks


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


def zero2_offload_buffers(
    trainable: int, trainable_bytes: int, ranks: int, largest_trainable: int
) -> tuple[float, float]:
    """(host, device) bytes ZeRO-1/2 adds when it offloads the optimizer (stage_1_and_2.py, cpu_offload): on the host
    a copy of the rank's partition in the parameter dtype g (param_buffer_of_bit16_for_cpu_offload_groups, T*g/N)
    and a gradient staging buffer the size of the largest trainable tensor (temp_grad_buffer_for_cpu_offload); on
    the device its twin (temp_grad_buffer_for_gpu_offload)."""
    staging = largest_trainable * trainable_bytes
    return trainable * trainable_bytes / ranks + staging, staging


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


def head_tile(tokens: int, vocab: int) -> int:
    """Elements of one tile the head's arithmetic touches: min(t, 4096) * min(V, 32768)."""
    return min(tokens, TOKEN_TILE) * min(vocab, VOCAB_TILE)


def head_accumulators(tokens: int, hidden: int, vocab: int, head_trainable: bool) -> float:
    """The backward's fp32 gradient accumulators: hidden t*H*4, + the weight's V*H*4 when the head is trained."""
    return tokens * hidden * 4 + (vocab * hidden * 4 if head_trainable else 0)


def gpu_head_backward(tokens: int, hidden: int, vocab: int, compute_bytes: int, head_trainable: bool) -> float:
    """The LM head's backward on a GPU (the peak of a DPO step): the Triton kernel turns the projection buffer into the
    logits gradient in place, so one buffer min(t, 4096) * 32768 * b (allocated whole, even for V < 32768) + the
    accumulators."""
    return min(tokens, TOKEN_TILE) * VOCAB_TILE * compute_bytes + head_accumulators(
        tokens, hidden, vocab, head_trainable
    )


def cpu_head_backward(tokens: int, hidden: int, vocab: int, compute_bytes: int, head_trainable: bool) -> float:
    """The LM head's backward on a CPU: the projection buffer (only the touched min(V, 32768) columns are resident)
    in b + 7 fp32 temporaries + the bool target mask, per touched tile element, + the accumulators."""
    tile = head_tile(tokens, vocab)
    return tile * (compute_bytes + 4 * CPU_BACKWARD_FP32_TILES + 1) + head_accumulators(
        tokens, hidden, vocab, head_trainable
    )


def full_logits(rows: int, seq: int, vocab: int, compute_bytes: int, units: float) -> float:
    """Where the loss reads the model's full logits (the experimental ORPO and CPO/SimPO trainers call the model
    without TRL's fused head): `units` logits-sized [R, L, V] tensors of b bytes alive at the backward's peak."""
    return units * rows * seq * vocab * compute_bytes


def liger_fused_linear_ce(tokens: int, hidden: int, vocab: int, compute_bytes: int) -> float:
    """Liger's fused linear cross-entropy (liger_kernel/ops/fused_linear_cross_entropy.py): the logits of one chunk of
    next_pow2(ceil(t / ceil(V / H))) tokens (at most t) at a time, the input's gradient (zeros_like, t * H) and the
    fp32 per-token loss: about t * H * b twice, where materialised logits hold t * V."""
    chunk = min(tokens, 1 << max(0, math.ceil(math.log2(-(-tokens // -(-vocab // hidden))))))
    return chunk * vocab * compute_bytes + tokens * hidden * compute_bytes + 4 * tokens


def scalar_head(rows: int, seq: int, compute_bytes: int) -> float:
    """A one-output sequence-classification head scores every position before the last one is pooled: R * L * b."""
    return rows * seq * compute_bytes


def no_grad_forward(per_layer: float, tokens: int, vocab: int, compute_bytes: int) -> float:
    """A forward pass without gradient (KTO's KL batch) keeps nothing for a backward: its peak is one layer's
    working set and one logits tile of the fused head, min(t, 4096) * min(V, 32768) * b."""
    return per_layer + head_tile(tokens, vocab) * compute_bytes


@dataclass(frozen=True)
class LayerSaved:
    """The per-token counts `layer_activations` takes: norms, bytes of a norm's kept input, bytes the MLP keeps per
    [t, I] element, elements of trained linears' inputs, and bytes per hidden element of the residual dropouts'
    masks."""

    norms: int
    norm_bytes: int
    mlp_bytes: int
    trained_inputs: int
    dropout_mask_bytes: int = 0


AttentionKernel = Literal["fused", "math", "eager"]
"""How a layer's attention runs: one fused kernel (FlashAttention, memory-efficient, the CPU's flash kernel), sdpa's
math path, or transformers' eager_attention_forward (matmul, softmax in fp32, cast back, matmul)."""


def layer_activations(
    tokens: int,
    rows: int,
    seq: int,
    hidden: int,
    kv_dim: int,
    intermediate: int,
    heads: int,
    act_bytes: int,
    attention: AttentionKernel,
    saved: LayerSaved,
    clamped: bool = False,
) -> float:
    """One decoder layer's saved activations for backward, as its ops keep them (saved-tensor hooks,
    docs/evidence/gpu-memory-terms.md): each norm's input (`saved.norm_bytes`: RMSNorm's fp32 upcast); attention's
    tensors (`attention_saved`); the MLP's `saved.mlp_bytes` per [t, I] element; the inputs of trained linears
    (`saved.trained_inputs`: a frozen linear keeps none, its input's gradient needs only its weight); the active
    residual dropouts' masks. `clamped`: attention_saved's."""
    per_token = (
        hidden * (saved.norms * saved.norm_bytes + saved.dropout_mask_bytes)
        + saved.mlp_bytes * intermediate
        + act_bytes * saved.trained_inputs
    )
    kept = attention_saved(attention, tokens, rows, seq, hidden, kv_dim, heads, act_bytes, clamped)
    return tokens * per_token + kept


def attention_saved(
    kernel: AttentionKernel,
    tokens: int,
    rows: int,
    seq: int,
    hidden: int,
    kv_dim: int,
    heads: int,
    act_bytes: int,
    clamped: bool = False,
) -> float:
    """What a layer's attention keeps for backward:
    - fused: q, k and v after the rotary embedding and the output, (2H + 2kv) b (and a [heads, L] fp32 log-sum-exp);
    - math: the same and rows * heads * L^2 * 2b of scores and probabilities;
    - eager: q, k and v, (H + 2kv) b (no kernel keeps the output: o_proj's input is kept only where o_proj trains),
      and per score the fp32 softmax's output, which its backward reads, and its cast to the compute dtype, which the
      matmul with v keeps (`softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)`; the cast is the
      same tensor in fp32): 4 + b bytes, 4 in fp32 (measured: tests/unit/estimate/test_layer_saved.py); `clamped`:
      the masked scores clamped by torch.max before the softmax (Knobs.eager_clamp), which keeps them: b more."""
    if kernel == "eager":
        per_score = 4 + (act_bytes if act_bytes < 4 else 0) + (act_bytes if clamped else 0)
        return tokens * act_bytes * (hidden + 2 * kv_dim) + rows * heads * seq * seq * per_score
    scores = rows * heads * seq * seq * 2 * act_bytes if kernel == "math" else 0
    return tokens * act_bytes * (2 * hidden + 2 * kv_dim) + scores


def litgpt_attention(tokens: int, hidden: int, kv_dim: int, padded_outputs: int, act_bytes: int) -> float:
    """What LitGPT's fused-QKV attention keeps beyond `layer_activations`' q, k, v and output (lit_gpt/model.py
    CausalSelfAttention.forward, lit_gpt/lora.py LoRAQKVLinear.zero_pad, at Lightning-AI/lit-gpt 0cc02afa):
    - multi-head: v is `qkv.permute(...).split(...)[2].reshape(...)`, which only drops a size-1 dimension, so it
      stays a view of the fused output and the attention kernel keeping v keeps all of it: H + kv more;
    - grouped-query: k and v are expanded to every head before the reshape, which copies them: 2 (H - kv) more;
    - LoRA on some but not all of q, k, v: zero_pad's `index_copy` keeps its source, the adapted outputs
      (aten's IndexCopyBackward saves `source`): `padded_outputs` elements.
    Measured on Llama-2-7B's shapes: 48 KiB a token a layer for the attention's four tensors (32 counted) and 16
    KiB for the index_copy source."""
    view = hidden + kv_dim if kv_dim == hidden else 2 * (hidden - kv_dim)
    return tokens * act_bytes * (view + padded_outputs)


def lora_input_copies(
    tokens: int,
    adapted_inputs: int,
    distinct_inputs: int,
    rank_outputs: int,
    adapter_bytes: int,
    act_bytes: int,
    dropout: bool,
) -> float:
    """What PEFT's LoRA branch saves for backward per decoder layer, on a GPU (peft/tuners/lora/layer.py
    `Linear.forward`: `x = self._cast_input_dtype(x, lora_A.weight.dtype)`, then `lora_B(lora_A(dropout(x)))`), with
    `adapted_inputs` the in_features summed over the adapted linears, `distinct_inputs` over the tensors they read
    (q, k and v read one, gate and up one) and `rank_outputs` r times their count:
    - lora_A's input, one per adapted linear where it is not x itself: fp32 adapters under autocast get x cast up by
      PEFT and back by autocast, which saves that copy (b); a dropout above 0 saves its output (b);
    - else x itself, once per distinct input: the adapted base linear is frozen and keeps none;
    - the dropout's bool mask (1 byte per element, aten `native_dropout`);
    - lora_A's output, saved by lora_B: r * b per adapted linear."""
    copied = adapter_bytes != act_bytes or dropout
    own = (adapted_inputs if copied else distinct_inputs) * act_bytes
    mask = adapted_inputs if dropout else 0
    return tokens * (own + mask + rank_outputs * act_bytes)


def bnb_kept_inputs(tokens: int, hidden: int, intermediate: int, act_bytes: int) -> float:
    """Per decoder layer, the inputs bitsandbytes before 0.43.2 keeps for its 4-bit linears: MatMul4Bit.forward sets
    `ctx.tensors = (A, B)` whenever an input needs a gradient (bitsandbytes/autograd/_functions.py:522-523 at 0.42.0;
    0.43.2 keeps `(None, B)`, commit 9e75374 "fix QLoRA mem bug: delete useless buffered activation"), where a
    frozen torch Linear keeps no input, so none of these is in `layer_activations`: the q/k/v input (the attention
    norm's output), o_proj's input (the attention output's contiguous copy), gate/up's (the MLP norm's output) and
    down_proj's (the gated product): t * b * (3H + I). A ctx attribute is no saved tensor, so backward does not
    release it: it lives as long as the graph does, and a step whose graph is still referenced while the next
    forward runs holds the same again."""
    return tokens * act_bytes * (3 * hidden + intermediate)


def fp32_layer_inputs(layers: int, tokens: int, hidden: int, act_bytes: int) -> float:
    """The residual stream in fp32 where a LayerNorm model's MLP is 4-bit under autocast: autocast runs layer_norm
    in fp32 (ATen autocast_mode.h AT_FORALL_FP32), bitsandbytes' Linear4bit returns its input's dtype
    (`bnb.matmul_4bit(x, ...).to(inp_dtype)`, bitsandbytes/nn/modules.py:123-134 at 0.50.2), so fc2's output is
    fp32 and so is the residual sum it joins (transformers' PhiDecoderLayer `attn_outputs + feed_forward_hidden_states
    + residual`; OPT's `residual + hidden_states` after fc2). Every layer after the first then takes an fp32 input,
    which checkpointing saves: (layers - 1) * t * H * (4 - b) more than the bf16 count. Without checkpointing the
    norms keep it, in fp32 under autocast whatever the residual's dtype (shapes.LayerSaves.norm_bytes)."""
    return max(layers - 1, 0) * tokens * hidden * (4 - act_bytes)


def saved_activations(
    layers: int, per_layer: float, tokens: int, hidden: int, act_bytes: int, checkpointing: bool
) -> float:
    """Activations held while the LM head's backward runs, the first thing backward does: with gradient
    checkpointing only each layer's input t*H*b (the layers are recomputed later, one at a time); without it every
    layer's activations."""
    if checkpointing:
        return layers * tokens * hidden * act_bytes
    return layers * per_layer


def layer_backward_temporaries(tokens: int, hidden: int, intermediate: int, act_bytes: int, gated: bool) -> float:
    """What a decoder layer's backward holds beyond its saved activations, at the MLP's backward: the gradient coming
    into the layer, t*H*b, and the MLP's gradients at the intermediate width. Gated (`down(act(gate(x)) * up(x))`):
    the product's gradient and `mul`'s two, 3 [t, I]; ungated (`fc2(act(fc1(x)))`): fc2's input gradient and the
    activation's, 2 [t, I]. Traced on llama-3.2-1b's shapes (MemTracker, docs/evidence/trace.md, "Memory: which side
    is wrong"): every recomputed layer's temp less the pending head gradient is exactly 3 t I b + t H b."""
    return tokens * (hidden + (3 if gated else 2) * intermediate) * act_bytes


def logits_bytes_per_element(loss: str, compute_bytes: int, compiled: bool = False) -> float:
    """Bytes per logit (token x vocabulary entry) alive at the loss's peak where logits are materialised:
    - full_fp32: the logits in b, their fp32 upcast, the shifted copy and log_softmax's fp32 output kept for backward
      (transformers' LlamaForCausalLM up to 4.44: `logits.float()`, `shift_logits.contiguous()`): b + 3 * 4;
    - full: the same in the compute dtype (a model's own CrossEntropyLoss over bf16 logits, Qwen-7B's
      modeling_qwen.py): 3 * b;
    - chunked_fp32: every chunk's logits kept in b + each chunk's fp32 log_softmax kept for backward (torchtune's
      CEWithChunkedOutputLoss): b + 4;
    - chunked: every chunk's logits and log_softmax kept in b (LitGPT's chunked_cross_entropy): 2 * b.
    `compiled` chunked_fp32 (torchtune's compile_loss compiles each chunk's upcast and cross-entropy): Inductor saves
    the b-byte chunk and 8 bytes a row, not the log_softmax: b (tests/unit/estimate/test_compiled_loss.py)."""
    if compiled and loss == "chunked_fp32":
        return compute_bytes
    return {"full_fp32": compute_bytes + 12, "full": 3 * compute_bytes, "chunked_fp32": compute_bytes + 4}.get(
        loss, 2 * compute_bytes
    )


DEEPSPEED_CPU_SHM_BYTES = 2 * MiB + 2 * 32 * MiB
"""DeepSpeed's CPU shared-memory allreduce buffer, one per rank (deepspeed/ops/csrc/cpu/comm/shm.cpp:
2 x NAIVE_ALLREDUCE_THRESHOLD (1 MiB) + 2 x MAX_BUF_SIZE (32 MiB)). shm_interface.cpp creates it only when every rank
is local by the launcher's LOCAL_SIZE, which only the `deepspeed` launcher sets: the same ZeRO cell launched by
accelerate or mpirun does without it (measured: 67-69 MiB less on the largest rank, results/cpu-budget-4g)."""


def deepspeed_cpu_shm(device: str, launcher: str, world: int, whole: bool, allreduced_bytes: float) -> float:
    """The buffer where it exists. shm.cpp seeds it with `write()` of the whole workspace: every tmpfs page is
    allocated then and charged to the writer's cgroup (`whole`); RSS counts only the pages the process touches
    through its mapping, those its allreduces pass through (at most the buffer)."""
    if not (device == "cpu" and launcher == "deepspeed" and world > 1):
        return 0.0
    return float(DEEPSPEED_CPU_SHM_BYTES) if whole else min(allreduced_bytes, float(DEEPSPEED_CPU_SHM_BYTES))
