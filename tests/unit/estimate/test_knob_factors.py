"""The speed terms of the settings (bench/estimate/speed/knob_factors.py): eager attention is slower than sdpa on a
GPU, Liger faster, flash_attention_2 and torch_compile as sdpa and eager (no source for a difference); off a GPU none
applies; fp16-mixed is priced at the card's fp16 peak."""

import pytest

from bench.advise.target import TargetRequest, resolve_target
from bench.estimate.speed import knob_factors
from bench.estimate.speed.model import predict_speed
from bench.matrix.axes import Backend, Init, Quant
from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.matrix.plan import plan_for

CELL = Cell(
    init=Init.ONE_ADAPTER, quant=Quant.NONE, backend=Backend.SINGLE, launcher=backend_spec("single").default_launcher
)


def step_s(gpu="A100-80G:1", **settings) -> float:
    profile, workload = resolve_target(TargetRequest(gpu=gpu, workload="llama-3.2-1b", **settings))
    speed = predict_speed(plan_for(CELL, profile, workload))
    assert speed.s_per_step is not None
    return speed.s_per_step


def test_eager_is_slower_and_flash_attention_2_is_sdpa():
    sdpa = step_s(attention="sdpa")
    assert step_s(attention="eager") == pytest.approx(sdpa * knob_factors.EAGER_ATTENTION_SLOWDOWN)
    assert step_s(attention="flash_attention_2") == sdpa == step_s()


def test_liger_is_faster_and_torch_compile_has_no_speed_term():
    plain = step_s()
    assert step_s(liger=True) == pytest.approx(plain / knob_factors.LIGER_SPEEDUP)
    assert step_s(torch_compile=True) == plain


def test_liger_saves_no_more_than_the_terms_it_fuses():
    """Its kernels replace norms, RoPE, SwiGLU and the loss's head: a matmul-bound step keeps its GEMMs."""
    gemm_bound = {"compute": 10.0, "attention": 1.0, "elementwise": 0.3, "logprob_tiles": 0.1}
    assert knob_factors.knob_seconds(gemm_bound, 1.0, liger=True)["settings"] == pytest.approx(-0.4)
    light = {"compute": 1.0, "elementwise": 1.0, "logprob_tiles": 0.5}
    saved = -knob_factors.knob_seconds(light, 1.0, liger=True)["settings"]
    assert saved == pytest.approx(2.5 * (1 - 1 / knob_factors.LIGER_SPEEDUP))
    eager = knob_factors.knob_seconds(light, 2.0, liger=True)["settings"]
    assert eager == pytest.approx(2.5 - 5.0 * (1 - 1 / knob_factors.LIGER_SPEEDUP))
    assert knob_factors.knob_seconds(light, 1.0) == light


def test_each_factor_names_its_source():
    import inspect

    source = inspect.getsource(knob_factors)
    for name in ("EAGER_ATTENTION_SLOWDOWN", "FLASH_ATTENTION_2_OVER_SDPA", "LIGER_SPEEDUP", "TORCH_COMPILE_SPEEDUP"):
        doc = source.split(f"{name} =", 1)[1].split('"""')[1]
        assert "no speed term" in doc.lower() or any(s in doc for s in ("pull", "README", "release notes")), name


def test_no_factor_off_a_gpu():
    profile, workload = resolve_target(TargetRequest(hw="cpu", workload="tiny", attention="eager", liger=True))
    plan = plan_for(CELL, profile, workload)
    assert knob_factors.step_factor(plan.device, workload.train) == 1.0
    assert not knob_factors.liger_on(plan.device, workload.train, CELL.options)


def test_fp16_mixed_is_priced_at_the_cards_fp16_peak():
    from bench.matrix.gpus import gpu

    profile, _ = resolve_target(TargetRequest(gpu="T4:1", workload="llama-3.2-1b"))
    assert profile.precision == "fp16" and profile.peak_tflops == gpu("T4").fp16_tflops
