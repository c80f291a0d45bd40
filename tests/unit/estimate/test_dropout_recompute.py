"""A dropout after each decoder layer's last linear saves its mask, so the checkpoint's recompute runs through that
linear (no early stop before it) wherever the dropout is active: a module's is off where the method's TRL config
disables dropout, a functional one never is. The counts below are the fake-tensor traces' (docs/evidence/trace.md):
phi-2 SFT 1.632e10 and OPT-1.3b SFT 8.652e9 FLOPs per padded token."""

import pytest

from bench.estimate.shapes import last_gemm_dropout
from bench.estimate.trace.flops import analytic_step_flops
from bench.matrix.axes import Backend, Init, Method, Quant
from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.matrix.plan import plan_for
from bench.matrix.profiles import load_profile, load_workload


def lora_cell(method: Method) -> Cell:
    single = Backend.SINGLE
    return Cell(
        init=Init.ONE_ADAPTER,
        quant=Quant.NONE,
        backend=single,
        launcher=backend_spec(single).default_launcher,
        method=method,
    )


def per_token(workload: str, method: Method, sequences: int, length: int) -> float:
    plan = plan_for(lora_cell(method), load_profile("1xH100"), load_workload(workload))
    return analytic_step_flops(plan, sequences, length) / (sequences * length)


def test_each_architecture_names_its_dropout_after_the_last_linear():
    assert last_gemm_dropout(load_workload("phi-2")) == (0.1, True)
    assert last_gemm_dropout(load_workload("opt-1.3b")) == (0.1, False)
    assert last_gemm_dropout(load_workload("llama-3.2-1b")) == (0.0, True)


@pytest.mark.parametrize(
    ("workload", "method", "sequences", "length", "traced"),
    [
        ("phi-2", Method.SFT, 2, 239, 1.632e10),  # its nn.Dropout kept: SFTConfig has no disable_dropout
        ("phi-2", Method.DPO, 4, 861, 2.114e10),  # DPOConfig disables it: fc2 is not recomputed
        ("opt-1.3b", Method.SFT, 4, 834, 8.652e9),
        ("opt-1.3b", Method.DPO, 8, 861, 1.147e10),  # a functional dropout: no config turns it off
    ],
)
def test_the_analytic_count_is_the_traced_one(workload, method, sequences, length, traced):
    assert per_token(workload, method, sequences, length) == pytest.approx(traced, rel=0.002)


def test_an_active_dropout_adds_each_last_linears_recompute(monkeypatch):
    """phi-2's 32 fc2 (2560 x 10240): 2 FLOPs per weight per token more in SFT than where no dropout follows."""
    with_dropout = per_token("phi-2", Method.SFT, 2, 239)
    monkeypatch.setattr("bench.estimate.speed.model.last_gemm_dropout", lambda workload: (0.0, True))
    assert with_dropout - per_token("phi-2", Method.SFT, 2, 239) == pytest.approx(2 * 32 * 2560 * 10240)


def test_a_trainer_that_disables_dropout_also_disables_loras():
    """TRL's DPOTrainer zeroes every nn.Dropout after wrapping the model in PEFT (dpo_trainer.py: get_peft_model,
    then disable_dropout_in_model), PEFT's lora_dropout among them: no dropped copy of each adapted input. SFT keeps
    it."""
    from bench.estimate.predict import predict_cell

    workload = load_workload("llama-3.2-1b")
    workload = workload.model_copy(update={"lora": workload.lora.model_copy(update={"dropout": 0.1})})
    undropped = load_workload("llama-3.2-1b")

    def copies(method: Method, w) -> float:
        return predict_cell(lora_cell(method), load_profile("1xH100"), w).terms["lora_input_copies"]

    assert copies(Method.DPO, workload) == copies(Method.DPO, undropped)
    assert copies(Method.SFT, workload) > copies(Method.SFT, undropped)
