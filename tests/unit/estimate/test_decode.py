"""The online methods' generation time: decode memory-bound (weights and the KV cache so far read per step),
prefill compute-bound, transformers' launches per layer and step; a step carries its share of a generation."""

import pytest

from bench.advise.target import TargetRequest, resolve_target
from bench.estimate.speed import decode
from bench.estimate.speed.cell_speeds import speeds_for


def test_decode_reads_the_weights_and_the_kv_cache_so_far_each_step():
    d = decode.Decode(
        completions=8,
        prompt_tokens=100,
        completion_tokens=10,
        weight_bytes=1e9,
        kv_bytes_per_token=1e3,
        prefill_flops_per_token=2e9,
    )
    # 10 steps x 1 GB of weights + 1 kB x 8 completions x (10 x 100 + 10 x 9 / 2 tokens so far)
    assert decode.decode_bytes(d) == pytest.approx(10 * 1e9 + 1e3 * 8 * (1000 + 45))
    seconds = decode.generation_seconds(d, memory_bytes_s=1e12, matmul_flops_s=1e14, layer_launch_s=1e-3)
    assert seconds["decode"] == pytest.approx((10e9 + 8.36e6) / 1e12)
    assert seconds["prefill"] == pytest.approx(8 * 100 * 2e9 / 1e14)
    assert seconds["decode_launches"] == pytest.approx(10 * 1e-3)
    assert decode.per_step(seconds, 4)["generation_decode"] == pytest.approx(seconds["decode"] / 4)


def test_online_cells_have_a_speed_and_vllm_is_faster_than_transformers_generate():
    profile, workload = resolve_target(TargetRequest(gpu="H100:1", model="qwen2.5-7b"))
    ids = ["grpo-one_adapter-none-single", "grpo-one_adapter-none-single+vllm"]
    speeds = speeds_for(profile, workload, ids)
    plain, vllm = (speeds[i] for i in ids)
    assert plain.status == vllm.status == "predicted"
    assert "generation_decode_launches" in plain.terms and "generation_decode_launches" not in vllm.terms
    assert vllm.tokens_per_s > plain.tokens_per_s
    # C = 1,024 steps each read the 15.23 GB of weights, and the KV cache so far of g = 8 completions of a P = 2,048
    # token prompt (57,344 bytes per token), at 3.35 TB/s; one generation serves 8 steps
    read = 1024 * 15.23e9 + 57_344 * 8 * (1024 * 2048 + 1024 * 1023 / 2)
    assert plain.terms["generation_decode"] == pytest.approx(read / 3.35e12 / 8, rel=0.01)
