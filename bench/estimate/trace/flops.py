"""A step's FLOPs two ways: counted by torch's FlopCounterMode over the real step (every matmul, convolution and
attention kernel the autograd graph dispatches, the recompute of checkpointed layers included), and the speed
model's analytic count (bench/estimate/speed/work.py) for the same batch."""

from typing import Any

from bench.estimate.speed import work
from bench.estimate.speed.model import setup_for
from bench.estimate.trace.step import Step
from bench.matrix.plan import Plan


def _missing_formulas() -> dict:
    """FLOP formulas torch's table lacks for ops a CPU step runs: the CPU's fused attention kernel (the table lists
    the CUDA flash, memory-efficient and cuDNN kernels; the same count as theirs, QK^T and AV over every key, causal
    masking not halved, as the analytic 4LHQT does not; the backward from the same shapes), and the in-place
    `addmm_` with which TRL's chunked LM head accumulates its gradients on the CPU (trl/kernels/chunked_logprob.py
    `_addmm_fp32`): without it the head's backward GEMMs count nothing."""
    import torch
    from torch.utils import flop_counter

    aten = torch.ops.aten

    def forward(query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
        return flop_counter.sdpa_flop_count(query, key, value)

    def backward(grad: Any, query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None, **kw: Any) -> int:
        return flop_counter.sdpa_backward_flop_count(grad, query, key, value)

    def addmm_(acc: Any, a: Any, b: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
        return flop_counter.mm_flop(a, b)

    return {
        aten.addmm_: addmm_,
        aten._scaled_dot_product_flash_attention_for_cpu: forward,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: backward,
    }


def traced_step_flops(step: Step) -> dict[str, int]:
    """FlopCounterMode's count over the trainer's training_step (forward, loss, backward), under the step's context
    (a fake step's mode outside the counter: the counter sees each op first), split into `attention`
    (the fused attention kernels) and `matmul` (everything else: mm, addmm, bmm); the optimizer's update has no
    matmul and is not run."""
    from torch.utils.flop_counter import FlopCounterMode

    with step.context(), FlopCounterMode(display=False, custom_mapping=_missing_formulas()) as counter:
        step.trainer.training_step(step.trainer.model, step.batch)
        step.trainer.optimizer.zero_grad(set_to_none=True)
    kinds = {"matmul": 0, "attention": 0}
    for op, flops in counter.get_flop_counts()["Global"].items():
        kinds["attention" if "attention" in str(op) else "matmul"] += int(flops)
    return kinds


def analytic_step_flops(plan: Plan, sequences: int, seq_len: int) -> float:
    """The speed model's FLOPs (work.step_flops: GEMMs and attention) for `sequences` rows of `seq_len` tokens (the
    traced batch's padded shape)."""
    step = setup_for(plan, float(seq_len)).step
    return work.step_flops(step) * sequences / step.sequences
