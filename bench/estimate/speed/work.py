"""FLOPs and memory traffic of one training step on one rank: pure functions of the step's shape.

Compute follows the model-FLOPs convention of bench/judge/mfu.py (after PaLM, Chowdhery et al. 2022, appendix B:
2N + 4LHQT per token per forward, twice that for the backward) and counts what the hardware really does on top
of it: the recompute of gradient checkpointing and, for LoRA, the weight gradients it skips.
"""

from dataclasses import dataclass

from bench.judge.mfu import ModelShape

ADAM_BYTES_PER_PARAM = 28
"""AdamW in fp32 reads parameter, gradient and both moments (4 x 4 bytes) and writes parameter and moments
(3 x 4 bytes) per trained parameter: torch.optim.AdamW's update, one pass over each tensor."""
LOGPROB_PASSES_GRAD = 6
"""Passes over the (tokens x vocab) fp32 logits in a forward with gradient and its backward: write the logits,
read them for the log-sum-exp, write the log-probs; the backward reads the softmax and the incoming gradient and
writes the logits' gradient (torch's log_softmax forward and backward kernels)."""
LOGPROB_PASSES_NO_GRAD = 3
"""The forward's three passes alone (a reference forward)."""


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

    @property
    def tokens(self) -> float:
        return self.seq_len * self.sequences


def forward_flops_per_token(shape: ModelShape, seq_len: float) -> float:
    """2N + 4LHQT: one forward (PaLM appendix B; the attention term is QK^T and AV over T keys)."""
    return 2.0 * shape.matmul_params + 4.0 * shape.layers * shape.heads * shape.head_dim * seq_len


def backward_flops_per_token(shape: ModelShape, seq_len: float, adapters: bool) -> float:
    """Twice the forward: the gradients of the activations and of the weights (Kaplan et al. 2020, section 2.1).
    A LoRA policy's frozen weights get no gradient (Hu et al. 2021, section 4.1): the activation half alone; the
    adapters' own products are below 1% of N at r=8..64 and are left out."""
    forward = forward_flops_per_token(shape, seq_len)
    return forward if adapters else 2.0 * forward


def recompute_flops_per_token(shape: ModelShape, seq_len: float, checkpointing: bool) -> float:
    """Gradient checkpointing runs each decoder layer's forward again in the backward (transformers checkpoints
    the decoder layers, not the LM head): one forward less the head's 2 x lm_head_params."""
    if not checkpointing:
        return 0.0
    return forward_flops_per_token(shape, seq_len) - 2.0 * shape.lm_head_params


def step_flops(step: StepShape) -> float:
    """Hardware FLOPs of one rank's step: the policy's forward, backward and recompute, and the forwards without
    gradient, each over the step's tokens."""
    s, t = step.shape, step.seq_len
    forward = forward_flops_per_token(s, t)
    per_token = (
        forward
        + backward_flops_per_token(s, t, step.adapters)
        + recompute_flops_per_token(s, t, step.checkpointing)
        + step.no_grad_forwards * forward
    )
    return per_token * step.tokens


def optimizer_bytes(trainable_params: float) -> float:
    """Memory traffic of the AdamW step over the parameters this rank updates."""
    return ADAM_BYTES_PER_PARAM * trainable_params


def logprob_bytes(step: StepShape) -> float:
    """The LM head's fp32 (tokens x vocab) logits, read and written LOGPROB_PASSES times: memory-bound work that
    the FLOP count does not see. A scalar head (reward model) has none."""
    if step.output == "scalar":
        return 0.0
    passes = LOGPROB_PASSES_GRAD + LOGPROB_PASSES_NO_GRAD * step.no_grad_forwards
    return passes * 4.0 * step.tokens * step.vocab


def weight_passes(step: StepShape) -> int:
    """Times a step reads every weight: forward, backward, recompute, the forwards without gradient."""
    return 2 + int(step.checkpointing) + step.no_grad_forwards


def dequant_bytes(quantized_params: int, quant_bytes: float, compute_bytes: int, passes: int) -> float:
    """bitsandbytes dequantizes each quantized weight to the compute dtype before its matmul, in every pass
    (Linear4bit: dequantize_4bit then matmul; Linear8bitLt likewise where no int8 kernel runs, as on CPU): read the
    quantized bytes, write the full-precision copy."""
    return passes * quantized_params * (quant_bytes + compute_bytes)
