"""What the caching allocator keeps reserved over steps of varying length (bench/estimate/gpu_terms.py
`earlier_records`, bench/estimate/length_spread.py)."""

import math
import random

import pytest

from bench.estimate import gpu_terms
from bench.estimate.knobs import Knobs
from bench.estimate.length_spread import LengthSpread, synthetic_spread
from bench.estimate.predict import predict_cell
from bench.matrix.axes import Backend, Init, Quant
from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.matrix.profiles import load_profile, load_workload
from bench.units import MiB

SPREAD = LengthSpread(mean=3234.4, sd=2547.5, rows=4959)
"""swift's benchmark data as its docs state it (scenarios/published/setups.yaml, ms-swift-benchmark-a100)."""


def table(max_tokens: int, width: int = 1, per_token: float = 1.0) -> list[tuple[int, float]]:
    return [(n, n * per_token) for n in range(width, max_tokens, width)] + [(max_tokens, max_tokens * per_token)]


def drawn(spread: LengthSpread, max_tokens: int, rows_per_step: int, trials: int) -> float:
    """The same expectation drawn: rows dropped above max_length, shuffled, padded per step, each new longest
    length's tokens summed, the last left out."""
    rng = random.Random(7)
    s2 = math.log(1 + (spread.sd / spread.mean) ** 2)
    mu, sigma = math.log(spread.mean) - s2 / 2, s2**0.5
    total = 0.0
    for _ in range(trials):
        rows = [x for x in (rng.lognormvariate(mu, sigma) for _ in range(spread.rows)) if x <= max_tokens]
        longest, records = 0, []
        for i in range(0, len(rows), rows_per_step):
            step = math.ceil(max(rows[i : i + rows_per_step]))
            if step > longest:
                longest = step
                records.append(step)
        total += sum(records[:-1])
    return total / trials


def test_the_records_of_uniform_lengths_are_the_harmonic_sum(monkeypatch):
    # one row a step, lengths uniform on 1..1000: step t sets a record worth E[X_t; X_t > the maximum before] =
    # 1/(t+1) of the range, the last record being the maximum, n/(n+1)
    steps = 50
    spread = LengthSpread(mean=500.0, sd=1.0, rows=steps, over_max="truncate")
    monkeypatch.setattr(gpu_terms, "_row_cdf", lambda _: lambda x: min(1.0, x / 1000))
    got = gpu_terms.earlier_records(spread, 1, table(1000, per_token=1 / 1000))
    expected = sum(1 / (t + 1) for t in range(1, steps + 1)) - steps / (steps + 1)
    assert got == pytest.approx(expected, rel=0.01)


@pytest.mark.parametrize(("max_tokens", "rows", "per_step"), [(1024, 4959, 1), (8192, 1000, 1), (2048, 4959, 4)])
def test_the_expectation_matches_drawn_runs(max_tokens, rows, per_step):
    spread = SPREAD.model_copy(update={"rows": rows})
    expected = gpu_terms.earlier_records(spread, per_step, table(max_tokens))
    assert expected == pytest.approx(drawn(spread, max_tokens, per_step, trials=60), rel=0.15)
    assert expected > max_tokens  # more than one earlier record


def test_rows_of_one_length_or_a_transient_that_stops_growing_leave_nothing():
    cut = LengthSpread(mean=100_000.0, sd=10.0, rows=500, over_max="truncate")  # every row cut to max_length
    assert gpu_terms.earlier_records(cut, 1, table(2048)) == pytest.approx(0.0, abs=1e-6)
    assert gpu_terms.earlier_records(SPREAD, 1, [(2048, 5.0)]) == 0.0  # one class
    capped = [(n, min(n, 16)) for n in range(1, 2049)]  # a head tile full from 16 tokens on
    assert gpu_terms.earlier_records(SPREAD, 1, capped) < 16


def test_a_class_is_the_lengths_one_2_mib_segment_serves():
    # Qwen's bf16 logits: 151,936 x 2 bytes a token; 2 MiB holds 7 tokens of one [1, L, V] tensor
    assert gpu_terms.length_buckets(151936 * 2, 2048)[:2] == [7, 14]
    assert gpu_terms.length_buckets(151936 * 2, 2048)[-1] == 2048
    assert gpu_terms.length_buckets(64 * MiB, 2048) == list(range(1, 2049))
    assert len(gpu_terms.length_buckets(64 * MiB, 10 * gpu_terms.GRID_POINTS)) == gpu_terms.GRID_POINTS
    wide = gpu_terms.earlier_records(SPREAD, 1, table(2048, 7))
    assert wide < gpu_terms.earlier_records(SPREAD, 1, table(2048))  # a wider class reuses more


def test_a_spread_raises_reserved_and_nvidia_smi_not_allocated():
    launcher = backend_spec(Backend.SINGLE).default_launcher
    cell = Cell(init=Init.ONE_ADAPTER, quant=Quant.NONE, backend=Backend.SINGLE, launcher=launcher)
    profile, workload = load_profile("1xH100"), load_workload("phi-2")
    fixed = predict_cell(cell, profile, workload, knobs=Knobs(loss="full"))
    varying = predict_cell(cell, profile, workload, knobs=Knobs(loss="full", length_spread=SPREAD))
    assert varying.train_bytes == fixed.train_bytes
    assert varying.reserved_bytes > fixed.reserved_bytes
    assert varying.nvidia_smi_bytes - fixed.nvidia_smi_bytes == pytest.approx(
        varying.reserved_bytes - fixed.reserved_bytes
    )
    expandable = Knobs(loss="full", length_spread=SPREAD, expandable_segments=True)
    assert predict_cell(cell, profile, workload, knobs=expandable).reserved_bytes < fixed.reserved_bytes
    # a failed cudaMalloc releases the cached segments: never more than the card beside what is held outside it
    small = profile.model_copy(update={"memory_per_device_gb": (fixed.nvidia_smi_bytes + 1e9) / 1e9})
    bounded = predict_cell(cell, small, workload, knobs=Knobs(loss="full", length_spread=SPREAD))
    assert varying.nvidia_smi_bytes > small.memory_per_device_gb * 1e9
    assert bounded.nvidia_smi_bytes == pytest.approx(small.memory_per_device_gb * 1e9)
    assert bounded.train_bytes == fixed.train_bytes


def test_a_synthetic_row_is_a_prompt_and_an_answer_of_their_stated_medians():
    # bench/assets/synthetic_prefs.py draws each as median x LogNormal(0, sigma); their sum's moments, drawn
    rng = random.Random(3)
    sums = [128 * rng.lognormvariate(0, 0.9) + 320 * rng.lognormvariate(0, 0.9) for _ in range(200_000)]
    spread = synthetic_spread(128, 320, 0.9, rows=1000, steps=30)
    mean = sum(sums) / len(sums)
    assert spread.mean == pytest.approx(mean, rel=0.01)
    assert spread.sd == pytest.approx((sum((x - mean) ** 2 for x in sums) / len(sums)) ** 0.5, rel=0.05)
    assert (spread.over_max, spread.steps) == ("truncate", 30)
