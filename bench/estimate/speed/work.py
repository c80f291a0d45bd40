"""FLOPs and memory traffic of one training step on one rank: pure functions of the step's shape.

Compute follows the model-FLOPs convention of bench/judge/mfu.py (after PaLM, Chowdhery et al. 2022, appendix B:
2N + 4LHQT per token per forward, twice that for the backward) and counts what the hardware really does on top
of it: the recompute of gradient checkpointing, of the flash attention backward and of TRL's chunked LM head, and,
for LoRA, the weight gradients it skips and the adapters' own products. `dpo-bench trace` (bench/estimate/trace/)
holds it against torch's count of the real step.
"""

import re
from dataclasses import dataclass

from bench.estimate.shapes import ModelShapes, activation_of
from bench.estimate.terms import optimizer_state
from bench.judge.mfu import ModelShape, flops_per_token

ADAM_STATE_BYTES = 8.0
"""AdamW's two fp32 moments per parameter (terms.optimizer_state's adamw_torch_fused, 2 x 4 bytes)."""
LOGPROB_PASSES_GRAD = 6
"""Passes over the (tokens x vocab) fp32 logits in a forward with gradient and its backward: write the logits,
read them for the log-sum-exp, write the log-probs; the backward reads the softmax and the incoming gradient and
writes the logits' gradient (torch's log_softmax forward and backward kernels)."""
LOGPROB_PASSES_NO_GRAD = 3
"""The forward's three passes alone (a reference forward)."""
ELEMENTWISE_BACKWARD_PASSES = 2
"""An elementwise op's backward reads what its forward saved and the incoming gradient and writes the outgoing
gradient: about twice its forward's traffic (torch.autograd's derivatives of mul, add, pow, silu, cat)."""


@dataclass(frozen=True)
class StepShape:
    """What one rank computes per step."""

    shape: ModelShape
    """Matmul parameters N, layers, heads, head dim, LM head (bench/judge/mfu.py)."""
    seq_len: float
    """Tokens per sequence (mean)."""
    sequences: int
    """Sequences through the policy per rank per step: batch x rows per example (2 for preference pairs)."""
    trainable_params: int
    """Every parameter for full fine-tuning; the trained adapter's for LoRA."""
    adapters: bool
    checkpointing: bool
    no_grad_forwards: int
    """Forwards without gradient per step (the reference's, KTO's KL batch): bench/judge/mfu.py no_grad_forwards."""
    vocab: int
    output: str
    """bench/matrix/methods.py Output: fused_logprobs, full_logits or scalar."""
    layer_bytes: float = 0.0
    """Memory traffic of one decoder layer's elementwise ops per token in one forward (layer_elementwise_bytes)."""
    adapter_bytes: float = 0.0
    """Memory traffic of the LoRA branches per token in one forward, over every adapted linear (adapter_bytes)."""
    micro_steps: int = 1
    """Forward/backward passes per optimizer step (gradient accumulation): `sequences` is over all of them."""
    head_recompute: bool = False
    """The LM head is TRL's chunked one (ChunkedLogProbFunction, add_fused_lm_head), whose backward recomputes the
    logits (backward_gemm_flops_per_token); other stacks keep them."""
    unrecomputed_params: int = 0
    """Weights whose GEMM the checkpoint's recompute skips (recompute_gemm_flops_per_token; last_layer_gemms)."""
    adapter_no_grad_forwards: int = 0
    """Forwards without gradient through an active adapter (TRL's `ref` adapter, KTO's KL forward of the policy):
    each 2P more (matmul_flops); a disabled adapter (the policy as reference) adds none."""

    @property
    def tokens(self) -> float:
        return self.seq_len * self.sequences


FLASH_BACKWARD_FORWARDS = 2.5
"""The fused attention kernel's backward in forwards: it recomputes QK^T from the saved log-sum-exp before dV, dP,
dQ and dK (FlashAttention-2, Dao 2023, algorithm 2), 5 products to the forward's 2. torch counts it so
(torch/utils/flop_counter.py `sdpa_backward_flop_count`, CUDA and, with trace.flops, CPU kernels alike; the traced
tiny step: 3.5 forwards in all), and the FlashAttention benchmarks whose utilization devices.ATTENTION_FRACTION
cites count it so (benchmarks/benchmark_flash_attention.py `flops`: "2.5 * f" for the backward)."""


def forward_flops_per_token(shape: ModelShape, seq_len: float) -> float:
    """2N + 4LHQT: one forward (PaLM appendix B; the attention term is QK^T and AV over T keys)."""
    return 2.0 * shape.matmul_params + attention_per_token(shape, seq_len)


def attention_per_token(shape: ModelShape, seq_len: float) -> float:
    """4LHQT: QK^T and AV of one forward over T keys (causal masking not halved, as torch's count does not)."""
    return 4.0 * shape.layers * shape.heads * shape.head_dim * seq_len


def backward_gemm_flops_per_token(step: StepShape) -> float:
    """The backward's GEMMs per token. The activations' gradients through every weight, 2N; the weights' own, 2N
    more for full fine-tuning (Kaplan et al. 2020, section 2.1), none for a LoRA policy's frozen weights (Hu et al.
    2021, section 4.1), whose adapters' products (adapter_gemm_params: 2P forward) get both gradients, 4P
    (peft.tuners.lora.layer.Linear.forward: `lora_B(lora_A(dropout(x))) * scaling`, two nn.Linear). TRL's chunked
    LM head keeps no logits: its backward recomputes each tile before the gradient GEMMs
    (trl/kernels/chunked_logprob.py, ChunkedLogProbFunction.backward: `torch.mm(hidden_chunk, w_chunk.t(),
    out=tile)`, then `_addmm_fp32` for grad_hidden and, when the head is trained, grad_weight), 2Vh more."""
    n, p = step.shape.matmul_params, adapter_gemm_params(step)
    weights = 0.0 if step.adapters else 2.0 * n
    head = 2.0 * step.shape.lm_head_params if step.head_recompute else 0.0
    return 2.0 * n + weights + 4.0 * p + head


def adapter_gemm_params(step: StepShape) -> float:
    """A LoRA policy's adapter weights (r x (in + out) per adapted linear: the trained parameters), each a
    multiply-add per token in every pass through an active adapter."""
    return float(step.trainable_params) if step.adapters else 0.0


def recompute_gemm_flops_per_token(step: StepShape) -> float:
    """Gradient checkpointing runs each decoder layer's forward again in the backward (transformers checkpoints
    the decoder layers, not the LM head): the forward's GEMMs, adapters included, less the head's and less
    `unrecomputed_params`' (last_layer_gemms)."""
    if not step.checkpointing:
        return 0.0
    s = step.shape
    return 2.0 * (s.matmul_params - s.lm_head_params - step.unrecomputed_params + adapter_gemm_params(step))


def last_layer_gemms(linears: list[tuple[str, int, int]], lora_r: int, adapted: set[str]) -> int:
    """Weights of each decoder layer's last linear (`linears`: (dotted name, in, out) in module order, the
    forward's in transformers' decoders: Llama's down_proj, Phi's fc2) and of its LoRA B where its name is in
    `adapted` (lora_A's output is saved for lora_B's backward, so A is recomputed): what a non-reentrant checkpoint
    does not recompute. Its recompute stops once every tensor the backward saved is back (torch/utils/checkpoint.py
    `early_stop`, default True; transformers checkpoints non-reentrantly, modeling_utils.py
    `_activation_checkpointing_enable`: `{"use_reentrant": False}`), and that GEMM's output feeds only the residual
    add, which saves nothing (where an active dropout follows it, its mask is saved and the speed model counts
    none skipped: speed/model.py `_dropout_after_last_gemm`). Measured: llama-3.2-1b's checkpointed step is
    6N + 1.41e9 FLOPs a token, the recompute 2(N - head - 16 down_proj)."""
    last: dict[str, tuple[str, int, int]] = {}
    for name, fan_in, fan_out in linears:
        layer = re.match(r"(.*?\.\d+)\.", name)
        if layer:
            last[layer.group(1)] = (name, fan_in, fan_out)
    skipped = 0
    for name, fan_in, fan_out in last.values():
        lora_b = lora_r * fan_out if name.rsplit(".", 1)[-1] in adapted or "all-linear" in adapted else 0
        skipped += fan_in * fan_out + lora_b
    return skipped


def matmul_flops(step: StepShape) -> float:
    """The step's GEMMs: the policy's forward (2N, 2P through its adapters), backward and recompute, and the
    forwards without gradient (2N each; 2P more where the adapter is active in them:
    adapter_no_grad_forwards)."""
    n, p = step.shape.matmul_params, adapter_gemm_params(step)
    per_token = (
        2.0 * (n + p)
        + backward_gemm_flops_per_token(step)
        + recompute_gemm_flops_per_token(step)
        + step.no_grad_forwards * 2.0 * n
        + step.adapter_no_grad_forwards * 2.0 * p
    )
    return per_token * step.tokens


def attention_passes(step: StepShape) -> float:
    """Forward-equivalents of attention per step: the forward, the fused backward (FLASH_BACKWARD_FORWARDS,
    whether the weights are trained or not), the recompute, the forwards without gradient."""
    return 1.0 + FLASH_BACKWARD_FORWARDS + float(step.checkpointing) + step.no_grad_forwards


def attention_flops(step: StepShape) -> float:
    """The attention's FLOPs in a step, in the fused kernel, not as GEMMs (devices.attention_fraction)."""
    return attention_per_token(step.shape, step.seq_len) * attention_passes(step) * step.tokens


def step_flops(step: StepShape) -> float:
    """Hardware FLOPs of one rank's step: the GEMMs and the attention."""
    return matmul_flops(step) + attention_flops(step)


def backward_share(step: StepShape) -> float:
    """The backward's (and recompute's) share of the step's FLOPs: what bucketed gradient reduction hides behind."""
    attention = attention_per_token(step.shape, step.seq_len)
    gemms = backward_gemm_flops_per_token(step) + recompute_gemm_flops_per_token(step)
    backward = gemms + attention * (FLASH_BACKWARD_FORWARDS + float(step.checkpointing))
    return backward * step.tokens / step_flops(step)


def hardware_ratio(shape: ModelShape, seq_len: float, adapters: bool, checkpointing: bool, no_grad: int) -> float:
    """step_hardware_ratio of a published source's step, whose adapters, head and checkpoint implementation are
    unknown: neither the adapters' GEMMs, a head recompute nor an early-stopping recompute is counted."""
    return step_hardware_ratio(StepShape(shape, seq_len, 1, 0, adapters, checkpointing, no_grad, 0, "fused_logprobs"))


def step_hardware_ratio(step: StepShape) -> float:
    """Hardware FLOPs per token (step_flops: the recompute of checkpointing, of the flash backward, of TRL's head,
    the adapters' GEMMs) over model FLOPs per token (bench/judge/mfu.py's convention, which leaves those out and
    counts a LoRA policy's frozen weights' gradients): HFU / MFU."""
    no_grad = step.no_grad_forwards
    model = flops_per_token(step.shape, step.seq_len, no_grad == 0, no_grad)
    return step_flops(step) / step.tokens / model


def optimizer_pass_bytes(optimizer: str, state_bytes: float = ADAM_STATE_BYTES, param_bytes: int = 4) -> float:
    """Bytes one optimizer step moves per parameter, by how its kernels pass over it (S: the states' bytes,
    terms.optimizer_state; p: a parameter's and its gradient's bytes, 2 in pure 16-bit training):
    - one fused pass (torch `_fused_adamw`; bitsandbytes' 8-bit blockwise and 32-bit kernels, paged alike while
      resident): read p, g, states; write p, states: 2p + g + 2S (AdamW fp32: 28);
    - adamw_torch (`_multi_tensor_adam`, no weight decay): lerp_, mul_, addcmul_ (g twice), sqrt to a temporary,
      div_, add_, addcdiv_: 2p + 3g + 7S (76 in fp32);
    - adafactor (transformers' Adafactor.step, factored, beta1 None): p's RMS, grad**2, + eps, two means, the factors'
      product, mul_ g, the update's RMS, div_, mul_ lr, -update, add_: 84 in fp32, + fp32 copies of 16-bit p, g."""
    p = g = param_bytes
    if optimizer == "adafactor":
        return 84 + (g + 4 if g < 4 else 0) + (2 * (p + 4) if p < 4 else 0)
    if optimizer == "adamw_torch":
        return 2 * p + 3 * g + 7 * state_bytes
    return 2 * p + g + 2 * state_bytes


def optimizer_param_bytes(optimizer: str, tensors: list[tuple[int, int]], param_bytes: int = 4) -> float:
    """optimizer_pass_bytes of `optimizer` over trainable `tensors` ((rows, cols)), its states' bytes per parameter
    as memory counts them (terms.optimizer_state: 8-bit states, small tensors' 32-bit ones, the absmax)."""
    elements = sum(r * c for r, c in tensors)
    state = optimizer_state(optimizer, tensors, param_bytes)
    per_element = (state.resident + state.paged) / elements if elements else ADAM_STATE_BYTES
    return optimizer_pass_bytes(optimizer, per_element, param_bytes)


def optimizer_bytes(trainable_params: float, master_copy_bytes: int = 0, per_param: float | None = None) -> float:
    """Memory traffic of the optimizer step over the parameters this rank updates (`per_param`: optimizer_pass_bytes;
    default fused AdamW in fp32). `master_copy_bytes`: a compute dtype of that many bytes under an engine that keeps
    an fp32 master copy (DeepSpeed's bf16/fp16 ZeRO, whose fp32 partition terms.py counts in memory): each step
    casts the gradients up (read b, write 4) and the updated master down (read 4, write b), 2 x (4 + b) more."""
    per = optimizer_pass_bytes("adamw_torch_fused") if per_param is None else per_param
    extra = 2 * (4 + master_copy_bytes) if master_copy_bytes else 0
    return (per + extra) * trainable_params


def logprob_bytes(step: StepShape) -> float:
    """The LM head's fp32 (tokens x vocab) logits, read and written LOGPROB_PASSES times: memory-bound work that
    the FLOP count does not see. A scalar head (reward model) has none."""
    if step.output == "scalar":
        return 0.0
    passes = LOGPROB_PASSES_GRAD + LOGPROB_PASSES_NO_GRAD * step.no_grad_forwards
    return passes * 4.0 * step.tokens * step.vocab


def weight_passes(step: StepShape) -> int:
    """Times an optimizer step reads every weight: forward, backward, recompute, the forwards without gradient, in
    each micro-step (gradient accumulation runs them once per micro-batch)."""
    return (2 + int(step.checkpointing) + step.no_grad_forwards) * step.micro_steps


def dequant_bytes(quantized_params: int, quant_bytes: float, compute_bytes: int, passes: int) -> float:
    """bitsandbytes dequantizes each quantized weight to the compute dtype before its matmul, in every pass: read
    the quantized bytes, write the full-precision copy. Linear4bit's backward always does
    (autograd/_functions.py, MatMul4Bit.backward: `F.dequantize_4bit(B, ctx.state)`), its forward too past 1536
    tokens per call (backends/cuda/ops.py, gemm_4bit: the fused kernel only up to `_gemm_4bit_custom_max_m`, then
    "the dequant+F.linear fallback"; bitsandbytes 0.50.2), which a training micro-batch exceeds; Linear8bitLt
    likewise where no int8 kernel runs, as on CPU. `passes`: weight_passes, micro-steps included."""
    return passes * quantized_params * (quant_bytes + compute_bytes)


@dataclass(frozen=True)
class LayerLayout:
    """What a decoder layer's elementwise traffic depends on besides its widths (bench/estimate/shapes.py's
    ModelShapes facts); the defaults are transformers' Llama layout."""

    norms: int = 2
    layer_norm: bool = False
    """nn.LayerNorm (one kernel); False: transformers' RMSNorm (a chain of ops in fp32)."""
    norm_readers: int = 5
    """Linears reading a norm's output: all of a layer's but the attention's output projection and the MLP's last
    (q, k, v, gate and up in Llama's; q, k, v and fc1 in phi's and OPT's)."""
    rotary_fraction: float = 1.0
    """Share of each query and key head the rotary embedding turns (phi-2's 0.4); 0 with learned positions."""
    mlp_pass_bytes: int | None = None
    """An ungated MLP's activation's bytes per [t, I] element (shapes.Activation.pass_bytes); None: gated."""
    autocast: bool = False
    """Under CUDA's autocast (bench/matrix/precision.py cuda_autocast), which runs layer_norm in fp32."""


LLAMA_LAYOUT = LayerLayout()


def layout_of(shapes: ModelShapes, compute_bytes: int, autocast: bool) -> LayerLayout:
    """The model's LayerLayout in the compute dtype."""
    head_dim = shapes.head_dim or 1
    activation = None if shapes.gated_mlp else activation_of(shapes).pass_bytes(compute_bytes, autocast)
    return LayerLayout(
        norms=shapes.layer_norms,
        layer_norm=shapes.layer_norm,
        norm_readers=max(shapes.layer_linears - 2, 0),
        rotary_fraction=min(shapes.rotary_dims / head_dim, 1.0),
        mlp_pass_bytes=activation,
        autocast=autocast,
    )


def model_layer_bytes(shapes: ModelShapes, compute_bytes: int, autocast: bool) -> float:
    """layer_elementwise_bytes of the model's decoder layer, its layout read off its shapes (layout_of)."""
    q_dim, kv_dim = shapes.heads * shapes.head_dim, shapes.kv_heads * shapes.head_dim
    layout = layout_of(shapes, compute_bytes, autocast)
    return layer_elementwise_bytes(shapes.hidden, q_dim, kv_dim, shapes.intermediate, compute_bytes, layout=layout)


def layer_elementwise_bytes(
    hidden: int,
    q_dim: int,
    kv_dim: int,
    intermediate: int,
    compute_bytes: int,
    fused_norm_rope: bool = False,
    layout: LayerLayout = LLAMA_LAYOUT,
) -> float:
    """Bytes one eager decoder layer reads and writes per token in one forward outside its matmuls, each op one pass
    over its tensors: RMSNorm (LlamaRMSNorm: fp32 cast, pow, mean, rsqrt, cast back, weight) 28 + 4b per element;
    nn.LayerNorm one read and one write, under CUDA's autocast on an fp32 copy whose output each reading linear casts
    back; two residual adds (read two, write one); RoPE on the turned share of q and k (x cos, rotate_half's neg and
    cat, x sin, add: 10 passes; a partial rotary's cat one more read and write); the attention output made
    contiguous; SwiGLU (the activation reads and writes the gate, the product reads two, writes one) or an ungated
    activation as shapes.Activation counts it. Attention itself is one kernel, counted in FLOPs. `fused_norm_rope`:
    fused RMSNorm and rotary kernels (flash-attn's, which Qwen-7B's modeling_qwen.py calls): a read and a write each."""
    b = compute_bytes
    if fused_norm_rope:
        return float(
            2 * 2 * b * hidden + 2 * 3 * b * hidden + 2 * b * (q_dim + kv_dim) + 2 * b * q_dim + 5 * b * intermediate
        )
    if not layout.layer_norm:
        norms = layout.norms * (28 + 4 * b) * hidden
    elif layout.autocast:
        norms = (layout.norms * (b + 4 + 4 + 4) + layout.norm_readers * (4 + b)) * hidden
    else:
        norms = layout.norms * 2 * b * hidden
    residuals = 2 * 3 * b * hidden
    turned = layout.rotary_fraction
    rope = (10 * turned + (2 if 0 < turned < 1 else 0)) * b * (q_dim + kv_dim)
    attention_out = 2 * b * q_dim
    mlp = 5 * b * intermediate if layout.mlp_pass_bytes is None else layout.mlp_pass_bytes * intermediate
    return float(norms + residuals + rope + attention_out + mlp)


ADAPTER_BYTES = 4
"""Bytes per element of a PEFT LoRA weight: get_peft_model keeps bf16/fp16 adapters in float32
(autocast_adapter_dtype=True, the default)."""


def adapter_bytes(adapted: list[tuple[int, int]], compute_bytes: int, dropout: bool, peft: bool = True) -> float:
    """Bytes the LoRA branches move per token in one forward, over the adapted linears' (in, out) features, with b
    the compute dtype's bytes. `peft`: PEFT's layer (peft.tuners.lora.layer.Linear.forward) casts the input to the
    float32 adapter (`x = self._cast_input_dtype(x, lora_A.weight.dtype)`: read b, write ADAPTER_BYTES) and the
    trainer's bf16 autocast casts it back for lora_A's matmul (read ADAPTER_BYTES, write b); then, as for any
    LoRA (`result + lora_B(lora_A(dropout(x))) * scaling`): lora_A reads b (a rank-r matmul is memory-bound),
    lora_B writes b, the scaling reads and writes b, the add reads two and writes one. A dropout above 0 reads and
    writes the input once more (in float32 under PEFT)."""
    b = compute_bytes
    a = ADAPTER_BYTES if peft else b
    inp = (2 * b + 2 * a if peft else 0) + b + (2 * a if dropout else 0)
    out = 6 * b
    return float(sum(inp * i + out * o for i, o in adapted))


def elementwise_passes(step: StepShape) -> float:
    """Forward-equivalents of elementwise traffic per step: the forward, its backward (ELEMENTWISE_BACKWARD_PASSES),
    the recompute, the forwards without gradient."""
    return 1 + ELEMENTWISE_BACKWARD_PASSES + int(step.checkpointing) + step.no_grad_forwards


def activation_bytes(step: StepShape) -> float:
    """The decoder layers' elementwise traffic and the LoRA branches' over one rank's step."""
    per_token = step.shape.layers * step.layer_bytes + (step.adapter_bytes if step.adapters else 0.0)
    return per_token * elementwise_passes(step) * step.tokens


def layer_passes(step: StepShape) -> int:
    """Decoder-layer passes per optimizer step (weight_passes x layers): eager PyTorch launches each layer's few
    dozen kernels once per pass, and on a fast GPU with few tokens the launches, not the math, set the time."""
    return weight_passes(step) * step.shape.layers
