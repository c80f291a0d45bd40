"""The learning check: did a cell that ran as asked also train correctly? Pure.

Three facts are checked from the per-step DPO losses every rank recorded:
- every loss is finite;
- the first-step loss is ln 2: at step 1 the policy equals the reference in every init mode (the same
  checkpoint, a zero-initialised LoRA B, or the `ref` copy of the adapter), so every pair's log-ratio
  difference is 0 and -log sigmoid(0) = ln 2; a first loss away from ln 2 means the reference is not the
  initial policy;
- the loss at the end is below the first by more than the decrease margin: the policy learned. "At the end" is the
  mean over the last quarter of the steps (at least 3): one step's loss on a batch of a few pairs swings by
  ±0.2 with which pairs it drew (measured on tiny: 0.23 at step 28, 1.29 at step 30). A policy that does not
  learn cannot pass by chance: its loss stays ln 2 up to the numerics (FIRST_LOSS_TOLERANCE), and a policy that
  moves without learning has a mean loss at or above ln 2 (softplus is convex: E[softplus(-βΔ)] >= softplus(0)
  when E[Δ] = 0). See decrease_margin for what the numerics add.
"""

import math
from collections.abc import Sequence

from bench.results.schema import Learning

LN2 = math.log(2.0)
FIRST_LOSS_TOLERANCE = {"fp32": 1e-3, "bf16": 2e-2, "fp16": 2e-2}
"""|first loss - ln 2| allowed, by compute precision. With policy == reference the two forward passes do the same
arithmetic; what differs is only reduction order (another kernel, another rank layout). On CPU in fp32 the
measured deviation is 0 to ~1e-7. The loss's slope at Δ=0 is β/2, so 1e-3 (fp32) still catches a reference
whose summed log-ratio is off by 2e-3/β nats per pair on average (0.02 nats at β = 0.1): a wrong reference
moves it by whole nats (measured: tests/integration/test_learning_check.py). bf16 logits carry ~3 significant
digits, so a summed log-prob over a few hundred tokens can differ by ~0.1 nat between two kernels: 2e-2."""
DECREASE_MARGIN = 0.03
"""The end loss must be below first - margin (fp32; other precisions: decrease_margin); the CPU workloads' learning
rates are set so that the decrease is several times this margin (measured in the committed runs)."""


def decrease_margin(precision: str) -> float:
    """The fall the end loss must exceed. A policy that does not learn reads ln 2 at every step up to the numerical
    deviation FIRST_LOSS_TOLERANCE allows, so its first loss can read ln 2 + tol and its end mean ln 2 - tol: a
    fall of 2 tol by arithmetic alone. fp32: 2e-3, far below DECREASE_MARGIN; bf16 and fp16 (GPU workloads):
    2 x 0.02 = 0.04, above it, so the margin there is 0.04."""
    return max(DECREASE_MARGIN, 2 * FIRST_LOSS_TOLERANCE[precision])


def end_steps(steps: int) -> int:
    """How many final steps the end loss averages."""
    return max(3, steps // 4)


def mean_per_step(series: Sequence[Sequence[float]]) -> list[float]:
    """Mean over ranks of each step's loss, over the steps every rank recorded."""
    present = [s for s in series if s]
    if not present:
        return []
    steps = min(len(s) for s in present)
    return [sum(s[i] for s in present) / len(present) for i in range(steps)]


def check(
    rank_losses: Sequence[Sequence[float | None]], reward_accuracies: Sequence[float | None], precision: str
) -> Learning:
    """The learning check of one cell, from each rank's per-step losses (None: not finite, as JSON keeps it) and
    the lead rank's reward accuracies."""
    rank_losses = [[math.nan if v is None else v for v in s] for s in rank_losses]
    losses = mean_per_step(rank_losses)
    failures: list[str] = []
    if not losses:
        failures.append("no training loss was recorded")
        return Learning(first_loss=None, last_loss=None, reward_accuracy=None, failures=failures)
    bad = [(rank, step + 1) for rank, s in enumerate(rank_losses) for step, v in enumerate(s) if not math.isfinite(v)]
    if bad:
        rank, step = bad[0]
        failures.append(f"non-finite loss (first at step {step} on rank {rank})")
    first, last = losses[0], losses[-1]
    tail = losses[-end_steps(len(losses)) :]
    end = sum(tail) / len(tail)
    tolerance = FIRST_LOSS_TOLERANCE[precision]
    if math.isfinite(first) and abs(first - LN2) > tolerance:
        failures.append(
            f"first-step loss {first:.4f} is not ln 2 = {LN2:.4f} (±{tolerance:g}): "
            "the reference is not the initial policy"
        )
    if math.isfinite(first) and math.isfinite(end) and not end < first - decrease_margin(precision):
        failures.append(
            f"loss did not fall: {first:.4f} at step 1, {end:.4f} over the last {len(tail)} of {len(losses)} steps"
        )
    return Learning(
        first_loss=_finite_or_none(first),
        last_loss=_finite_or_none(last),
        end_loss=_finite_or_none(end),
        reward_accuracy=reward_accuracies[-1] if reward_accuracies else None,
        losses=[round(v, 6) if math.isfinite(v) else None for v in losses],
        failures=failures,
    )


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None
