import pytest

from bench.errors import BenchError
from bench.estimate.speed.bounds import figures, llama_shape
from bench.estimate.speed.mfu_sources import mfu_file

ROW = """
  - id: "a row"
    url: https://example.org
    figure: "1000 tokens/s"
    stack: a stack
    kind: {method: sft, adapter: full, backend: single, gpu: A100-80G, size: small}
"""
MODELS = """models:
  tiny: {hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4,
         num_key_value_heads: 2, vocab_size: 100}
figures:
"""


def write(tmp_path, body: str):
    path = tmp_path / "mfu.yaml"
    path.write_text(MODELS + ROW + body, encoding="utf-8")
    return path


def test_every_committed_figure_reads_and_names_its_source():
    # Qwen-7B's two tables of six lengths, Answer.AI's eight rows on two RTX 3090s or 4090s
    assert len(figures()) == len(mfu_file().figures) + 12 + 8
    assert all(f.url.startswith("https://") and f.mfu > 0 for f in figures())
    # a figure above its own card's achievable matmul fraction is kept as data, never as a bound (torchtune's A6000
    # rows); its RTX 4090 LoRA row (91 %) stays under that card's measured 105 %
    assert all(f.hfu < 1.1 for f in figures() if f.comparable)
    assert {f.id for f in figures() if not f.comparable} == {
        "torchtune: full, 1x A6000",
        "torchtune: LoRA, 1x A6000",
    }
    assert next(f for f in figures() if f.id == "torchtune: LoRA, 1x RTX 4090").generation == "ada"


def test_a_row_gives_exactly_one_of_throughput_and_stated(tmp_path):
    with pytest.raises(BenchError, match="a row: give exactly one of throughput and stated"):
        mfu_file(write(tmp_path, ""))
    run = "{tokens_per_s_per_gpu: 1, model: tiny, seq_len: 8, peak_tflops: 1, checkpointing: false}"
    both = f"    stated: {{mfu_percent: 40}}\n    throughput: {run}\n"
    with pytest.raises(BenchError, match="exactly one"):
        mfu_file(write(tmp_path, both))


def test_an_unknown_model_is_a_one_line_error(tmp_path):
    body = "    throughput: {tokens_per_s_per_gpu: 1, model: huge, seq_len: 8, peak_tflops: 1, checkpointing: false}\n"
    with pytest.raises(BenchError, match="unknown model 'huge'"):
        mfu_file(write(tmp_path, body))


def test_llama_shape_counts_the_grouped_query_projections(tmp_path):
    config = mfu_file(write(tmp_path, "    stated: {mfu_percent: 40}\n")).models["tiny"]
    shape = llama_shape(config)
    # per layer: q and o 64x64 each, k and v 64x32 each (2 of 4 heads), three 64x128 SwiGLU matrices; the head 100x64
    assert shape.matmul_params == 2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128) + 100 * 64


def test_answerai_rows_are_tokens_per_card_from_the_stated_seconds():
    """1,024 samples of 2,048 tokens over two cards in 881 s: 1,190 tokens/s per card, 0.72 of the 3090's 71."""
    row = next(f for f in figures() if f.id.endswith("2x RTX 3090, LoRA, DDP, batch 4"))
    assert (row.adapter, row.backend, row.gpu, row.generation) == ("lora", "data_parallel", "RTX-3090", "ampere")
    shape = llama_shape(mfu_file().models["llama-2-7b"])
    assert row.mfu == pytest.approx(1024 * 2048 / 881 / 2 * (6 * shape.matmul_params + 12 * 32 * 4096 * 2048) / 71e12)
    assert row.comparable
