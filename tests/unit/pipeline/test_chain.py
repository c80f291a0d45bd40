"""The chain: the stages in the guide's order, what each hands the next, a failure stopping it, every stage's record
on disk as soon as it ends; the rlhf chain hands its reward stage's merged model to the online stage."""

import io

import pytest

from bench.assets.prepare import PreparedAssets
from bench.cli.pipeline import PIPELINE_NAMES
from bench.matrix.axes import Method, Option
from bench.matrix.profiles import load_profile, load_workload
from bench.pipeline import chain
from bench.results.schema import Status


def context(tmp_path, pipeline: chain.Pipeline = chain.DPO_PIPELINE):
    assets = PreparedAssets(model="/base", tokenizer="/tok", dataset="/data")
    return chain.PipelineContext(
        "r1",
        tmp_path / "run",
        tmp_path / "work",
        load_profile("cpu"),
        load_workload("tiny"),
        assets,
        None,
        {},
        pipeline,
    )


def fake_stages(monkeypatch, fail: str | None = None) -> list[tuple]:
    calls: list[tuple] = []

    def train(ctx, base, stage, models, output):
        calls.append((stage.name, models.policy, models.reward_model, stage.rate))
        status = Status.LEARNING_FAILED if stage.name == fail else Status.OK
        return base.model_copy(update={"status": status, "output": str(output) if status == Status.OK else None})

    def step(ctx, base, stage, models, output):
        calls.append((stage.name, models.policy, models.adapter, models.adapter_method))
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
        ("merge_sft", "/base", str(work / "1-sft"), Method.SFT),
        ("dpo", str(work / "2-merge_sft"), None, 1.0),
        ("merge_dpo", str(work / "2-merge_sft"), str(work / "3-dpo"), Method.DPO),
        ("generate", str(work / "4-merge_dpo"), str(work / "3-dpo"), Method.DPO),
    ]
    assert [r.status for r in records] == [Status.OK] * 5
    assert {r.pipeline for r in records} == {"sft-merge-dpo-merge-generate"}
    assert chain.load_stages(ctx.run_dir) == records


def test_the_rlhf_chain_scores_its_online_stage_with_the_reward_model_it_trained(tmp_path, monkeypatch):
    calls = fake_stages(monkeypatch)
    ctx = context(tmp_path, chain.PIPELINES["rlhf"])
    records = chain.run_pipeline(ctx, out=io.StringIO())
    work = ctx.work_dir
    sft_model, reward_model = str(work / "2-merge_sft"), str(work / "4-merge_reward")
    assert calls == [
        ("sft", "/base", None, chain.SFT_RATE),
        ("merge_sft", "/base", str(work / "1-sft"), Method.SFT),
        ("reward", sft_model, None, 1.0),
        ("merge_reward", sft_model, str(work / "3-reward"), Method.REWARD),
        ("grpo", sft_model, reward_model, chain.ONLINE_RATE),
        ("merge_grpo", sft_model, str(work / "5-grpo"), Method.GRPO),
        ("generate", str(work / "6-merge_grpo"), str(work / "5-grpo"), Method.GRPO),
    ]
    assert {r.pipeline for r in records} == {"sft-merge-reward-merge-grpo-merge-generate"}
    online = chain.PIPELINES["rlhf"].stages[4].cell
    assert online is not None and Option.REWARD_MODEL in online.options
    assert [s.name for s in chain.PIPELINES["rlhf-rloo"].stages][4:6] == ["rloo", "merge_rloo"]


def test_the_cli_offers_every_pipeline():
    assert tuple(chain.PIPELINES) == PIPELINE_NAMES


@pytest.mark.parametrize("fail", ["sft", "merge_sft", "dpo"])
def test_a_failed_stage_stops_the_chain_and_the_rest_is_recorded_not_run(tmp_path, monkeypatch, fail):
    calls = fake_stages(monkeypatch, fail)
    records = chain.run_pipeline(context(tmp_path), out=io.StringIO())
    stages = chain.DPO_PIPELINE.stages
    failed = [s.name for s in stages].index(fail)
    assert [c[0] for c in calls] == [s.name for s in stages[: failed + 1]]
    assert [r.status == Status.NOT_RUN for r in records] == [i > failed for i in range(5)]
    assert all(r.message.startswith(f"not run: stage {failed + 1} ({fail}) ended ") for r in records[failed + 1 :])


def test_the_sft_stage_trains_at_the_guides_fraction_of_the_rates():
    tiny = load_workload("tiny")
    sft = chain.scaled(tiny, chain.SFT_RATE)
    assert sft.lora.learning_rate == pytest.approx(tiny.lora.learning_rate / 5)
    assert sft.train.learning_rate == pytest.approx(tiny.train.learning_rate / 5)
    assert chain.scaled(tiny, 1.0) is tiny
