"""MFU arithmetic on hand-computed numbers, and the shapes read from the shipped configs."""

import pytest

from bench.judge.mfu import (
    CONVENTION,
    MfuInputs,
    ModelShape,
    flops_per_token,
    inputs_for,
    mfu,
    model_shape,
    no_grad_forwards,
    with_mfu,
)
from bench.matrix.axes import Method
from bench.matrix.cell import Cell
from bench.matrix.plan import plan_for
from bench.matrix.profiles import load_profile, load_workload
from bench.matrix.scenario import Backend, Init, Launcher, Option, Quant
from bench.paths import SCENARIOS_DIR
from bench.results.schema import Metrics

SHAPE = ModelShape(matmul_params=1_000_000_000, layers=16, heads=32, head_dim=64)


def test_flops_per_token_with_reference_forward():
    # L*H*Q*T = 16*32*64*1024 = 33_554_432; 8N = 8e9; 16*LHQT = 536_870_912
    assert flops_per_token(SHAPE, 1024, precomputed_ref=False) == 8_536_870_912


def test_flops_per_token_with_precomputed_reference():
    # 6N = 6e9; 12*LHQT = 402_653_184
    assert flops_per_token(SHAPE, 1024, precomputed_ref=True) == 6_402_653_184


def test_mfu_divides_by_devices_and_peak():
    # 10_000 tok/s * 8e9 FLOP/tok = 8e13 FLOP/s over 2 devices of 100 TFLOP/s = 0.4
    assert mfu(10_000, 8e9, devices=2, peak_tflops=100) == pytest.approx(0.4)
    with pytest.raises(ValueError, match="devices"):
        mfu(1.0, 1.0, devices=0, peak_tflops=1.0)


def metrics(tokens_per_s: float) -> Metrics:
    return Metrics(
        tokens_per_s=tokens_per_s,
        pairs_per_s=1.0,
        step_time_median_s=1.0,
        step_time_p90_s=1.0,
        steps=10,
        warmup_steps=2,
        tokens_total=100,
        memory_kind="cuda_allocated",
        load_peak_bytes=None,
        train_peak_bytes=None,
        mem_growth_per_step_bytes=None,
        load_s=None,
    )


def test_with_mfu_records_value_flops_and_convention():
    inputs = MfuInputs(SHAPE, peak_tflops=989, seq_len=1024, devices=1, precomputed_ref=False)
    out = with_mfu(metrics(50_000), inputs)
    assert out.flops_per_token == 8_536_870_912
    assert out.mfu == pytest.approx(50_000 * 8_536_870_912 / 989e12)
    assert out.mfu_convention == CONVENTION and "8N+16LHQT" in CONVENTION
    assert with_mfu(metrics(1.0), None).mfu is None


def test_tiny_shape_by_hand():
    # tiny Llama: per layer q,k,v,o 4*64*64 + mlp 3*64*128 + 2 norms*64 = 41_088; 2 layers + final norm 64
    # + untied LM head 512*64; the input embedding (512*64) is a lookup and does not count.
    shape = model_shape(str(SCENARIOS_DIR / "workloads" / "tiny"))
    matmul = 2 * 41_088 + 64 + 512 * 64
    assert shape == ModelShape(matmul, layers=2, heads=4, head_dim=16, lm_head_params=512 * 64, hidden=64)


def test_each_method_counts_its_forwards_without_gradient():
    shape = ModelShape(1_000, layers=1, heads=1, head_dim=1)
    policy, forward = 6 * 1_000 + 12 * 10, 2 * 1_000 + 4 * 10
    per_method = {m: flops_per_token(shape, 10, False, no_grad_forwards(m, False)) for m in Method}
    assert per_method == {
        Method.DPO: policy + forward,
        Method.KTO: policy + 3 * forward,  # reference over the batch and the KL batch, the policy over the KL batch
        Method.SFT: policy,
        Method.REWARD: policy,
        Method.ORPO: policy,
        Method.SIMPO: policy,
        # the reference's forward over the sampled batch; the sampling's own forwards are not counted
        Method.GRPO: policy + forward,
        Method.RLOO: policy + forward,
    }
    assert no_grad_forwards(Method.KTO, precomputed_ref=True) == 1 and no_grad_forwards(Method.DPO, True) == 0


def test_a_reward_model_has_its_scalar_head_instead_of_the_lm_head():
    from bench.matrix.cell import Cell
    from bench.matrix.profiles import load_profile, load_workload

    cell = Cell(method="reward", init="one_adapter", quant="none", backend="single", launcher="python")
    plan = plan_for(cell, load_profile("1xH100"), load_workload("tiny"))
    inputs = inputs_for(plan, str(SCENARIOS_DIR / "workloads" / "tiny"))
    assert inputs.head_params == 512 * 64 - 64 and inputs.no_grad_forwards == 0
    out = with_mfu(metrics(1.0), inputs)
    assert out.flops_per_token == flops_per_token(
        ModelShape(inputs.shape.matmul_params - inputs.head_params, 2, 4, 16), 128, False, 0
    )


def test_tied_head_counts_and_position_embeddings_do_not():
    shape = model_shape(str(SCENARIOS_DIR / "workloads" / "opt-1.3b"))
    total, embed, positions = 1_315_758_080, 50272 * 2048, 2050 * 2048
    assert shape.matmul_params == total - embed - positions + embed


def test_mixtral_counts_active_experts_only():
    shape = model_shape(str(SCENARIOS_DIR / "workloads" / "mixtral-8x7b"))
    experts = 32 * 8 * 3 * 4096 * 14336  # layers * experts * (gate, up, down) * hidden * intermediate
    total = 46_702_792_704
    assert shape.matmul_params == total - 32000 * 4096 - experts * 6 // 8
    # Mistral AI publishes 12.9B active parameters (embeddings included)
    assert shape.matmul_params + 32000 * 4096 == pytest.approx(12.9e9, rel=0.01)


def cell(backend: Backend, options: tuple = ()) -> Cell:
    launcher = Launcher.PYTHON if backend in (Backend.SINGLE, Backend.DEVICE_MAP) else Launcher.TORCHRUN
    return Cell(init=Init.ONE_ADAPTER, quant=Quant.NONE, backend=backend, launcher=launcher, options=options)


def test_inputs_for_uses_profile_peak_devices_and_max_length():
    profile, workload = load_profile("2xA10"), load_workload("phi-2")
    model = str(SCENARIOS_DIR / "workloads" / "phi-2")
    ddp = inputs_for(plan_for(cell(Backend.DDP), profile, workload), model)
    assert (ddp.peak_tflops, ddp.devices, ddp.seq_len, ddp.precomputed_ref) == (125, 2, 1024, False)
    assert inputs_for(plan_for(cell(Backend.DEVICE_MAP), profile, workload), model).devices == 2
    single = inputs_for(plan_for(cell(Backend.SINGLE, (Option.PRECOMPUTE_REF,)), profile, workload), model)
    assert single.precomputed_ref and single.devices == 1


def test_no_mfu_without_peak_or_local_config():
    cpu, tiny = load_profile("cpu"), load_workload("tiny")
    assert inputs_for(plan_for(cell(Backend.SINGLE), cpu, tiny), str(SCENARIOS_DIR / "workloads" / "tiny")) is None
    h100 = load_profile("1xH100")
    assert inputs_for(plan_for(cell(Backend.SINGLE), h100, tiny), "meta-llama/Llama-3.2-1B") is None
