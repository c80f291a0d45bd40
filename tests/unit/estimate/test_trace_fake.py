"""The fake-tensor trace (bench/estimate/trace/fake_step.py, fake_mode.py): a step built over a model with no
weights counts the FLOPs the real step counts, and its batch is the real one. Traces tiny's DPO step both ways."""

import pytest

from bench.estimate.trace.fake_mode import stand_in_mode
from bench.matrix.axes import Init, Method
from bench.matrix.cell import Cell
from bench.matrix.plan import plan_for
from bench.matrix.profiles import load_profile, load_workload

torch = pytest.importorskip("torch")
pytest.importorskip("trl")


def test_real_ops_stay_real_and_reads_of_fake_data_stand_in():
    """All-real ops run for real (their values are kept); a real boolean mask indexes a fake tensor at its real
    count; a read of fake data is a stand-in; a `nonzero` of fake data stands in as every element set."""
    from torch._subclasses.fake_tensor import FakeTensor

    mode = stand_in_mode()
    with mode:
        fake = torch.empty(4, 3)
    mode.real_through = True
    mask = torch.tensor([True, False, True, False])
    with mode:
        total = mask.sum()
        picked = fake[mask]
        assert not isinstance(total, FakeTensor) and int(total) == 2
        assert isinstance(picked, FakeTensor) and picked.shape == (2, 3)
        assert fake.sum().item() == 1.0
        assert (fake > 0).nonzero().shape == (12, 2)


def one_adapter(workload: str):
    cell = Cell(init=Init.ONE_ADAPTER, quant="none", backend="single", launcher="python")
    return plan_for(cell, load_profile("1xH100"), load_workload(workload))


def test_only_models_prepare_would_not_build_in_memory_run_fake():
    from bench.estimate.trace import trace_cell
    from bench.estimate.trace.fake_step import fake_refusal, runs_fake

    assert not runs_fake(one_adapter("tiny"))
    assert runs_fake(one_adapter("llama-3.2-1b"))
    assert fake_refusal(one_adapter("llama-3.2-1b")) is None
    reward = Cell(init=Init.ONE_ADAPTER, quant="none", backend="single", launcher="python", method=Method.REWARD)
    skipped = trace_cell(plan_for(reward, load_profile("1xH100"), load_workload("llama-3.2-1b"))).skipped
    assert "AutoModelForSequenceClassification" in skipped


def test_a_fake_step_counts_what_the_real_step_counts(tmp_path):
    """tiny's DPO one_adapter step (the policy's and the disabled adapter's forwards, checkpointing's recompute,
    the chunked head, DPO's metrics) over fake weights: every parameter fake, the batch real, and FlopCounterMode's
    count equal to the real step's, op for op."""
    from torch._subclasses.fake_tensor import FakeTensor

    from bench.estimate.trace.fake_step import build_fake_step
    from bench.estimate.trace.flops import traced_step_flops
    from bench.estimate.trace.step import build_step

    plan = one_adapter("tiny")
    real = build_step(plan, tmp_path / "real")
    fake = build_fake_step(plan, tmp_path / "fake")
    assert all(isinstance(p, FakeTensor) for p in fake.trainer.model.parameters())
    assert not any(isinstance(t, FakeTensor) for t in fake.batch.values())
    assert fake.shape == real.shape
    counted = traced_step_flops(fake)
    assert counted["attention"] > 0
    assert counted == traced_step_flops(real)
