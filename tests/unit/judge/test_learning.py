import math

import pytest

from bench.judge.learning import DECREASE_MARGIN, FIRST_LOSS_TOLERANCE, LN2, check, decrease_margin, mean_per_step

FALLING = [LN2, 0.65, 0.6, 0.5]


def test_a_cell_that_learned_passes_and_reports_first_last_and_accuracy():
    learning = check([FALLING, FALLING], [0.0, 0.5, 0.75, 1.0], "fp32")
    assert learning.failures == []
    assert learning.first_loss == pytest.approx(LN2) and learning.last_loss == pytest.approx(0.5)
    assert learning.reward_accuracy == 1.0 and len(learning.losses) == 4


def test_the_loss_is_the_mean_over_ranks_of_each_step():
    assert mean_per_step([[1.0, 2.0, 3.0], [3.0, 4.0]]) == [2.0, 3.0]


@pytest.mark.parametrize("bad", [math.nan, math.inf, None])
def test_a_non_finite_loss_fails_and_names_the_step_and_rank(bad):
    learning = check([FALLING, [LN2, 0.6, bad, 0.4]], [1.0], "fp32")
    assert learning.failures == ["non-finite loss (first at step 3 on rank 1)"]
    assert learning.losses[2] is None


def test_a_first_loss_away_from_ln2_means_a_wrong_reference():
    shifted = [LN2 + 2 * FIRST_LOSS_TOLERANCE["fp32"], 0.5, 0.4]
    learning = check([shifted], [1.0], "fp32")
    assert len(learning.failures) == 1 and "reference is not the initial policy" in learning.failures[0]


def test_the_first_loss_tolerance_depends_on_precision():
    near = [LN2 + 0.01, 0.5]
    assert check([near], [1.0], "fp32").failures and not check([near], [1.0], "bf16").failures


def test_a_loss_that_does_not_fall_beyond_the_margin_fails():
    flat = [LN2, LN2, LN2, LN2 - DECREASE_MARGIN / 2]
    end = LN2 - DECREASE_MARGIN / 6
    assert check([flat], [0.0], "fp32").failures == [
        f"loss did not fall: {LN2:.4f} at step 1, {end:.4f} over the last 3 of 4 steps"
    ]


def test_one_lucky_or_unlucky_last_batch_does_not_decide():
    unlucky_last = [LN2, 0.6, 0.5, 0.4, 0.4, 0.3, 0.35, 0.9]
    lucky_last = [LN2] * 11 + [0.65]
    assert check([unlucky_last], [1.0], "fp32").failures == []
    assert check([lucky_last], [1.0], "fp32").failures[0].startswith("loss did not fall")


def test_no_recorded_loss_is_a_failure_not_a_pass():
    learning = check([[], []], [], "fp32")
    assert learning.failures == ["no training loss was recorded"] and learning.first_loss is None


def test_in_bf16_the_numerics_alone_cannot_pass_for_learning():
    """A bf16 policy that does not learn: every loss is ln 2 up to the first-loss tolerance (here +0.019 at step
    1, -0.019 after), a fall of 0.038 that beats fp32's margin by arithmetic alone. The bf16 margin, twice the
    tolerance, refuses it; a real fall beyond it passes."""
    tolerance = FIRST_LOSS_TOLERANCE["bf16"]
    assert decrease_margin("bf16") == decrease_margin("fp16") == pytest.approx(2 * tolerance) == pytest.approx(0.04)
    assert decrease_margin("fp32") == DECREASE_MARGIN
    noise_only = [LN2 + 0.019] + [LN2 - 0.019] * 19
    assert (LN2 + 0.019) - (LN2 - 0.019) > DECREASE_MARGIN
    assert check([noise_only], [0.5], "bf16").failures[0].startswith("loss did not fall")
    learned = [LN2 + 0.019] + [LN2 - 0.07] * 19
    assert check([learned], [1.0], "bf16").failures == []
