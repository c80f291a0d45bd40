"""The chain: the stages in the guide's order, what each hands the next, a failure stopping it, every stage's record
on disk as soon as it ends."""

import io

import pytest

from bench.assets.prepare import PreparedAssets
from bench.matrix.profiles import load_profile, load_workload
from bench.pipeline import chain
from bench.results.schema import Status


def context(tmp_path):
    assets = PreparedAssets(model="/base", tokenizer="/tok", dataset="/data")
    return chain.PipelineContext(
        "r1", tmp_path / "run", tmp_path / "work", load_profile("cpu"), load_workload("tiny"), assets, None, {}
    )


def fake_stages(monkeypatch, fail: str | None = None) -> list[tuple]:
    calls: list[tuple] = []

    def train(ctx, base, stage, model, output):
        calls.append((stage.name, model, None, stage.rate))
        status = Status.LEARNING_FAILED if stage.name == fail else Status.OK
        return base.model_copy(update={"status": status, "output": str(output) if status == Status.OK else None})

    def step(ctx, base, stage, model, adapter, output):
        calls.append((stage.name, model, adapter, None))
        status = Status.ERROR if stage.name == fail else Status.OK
        message = "RuntimeError: boom" if status == Status.ERROR else ""
        out = str(output) if stage.kind == "merge" and status == Status.OK else None
        return base.model_copy(update={"status": status, "output": out, "message": message})

    monkeypatch.setattr(chain, "train", train)
    monkeypatch.setattr(chain, "step", step)
    return calls


def test_each_stage_gets_what_the_one_before_made(tmp_path, monkeypatch):
    calls = fake_stages(monkeypatch)
    ctx = context(tmp_path)
    records = chain.run_pipeline(ctx, out=io.StringIO())
    work = ctx.work_dir
    assert calls == [
        ("sft", "/base", None, chain.SFT_RATE),
        ("merge_sft", "/base", str(work / "1-sft"), None),
        ("dpo", str(work / "2-merge_sft"), None, 1.0),
        ("merge_dpo", str(work / "2-merge_sft"), str(work / "3-dpo"), None),
        ("generate", str(work / "4-merge_dpo"), str(work / "3-dpo"), None),
    ]
    assert [r.status for r in records] == [Status.OK] * 5
    assert chain.load_stages(ctx.run_dir) == records


@pytest.mark.parametrize("fail", ["sft", "merge_sft", "dpo"])
def test_a_failed_stage_stops_the_chain_and_the_rest_is_recorded_not_run(tmp_path, monkeypatch, fail):
    calls = fake_stages(monkeypatch, fail)
    records = chain.run_pipeline(context(tmp_path), out=io.StringIO())
    failed = [s.name for s in chain.STAGES].index(fail)
    assert [c[0] for c in calls] == [s.name for s in chain.STAGES[: failed + 1]]
    assert [r.status == Status.NOT_RUN for r in records] == [i > failed for i in range(5)]
    assert all(r.message.startswith(f"not run: stage {failed + 1} ({fail}) ended ") for r in records[failed + 1 :])


def test_the_sft_stage_trains_at_the_guides_fraction_of_the_rates():
    tiny = load_workload("tiny")
    sft = chain.scaled(tiny, chain.SFT_RATE)
    assert sft.lora.learning_rate == pytest.approx(tiny.lora.learning_rate / 5)
    assert sft.train.learning_rate == pytest.approx(tiny.train.learning_rate / 5)
    assert chain.scaled(tiny, 1.0) is tiny
