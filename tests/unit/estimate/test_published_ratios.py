"""The published speed ratios (bench/estimate/speed/published_ratios.py): pairs found by id, ratios both ways."""

from dataclasses import dataclass

import pytest

from bench.estimate.speed import published_ratios


@dataclass(frozen=True)
class _Row:
    id: str
    measured_tokens_per_s: float
    predicted_tokens_per_s: float


def test_each_qlora_row_pairs_with_its_lora_twin_and_nothing_else():
    rows = [
        _Row("qwen7b-lora-a100: seq 256", 1700.0, 1600.0),
        _Row("qwen7b-qlora-a100: seq 256", 680.0, 800.0),
        _Row("qwen7b-qlora-a100: seq 512", 1300.0, 1300.0),  # no LoRA twin: no pair
        _Row("tt: LoRA, 1x RTX 4090", 3000.0, 2000.0),
        _Row("tt: QLoRA, 1x RTX 4090", 2400.0, 1800.0),
        _Row("tt: full, 1x RTX 4090", 1650.0, 1650.0),
    ]
    pairs = published_ratios.qlora_pairs(rows)
    assert [(p.fast, p.slow) for p in pairs] == [
        ("qwen7b-lora-a100: seq 256", "qwen7b-qlora-a100: seq 256"),
        ("tt: LoRA, 1x RTX 4090", "tt: QLoRA, 1x RTX 4090"),
    ]
    assert pairs[0].measured == pytest.approx(2.5)
    assert pairs[0].predicted == pytest.approx(2.0)
    assert pairs[0].error == pytest.approx(-0.2)
    assert published_ratios.within(rows) == 5  # all but 2000/3000 (-33 %); 1800/2400 is -25 %, on the line


def test_an_offload_row_pairs_with_the_same_sources_row_without_it_whatever_the_batch():
    rows = [
        _Row("aa: 2x RTX 4090, LoRA, FSDP, batch 6", 2180.0, 2237.0),
        _Row("aa: 2x RTX 4090, LoRA, FSDP + CPU offload, batch 10", 2175.0, 2074.0),
        _Row("aa: 2x RTX 4090, QLoRA, FSDP + CPU offload, batch 12", 2260.0, 2162.0),  # no plain QLoRA row: no pair
        _Row("bb: 2x RTX 4090, LoRA, FSDP, batch 6", 1000.0, 1000.0),  # another source: not a twin
    ]
    pairs = published_ratios.offload_pairs(rows)
    assert [(p.fast, p.slow) for p in pairs] == [
        ("aa: 2x RTX 4090, LoRA, FSDP, batch 6", "aa: 2x RTX 4090, LoRA, FSDP + CPU offload, batch 10")
    ]
    assert pairs[0].measured == pytest.approx(2180 / 2175)
    assert pairs[0].predicted == pytest.approx(2237 / 2074)
