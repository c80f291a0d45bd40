"""validate-estimate --published: every published figure is predicted, each source is kept, a row beyond 15 % says
why (a missing reason shows), and the max-context search finds the edge of the prediction itself."""

import shutil

import pytest
import yaml

from bench.estimate import published


@pytest.fixture(scope="module")
def rows():
    return published.published_rows()


def test_every_published_figure_is_predicted(rows):
    figures = sum(len(entry["figures"]) for entry in published.load_entries())
    assert len(rows) == figures >= 20
    assert all(r.predicted is not None and r.error is not None for r in rows)
    assert {r.kind for r in rows} >= {"peak_allocated", "unspecified", "max_context"}


def test_every_entry_names_its_source():
    entries = published.load_entries()
    ids = {e["id"] for e in entries}
    shared = {"qwen7b-lora-a100", "unsloth-hf-fa2-llama31-8b-qlora-context", "torchtune-llama31-8b-single-device"}
    assert shared < ids  # the shared file's entries, and further sources
    assert all(e.get("source") and e.get("figures") for e in entries)


def test_every_row_beyond_15_percent_has_its_reason(rows):
    beyond = [r for r in rows if abs(r.error) > published.LIMIT]
    assert [f"{r.source_id} {r.label}" for r in beyond if not r.reason] == []
    assert "no reason recorded" not in published.to_markdown(rows)


def _copy(tmp_path) -> list[dict]:
    shutil.copy(published.PUBLISHED_DIR / "memory.yaml", tmp_path / "memory.yaml")
    return yaml.safe_load((published.PUBLISHED_DIR / "setups.yaml").read_text())


def test_a_row_set_aside_by_its_source_is_shown_apart_and_left_out_of_the_ranges(tmp_path):
    setups = _copy(tmp_path)
    qwen = next(s for s in setups if s["id"] == "qwen7b-lora-a100")
    qwen["rows"] = [{"comparable": False, "source_reason": "the figure includes the evaluation"}]
    (tmp_path / "setups.yaml").write_text(yaml.safe_dump(setups))
    rows = published.published_rows(tmp_path)
    apart = [r for r in rows if not r.comparable]
    assert [r.reason for r in apart] == ["the figure includes the evaluation"]
    table = published.to_markdown(rows)
    assert table.count("not comparable:") == 1 and "(1 not comparable)" in table
    assert sum(map(len, published.errors_by_kind(rows).values())) == len(rows) - 1


def test_a_row_set_aside_without_the_sources_words_is_refused():
    with pytest.raises(ValueError, match="source_reason"):
        published.RowSetup.model_validate({"comparable": False, "reason": "the error is large"})


def test_no_committed_row_is_set_aside_without_a_quote_from_its_source(rows):
    setups = published.load_setups()
    aside = [(s.id, i) for s in setups.values() for i, r in enumerate(s.rows) if not r.comparable]
    assert all(setups[sid].for_row(i).source_reason for sid, i in aside)
    assert all(r.reason for r in rows if not r.comparable)


@pytest.mark.parametrize("name", ["memory.yaml", "speeds.yaml"])
def test_every_entry_states_its_source_url_quote_and_settings(name):
    for entry in published.load_entries(name=name):
        assert entry["url"].startswith("https://") and entry["source_key"]
        assert entry.get("quote") or entry.get("table"), entry["id"]
        assert entry.get("framework") and entry.get("hardware") and entry.get("method"), entry["id"]


def test_an_entry_without_its_sources_words_is_refused():
    entry = {"id": "x", "source_key": "k", "source": "s", "url": "https://example.org", "figures": []}
    with pytest.raises(ValueError, match="quote or table"):
        published.PublishedEntry.model_validate(entry)


def test_each_row_joins_the_pool_of_its_setup():
    kinds = {r.label: r.error_kind for r in published.published_rows() if r.source_id == "litgpt-config-hub-a10g"}
    assert kinds["llama-2-7b/lora.yaml"] == "cuda:cuda_allocated:adapter:single"
    assert kinds["llama-2-7b/qlora.yaml"] == "cuda:cuda_allocated:quantized:single"
    full = [r for r in published.published_rows() if r.label.startswith("full, 1x RTX 4090")]
    assert full and full[0].error_kind == "cuda:cuda_allocated:full:single"


def test_the_published_set_holds_sixty_rows_from_ten_sources(rows):
    """The counts the goal asks of the admitted rows: sixty rows from ten sources (docs/evidence/published-rows.md)."""
    speed_only = sum(len(e["figures"]) for e in published.load_entries(name="speeds.yaml"))
    assert len(rows) + speed_only >= 60
    assert len({r.source_key for r in rows}) >= 10
    # rows of transformers' Trainer or TRL runs: Qwen's finetune.py, swift, Unsloth's "Hugging Face + FA2" baselines
    trainer = [r for r in rows if r.source_key in ("qwen", "ms-swift", "unsloth")]
    assert len(trainer) >= 40


def test_a_missing_reason_is_shown(tmp_path, rows):
    for name in ("memory.yaml",):
        shutil.copy(published.PUBLISHED_DIR / name, tmp_path / name)
    setups = yaml.safe_load((published.PUBLISHED_DIR / "setups.yaml").read_text())
    for setup in setups:
        setup.pop("reason", None)
        for row in setup.get("rows", []):
            row.pop("reason", None)
    (tmp_path / "setups.yaml").write_text(yaml.safe_dump(setups))
    stripped = published.published_rows(tmp_path)
    assert any(abs(r.error) > published.LIMIT for r in stripped)
    assert "**no reason recorded**" in published.to_markdown(stripped)


def test_longest_fitting_is_the_edge_of_the_prediction():
    setup = published.load_setups()["unsloth-hf-fa2-llama31-8b-qlora-context"].for_row(0)
    longest = published.longest_fitting(setup, 24.0)
    limit = 24.0 * 2**30
    assert published.predict_setup(setup, longest).nvidia_smi_bytes <= limit
    assert published.predict_setup(setup, longest + 1).nvidia_smi_bytes > limit


def test_rows_override_their_entry():
    setup = published.load_setups()["torchtune-llama31-8b-single-device"]
    full, lora = setup.for_row(0), setup.for_row(2)
    assert (full.init, full.gpu, full.knobs["optimizer"]) == ("full", "RTX-4090", "paged_adamw_8bit")
    assert (lora.init, lora.lora.r) == ("lora", 8)
    assert full.knobs["loss"] == lora.knobs["loss"] == "chunked_fp32"  # the entry's knobs stay under the row's


def test_a_row_spread_over_cards_is_predicted_per_card_over_its_entrys_gpus():
    # ZeRO-3 partitions the weights over the entry's eight cards; Answer.AI's DDP rows keep a replica per card (one
    # card's prediction) though their entry names two
    entries = {e["id"]: e for e in published.load_entries()}
    setups = published.load_setups()
    zero3 = setups["peft-docs-llama2-70b-lora-zero3"]
    ddp = setups["answerai-fsdp-qlora-ddp-mode"].for_row(2)
    assert published.world_of(zero3, entries["peft-docs-llama2-70b-lora-zero3"]) == 8
    assert published.world_of(ddp, entries["answerai-fsdp-qlora-ddp-mode"]) == 1
    spread = published.predict_setup(zero3, 2048, world=8)
    whole = published.predict_setup(zero3.model_copy(update={"backend": "single"}), 2048)
    assert (spread.backend, spread.world_size) == ("zero3", 8)
    assert spread.terms["weights"] == pytest.approx(whole.terms["weights"] / 8)
    kinds = {r.label: r.error_kind for r in published.published_rows() if r.source_key == "answer-ai"}
    assert kinds["2x RTX 4090, LoRA, FSDP + CPU offload, batch 10"] == "cuda:cuda_allocated:adapter:fsdp_offload"
    assert kinds["2x RTX 4090, LoRA, DDP, batch 4"] == "cuda:cuda_allocated:adapter:single"
