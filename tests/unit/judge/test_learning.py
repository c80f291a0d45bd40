import math

import pytest

from bench.judge.learning import (
    DECREASE_MARGIN,
    FIRST_LOSS_TOLERANCE,
    LN2,
    check,
    decrease_margin,
    mean_per_step,
    quarter_means,
)

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


# The thresholds pinned from both sides with literal values, never from the constants themselves: a test built from
# DECREASE_MARGIN or FIRST_LOSS_TOLERANCE passes whatever they are set to.
@pytest.mark.parametrize(
    ("precision", "inside", "outside"),
    [
        # fp32: policy == reference does the same arithmetic (measured deviation below 1e-7); 1e-3 is the
        # documented bound, so 0.0008 is accepted and 0.0012 (a reference off by 0.024 nats per pair at β = 0.1) not
        ("fp32", 0.0008, 0.0012),
        # bf16/fp16: 2e-2 for kernels that sum a few hundred bf16 log-probs in another order
        ("bf16", 0.016, 0.024),
        ("fp16", 0.016, 0.024),
    ],
)
def test_first_loss_tolerance_by_precision(precision, inside, outside):
    for sign in (1, -1):
        assert check([[LN2 + sign * inside, 0.5, 0.4]], [1.0], precision).failures == []
        failures = check([[LN2 + sign * outside, 0.5, 0.4]], [1.0], precision).failures
        assert len(failures) == 1 and "the reference is not the initial policy" in failures[0]


def test_the_loss_must_fall_by_more_than_three_hundredths():
    # the end loss is the mean of the last 3 steps; a fall of 0.036 passes, 0.024 does not
    assert check([[LN2, LN2 - 0.036, LN2 - 0.036, LN2 - 0.036]], [1.0], "fp32").failures == []
    failures = check([[LN2, LN2 - 0.024, LN2 - 0.024, LN2 - 0.024]], [1.0], "fp32").failures
    assert failures == [f"loss did not fall: {LN2:.4f} at step 1, {LN2 - 0.024:.4f} over the last 3 of 4 steps"]


def test_the_end_loss_averages_the_last_quarter_of_the_steps_and_at_least_three():
    from bench.judge.learning import end_steps

    assert [end_steps(n) for n in (1, 4, 12, 15, 16, 40)] == [3, 3, 3, 3, 4, 10]


def test_the_record_keeps_the_end_loss_and_every_step_rounded_to_six_digits():
    learning = check([[LN2, 0.123456789, 0.5, 0.4]], [], "fp32")
    assert learning.end_loss == pytest.approx((0.123456789 + 0.5 + 0.4) / 3)
    assert learning.losses == [0.693147, 0.123457, 0.5, 0.4]
    assert learning.reward_accuracy is None  # TRL logged none


def test_a_non_finite_first_loss_is_recorded_as_none():
    learning = check([[math.nan, 0.5, 0.4]], [1.0], "fp32")
    assert (learning.first_loss, learning.end_loss) == (None, None)
    assert learning.failures == ["non-finite loss (first at step 1 on rank 0)"]


# --- every other method's rule (MethodSpec.learning) ---


def test_kto_starts_at_one_half_and_a_wrong_reference_moves_it():
    assert check([[0.5, 0.49, 0.45, 0.4]], [], "fp32", "kto").failures == []
    wrong = check([[0.5 + 2 * FIRST_LOSS_TOLERANCE["fp32"], 0.45, 0.4, 0.3]], [], "fp32", "kto")
    assert wrong.failures == [
        "first-step loss 0.5020 is not 1/2 = 0.5000 (±0.001): the reference is not the initial policy"
    ]
    assert wrong.expected_first_loss == 0.5


def test_a_method_without_an_exact_first_loss_is_judged_from_its_first_quarter():
    # SFT: the first step's value depends on its batch; one batch 0.06 above a flat run would pass against step 1
    lucky_first = [6.26] + [6.2] * 11
    learning = check([lucky_first], [], "fp32", "sft")
    assert learning.failures == ["loss did not fall: 6.2200 over the first 3, 6.2000 over the last 3 of 12 steps"]
    assert learning.start_loss == pytest.approx(6.22) and learning.expected_first_loss is None
    falling = [6.3, 6.25, 6.2, 6.1, 6.0, 5.9, 5.9, 5.8, 5.8, 5.7, 5.7, 5.6]
    assert check([falling], [], "fp32", "orpo").failures == [] and check([falling], [], "fp32", "simpo").failures == []
    assert check([[6.3, 6.3, 6.3, 6.3]], [], "fp32", "sft").failures[0].startswith("loss did not fall")


def test_the_reward_model_starts_at_ln2_and_must_rank_its_training_pairs_above_chance():
    noisy = [LN2, 0.7, 0.75, 0.68]  # the pairwise loss need not fall: the ranking is the check
    assert check([noisy], [], "fp32", "reward", pair_accuracy=0.78, pairs_evaluated=128).failures == []
    floor = 0.5 + 1 / 128**0.5  # 0.588: two standard errors of a coin flip over 128 pairs
    assert check([noisy], [], "fp32", "reward", pair_accuracy=floor, pairs_evaluated=128).failures == [
        "pairwise accuracy 0.588 on 128 training pairs is not above 0.588 (1/2 + two standard errors of chance): "
        "the reward model did not learn to rank chosen over rejected"
    ]
    constant_head = check([[LN2] * 4], [], "fp32", "reward", pair_accuracy=0.0, pairs_evaluated=128)
    assert len(constant_head.failures) == 1 and "pairwise accuracy 0.000" in constant_head.failures[0]
    assert check([noisy], [], "fp32", "reward").failures == ["no pairwise accuracy was measured after training"]
    head_not_zero = check([[0.8, 0.7, 0.6, 0.5]], [], "fp32", "reward", pair_accuracy=0.9, pairs_evaluated=128)
    assert head_not_zero.failures == [
        "first-step loss 0.8000 is not ln 2 = 0.6931 (±0.001): the reward head did not start at zero"
    ]


def test_the_wrong_reference_message():
    assert check([[0.7, 0.5, 0.4]], [1.0], "fp32").failures == [
        "first-step loss 0.7000 is not ln 2 = 0.6931 (±0.001): the reference is not the initial policy"
    ]


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


def test_the_reward_models_accuracy_and_pair_count_are_recorded():
    learning = check([[LN2, 0.7, 0.68]], [], "fp32", "reward", pair_accuracy=0.78, pairs_evaluated=128)
    assert (learning.pair_accuracy, learning.pairs_evaluated) == (0.78, 128)


def test_an_accuracy_over_no_pairs_was_not_measured():
    # 0 pairs: no floor to hold it against (1/sqrt(0)), whatever the accuracy reads
    for pairs in (0, None):
        learning = check([[LN2, 0.7, 0.68]], [], "fp32", "reward", pair_accuracy=0.9, pairs_evaluated=pairs)
        assert learning.failures == ["no pairwise accuracy was measured after training"]


def test_a_method_with_an_exact_first_loss_starts_there_and_records_no_start_mean():
    learning = check([[LN2, 0.5, 0.4, 0.3]], [], "fp32", "dpo")
    assert learning.start_loss is None and learning.expected_first_loss == pytest.approx(LN2)


def test_an_expected_first_loss_without_a_name_is_printed_as_its_value(monkeypatch):
    from dataclasses import replace

    from bench.matrix.axes import Method
    from bench.matrix.methods import METHODS, LearningRule

    rule = LearningRule(0.25, "the reference is not the initial policy")
    monkeypatch.setitem(METHODS, Method.SFT, replace(METHODS[Method.SFT], learning=rule))
    assert check([[0.3, 0.2, 0.1]], [], "fp32", "sft").failures == [
        "first-step loss 0.3000 is not 0.25 = 0.2500 (±0.001): the reference is not the initial policy"
    ]


def test_an_online_method_passes_when_its_reward_rises_beyond_its_noise():
    rewards = [0.5, 0.4, 0.6, 0.5, 0.55, 0.6, 0.7, 0.8, 0.9, 0.85, 0.95, 0.9]
    result = check([[0.01] * len(rewards)], [], "fp32", "grpo", rewards=rewards)
    assert result.failures == [] and result.rewards == rewards


def test_the_rise_floor_is_two_standard_errors_of_the_quarter_means_by_hand():
    # quarters of 3: first 0.4, 0.5, 0.6 (mean 0.5, sample variance 0.01), last 0.6, 0.7, 0.8 (mean 0.7, 0.01)
    start, end, floor = quarter_means([0.4, 0.5, 0.6, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8])
    assert (start, end) == pytest.approx((0.5, 0.7))
    assert floor == pytest.approx(2 * math.sqrt(0.01 / 3 + 0.01 / 3))


def test_a_reward_that_only_wanders_fails_and_a_loss_that_does_not_fall_is_not_held_against_it():
    rewards = [0.5, 0.7, 0.3, 0.6, 0.4, 0.5, 0.6, 0.4, 0.5, 0.7, 0.3, 0.6]
    result = check([[0.0] * len(rewards)], [], "fp32", "rloo", rewards=rewards)
    assert len(result.failures) == 1 and result.failures[0].startswith("reward did not rise")


def test_a_constant_reward_fails_and_missing_rewards_fail():
    assert check([[0.0] * 8], [], "fp32", "grpo", rewards=[0.5] * 8).failures[0].startswith("reward did not rise")
    assert "too few" in check([[0.0] * 8], [], "fp32", "grpo").failures[0]


# --- the online methods' reward check, exactly ---


def test_a_reward_check_needs_a_first_and_a_last_quarter_of_at_least_three_steps():
    six = [0.1, 0.1, 0.1, 0.9, 0.9, 0.9]  # two disjoint quarters of 3: enough
    assert check([[0.0] * 6], [], "fp32", "grpo", rewards=six).failures == []
    assert check([[0.0] * 5], [], "fp32", "grpo", rewards=six[1:]).failures == [
        "5 step rewards were recorded: too few for a first and a last quarter"
    ]


@pytest.mark.parametrize("bad", [None, math.nan, math.inf])
def test_a_non_finite_step_reward_fails_the_reward_check(bad):
    rewards = [0.1, 0.1, 0.1, 0.9, bad, 0.9]
    result = check([[0.0] * 6], [], "fp32", "rloo", rewards=rewards)
    assert result.failures == ["a step's sampled reward is not finite"]


def test_the_reward_failure_names_both_quarters_the_rise_and_its_floor():
    # first 0.4, 0.5, 0.6 (mean 0.5, variance 0.01), last 0.4, 0.6, 0.8 (mean 0.6, variance 0.04):
    # a rise of 0.1 against 2 x sqrt(0.01/3 + 0.04/3) = 0.2582
    rewards = [0.4, 0.5, 0.6, 0.5, 0.5, 0.5, 0.4, 0.6, 0.8]
    assert check([[0.0] * 9], [], "fp32", "grpo", rewards=rewards).failures == [
        "reward did not rise: 0.5000 over the first 3 steps, 0.6000 over the last 3, a rise of 0.1000, not above "
        "0.2582 (2 standard errors of the per-step spread)"
    ]


def test_the_reward_quarters_are_a_quarter_of_the_steps():
    assert check([[0.0] * 16], [], "fp32", "grpo", rewards=[0.5] * 16).failures == [
        "reward did not rise: 0.5000 over the first 4 steps, 0.5000 over the last 4, a rise of 0.0000, not above "
        "0.0000 (2 standard errors of the per-step spread)"
    ]


def test_an_online_method_reports_a_non_finite_loss_and_a_flat_reward_both():
    result = check([[0.0, math.nan, 0.0, 0.0, 0.0, 0.0]], [], "fp32", "grpo", rewards=[0.5] * 6)
    assert result.failures == [
        "non-finite loss (first at step 2 on rank 0)",
        "reward did not rise: 0.5000 over the first 3 steps, 0.5000 over the last 3, a rise of 0.0000, not above "
        "0.0000 (2 standard errors of the per-step spread)",
    ]


def test_the_record_keeps_each_reward_and_each_reward_functions_part_rounded_to_six_digits():
    rewards = [0.1234567, 0.1, 0.1, 0.9, 0.9, 0.9]
    parts = {"accuracy": [0.1234567, None, 0.1, 0.9, 0.9, 0.9], "format": [0.0] * 6}
    result = check([[0.0] * 6], [], "fp32", "grpo", rewards=rewards, reward_parts=parts)
    assert result.rewards == [0.123457, 0.1, 0.1, 0.9, 0.9, 0.9]
    assert result.reward_parts == {"accuracy": [0.123457, None, 0.1, 0.9, 0.9, 0.9], "format": [0.0] * 6}
    assert check([[0.0] * 6], [], "fp32", "grpo", rewards=rewards).reward_parts == {}


# --- a non-finite loss at one end is reported once, never as a loss that did not fall ---


def test_a_non_finite_first_loss_with_a_finite_end_is_not_a_loss_that_did_not_fall():
    learning = check([[math.nan] + [0.6] * 6], [1.0], "fp32")
    assert learning.failures == ["non-finite loss (first at step 1 on rank 0)"]
    assert (learning.first_loss, learning.end_loss) == (None, pytest.approx(0.6))


def test_a_non_finite_last_loss_with_a_finite_start_is_not_a_loss_that_did_not_fall():
    learning = check([[LN2, LN2, LN2, LN2, math.inf]], [1.0], "fp32")
    assert learning.failures == ["non-finite loss (first at step 5 on rank 0)"]
    assert (learning.first_loss, learning.last_loss, learning.end_loss) == (pytest.approx(LN2), None, None)
