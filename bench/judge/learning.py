"""The learning check: did a cell that ran as asked also train correctly? Pure.

Each method's rule (its MethodSpec's `learning`, bench/matrix/methods.py) is checked on the per-step losses and
rewards the ranks recorded: every loss finite; the first-step loss at the value the method's formula gives when
policy = reference (DPO and reward ln 2, KTO 1/2; none for SFT, ORPO, SimPO); then the loss falls (end = mean of
the last quarter of the steps, at least 3, below the start by more than decrease_margin), the reward model ranks
its training pairs (accuracy above 1/2 by two standard errors of a coin flip), or the online methods' sampled
reward rises (by more than RISE_ERRORS standard errors between the first and last quarter). Each rule, its
reasoning and the chance a model that does not learn passes: docs/methods.md ("What each method's check holds it
to") and docs/metrics.md."""

import math
from collections.abc import Sequence

from bench.matrix.axes import Method
from bench.matrix.methods import LN2, LearningRule, method_spec
from bench.results.schema import Learning

FIRST_LOSS_TOLERANCE = {"fp32": 1e-3, "bf16": 2e-2, "fp16": 2e-2}
"""|first loss - expected| allowed, by compute precision. With policy == reference the two forward passes do the
same arithmetic; what differs is only reduction order (another kernel, another rank layout). On CPU in fp32 the
measured deviation is 0 to ~1e-7. The loss's slope at Δ=0 is β/2, so 1e-3 (fp32) still catches a reference
whose summed log-ratio is off by 2e-3/β nats per pair on average (0.02 nats at β = 0.1); the injected wrong
reference (BENCH_FAULT=wrong_reference) moves it by more than 0.01 (tests/integration/test_budget_and_learning.py).
bf16 logits carry ~3 significant digits, so a summed log-prob over a few hundred tokens can differ by ~0.1 nat
between two kernels: 2e-2."""
DECREASE_MARGIN = 0.03
"""The end loss must be below first - margin (fp32; other precisions: decrease_margin); the CPU workloads' learning
rates are set so that the decrease is several times this margin (measured in the committed runs)."""


def decrease_margin(precision: str) -> float:
    """The fall the end loss must exceed. A policy that does not learn reads ln 2 at every step up to the numerical
    deviation FIRST_LOSS_TOLERANCE allows, so its first loss can read ln 2 + tol and its end mean ln 2 - tol: a
    fall of 2 tol by arithmetic alone. fp32: 2e-3, far below DECREASE_MARGIN; bf16 and fp16 (GPU workloads):
    2 x 0.02 = 0.04, above it, so the margin there is 0.04."""
    return max(DECREASE_MARGIN, 2 * FIRST_LOSS_TOLERANCE[precision])


RISE_ERRORS = 2.0
"""Standard errors the reward's rise must exceed: one-sided, a policy that does not learn passes in 2.3 % of runs."""
EXPECTED_NAMES = {LN2: "ln 2", 0.5: "1/2"}


def end_steps(steps: int) -> int:
    """How many final steps the end loss averages (and, without an exact first loss, first steps the start)."""
    return max(3, steps // 4)


def mean_per_step(series: Sequence[Sequence[float]]) -> list[float]:
    """Mean over ranks of each step's loss, over the steps every rank recorded."""
    present = [s for s in series if s]
    if not present:
        return []
    steps = min(len(s) for s in present)
    return [sum(s[i] for s in present) / len(present) for i in range(steps)]


def quarter_means(values: Sequence[float]) -> tuple[float, float, float]:
    """(first-quarter mean, last-quarter mean, the floor their difference must exceed) of a per-step series, the
    quarters end_steps long: RISE_ERRORS x sqrt(s1²/n + s2²/n), s the sample standard deviation within each."""
    window = end_steps(len(values))
    head, tail = values[:window], values[-window:]
    spread = sum(_sample_variance(q) / len(q) for q in (head, tail))
    return sum(head) / len(head), sum(tail) / len(tail), RISE_ERRORS * math.sqrt(spread)


def _sample_variance(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / (len(values) - 1)


def reward_failures(rewards: Sequence[float | None]) -> list[str]:
    """Why an online method's sampled reward did not rise (empty: it did)."""
    if len(rewards) < 2 * end_steps(len(rewards)):
        return [f"{len(rewards)} step rewards were recorded: too few for a first and a last quarter"]
    if any(r is None or not math.isfinite(r) for r in rewards):
        return ["a step's sampled reward is not finite"]
    start, end, floor = quarter_means([float(r) for r in rewards if r is not None])
    if end - start > floor:
        return []
    window = end_steps(len(rewards))
    return [
        f"reward did not rise: {start:.4f} over the first {window} steps, {end:.4f} over the last {window}, a rise of "
        f"{end - start:.4f}, not above {floor:.4f} ({RISE_ERRORS:g} standard errors of the per-step spread)"
    ]


def accuracy_floor(pairs: int) -> float:
    """The pairwise accuracy a reward model must exceed: 1/2 + two standard errors of a coin flip, 1/sqrt(n)."""
    return 0.5 + 1.0 / math.sqrt(pairs)


def check(
    rank_losses: Sequence[Sequence[float | None]],
    reward_accuracies: Sequence[float | None],
    precision: str,
    method: Method | str = Method.DPO,
    pair_accuracy: float | None = None,
    pairs_evaluated: int | None = None,
    rewards: Sequence[float | None] = (),
    reward_parts: dict[str, list[float | None]] | None = None,
) -> Learning:
    """The learning check of one cell of `method`, from each rank's per-step losses (None: not finite, as JSON
    keeps it), the lead rank's reward accuracies and, for a reward model, its pairwise accuracy after training on
    `pairs_evaluated` training pairs; for an online method, the sampled reward of each generation (`rewards`) and
    each reward function's part of it."""
    rule = method_spec(method).learning
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
    window = end_steps(len(losses))
    tail = losses[-window:]
    end = sum(tail) / len(tail)
    failures += _first_loss_failures(rule, first, precision)
    start, start_text = first, "at step 1"
    if rule.first_loss is None:
        head = losses[:window]
        start, start_text = sum(head) / len(head), f"over the first {len(head)}"
    if rule.falls and math.isfinite(start) and math.isfinite(end) and not end < start - decrease_margin(precision):
        failures.append(
            f"loss did not fall: {start:.4f} {start_text}, {end:.4f} over the last {len(tail)} of {len(losses)} steps"
        )
    if rule.ranks_pairs:
        failures += _ranking_failures(pair_accuracy, pairs_evaluated)
    if rule.reward_rises:
        failures += reward_failures(rewards)
    return Learning(
        first_loss=_finite_or_none(first),
        last_loss=_finite_or_none(last),
        end_loss=_finite_or_none(end),
        start_loss=None if rule.first_loss is not None else _finite_or_none(start),
        expected_first_loss=rule.first_loss,
        reward_accuracy=reward_accuracies[-1] if reward_accuracies else None,
        pair_accuracy=pair_accuracy,
        pairs_evaluated=pairs_evaluated,
        losses=[round(v, 6) if math.isfinite(v) else None for v in losses],
        rewards=[None if r is None else round(r, 6) for r in rewards],
        reward_parts={k: [None if r is None else round(r, 6) for r in v] for k, v in (reward_parts or {}).items()},
        failures=failures,
    )


def _first_loss_failures(rule: LearningRule, first: float, precision: str) -> list[str]:
    """Why the first step's loss is not the method's exact one (none where the method has none)."""
    tolerance = FIRST_LOSS_TOLERANCE[precision]
    if rule.first_loss is None or not math.isfinite(first) or abs(first - rule.first_loss) <= tolerance:
        return []
    name = EXPECTED_NAMES.get(rule.first_loss, f"{rule.first_loss:g}")
    expected = f"{name} = {rule.first_loss:.4f} (±{tolerance:g})"
    return [f"first-step loss {first:.4f} is not {expected}: {rule.first_loss_meaning}"]


def _ranking_failures(accuracy: float | None, pairs: int | None) -> list[str]:
    if accuracy is None or not pairs:
        return ["no pairwise accuracy was measured after training"]
    floor = accuracy_floor(pairs)
    if accuracy > floor:
        return []
    return [
        f"pairwise accuracy {accuracy:.3f} on {pairs} training pairs is not above {floor:.3f} "
        "(1/2 + two standard errors of chance): the reward model did not learn to rank chosen over rejected"
    ]


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None
