"""The model-state terms agree with DeepSpeed's own estimators where their assumptions hold: every parameter
trainable, 16-bit parameters + fp32 Adam, N GPUs, no offload (and ZeRO-3 optimizer offload without param offload)."""

import pytest

from bench.estimate import terms

CASES = [
    (1_000_000, 10_000, 1),
    (7_000_000_000, 131_072_000, 8),
    (2_779_683_840, 131_123_200, 2),
    (46_702_792_704, 1_409_286_144, 8),
    (123_456_789, 4_567_890, 3),
]


@pytest.mark.parametrize(("params", "largest", "gpus"), CASES)
def test_zero2_matches_deepspeed(params, largest, gpus):
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    _, gpu = estimate_zero2_model_states_mem_needs(params, num_gpus_per_node=gpus, cpu_offload=False)
    ours = terms.zero2_model_states(2 * params, params, 2, gpus)
    assert ours == pytest.approx(gpu, abs=1)


@pytest.mark.parametrize(("params", "largest", "gpus"), CASES)
def test_zero3_matches_deepspeed(params, largest, gpus):
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs

    _, gpu, _ = estimate_zero3_model_states_mem_needs(params, largest, num_gpus_per_node=gpus, cpu_offload=False)
    assert terms.zero3_model_states(2 * params, params, gpus, largest, 2) == pytest.approx(gpu, abs=1)
    _, gpu_off, _ = estimate_zero3_model_states_mem_needs(
        params, largest, num_gpus_per_node=gpus, cpu_offload=True, cpu_offload_params=False
    )
    assert terms.zero3_model_states(2 * params, params, gpus, largest, 2, offload=True) == pytest.approx(gpu_off, abs=1)
