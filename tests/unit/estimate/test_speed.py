"""The speed model (bench/estimate/speed): each term against its formula, the fit against known constants, and the
whole model's ranking of the small workload's measured cells."""

import random
from dataclasses import replace

import pytest

from bench.errors import BenchError
from bench.estimate.predict import predict
from bench.estimate.speed import comm, offload, work
from bench.estimate.speed.calibration import FEATURES, fit_class, load_speed_calibration
from bench.estimate.speed.devices import card_figures, device_figures
from bench.estimate.speed.model import predict_speed
from bench.judge.mfu import ModelShape, flops_per_token
from bench.matrix.axes import Backend, Init, Quant
from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.matrix.gpus import gpu, gpu_by_card
from bench.matrix.plan import plan_for
from bench.matrix.profiles import available, load_profile, load_workload
from bench.paths import SCENARIOS_DIR
from bench.results.tracked import tracked_results
from tests.unit.estimate.fit_tolerance import mismatches

SHAPE = ModelShape(matmul_params=1_000_000, layers=2, heads=4, head_dim=16, lm_head_params=200_000, hidden=64)


def _step(**changes) -> work.StepShape:
    base = work.StepShape(
        shape=SHAPE,
        seq_len=100.0,
        sequences=4,
        trainable_params=1_000_000,
        adapters=False,
        checkpointing=False,
        no_grad_forwards=1,
        vocab=512,
        output="fused_logprobs",
    )
    return replace(base, **changes)


def test_full_finetune_flops_are_the_mfu_convention_and_the_flash_backward():
    """Without checkpointing, adapters or TRL's head, the hardware FLOPs are the model FLOPs of bench/judge/mfu.py
    plus the fused attention backward's recompute of QK^T: half a forward's attention (2.5 forwards, not 2)."""
    step = _step()
    attention = work.attention_per_token(SHAPE, 100)
    assert work.step_flops(step) / step.tokens == pytest.approx(flops_per_token(SHAPE, 100, False) + attention / 2)
    precomputed = _step(no_grad_forwards=0)
    assert work.step_flops(precomputed) / step.tokens == pytest.approx(
        flops_per_token(SHAPE, 100, True) + attention / 2
    )


def test_lora_gemms_the_heads_recompute_and_the_checkpointed_layers():
    """A LoRA backward skips the frozen weights' gradients (2N, not 4N) and adds its adapters' 4P; TRL's chunked
    head recomputes its logits (2Vh); checkpointing recomputes every layer's forward, adapters included, not the
    head's."""
    n, h, p = SHAPE.matmul_params, SHAPE.lm_head_params, 1_000_000
    lora = _step(adapters=True, trainable_params=p)
    assert work.backward_gemm_flops_per_token(lora) == 2 * n + 4 * p
    assert work.backward_gemm_flops_per_token(_step()) == 4 * n
    assert work.backward_gemm_flops_per_token(_step(head_recompute=True)) == 4 * n + 2 * h
    assert work.recompute_gemm_flops_per_token(replace(lora, checkpointing=True)) == 2 * (n - h + p)
    assert work.recompute_gemm_flops_per_token(lora) == 0
    through_ref = replace(lora, adapter_no_grad_forwards=1)
    assert work.matmul_flops(through_ref) - work.matmul_flops(lora) == 2 * p * lora.tokens


def test_memory_bound_terms():
    assert work.optimizer_bytes(10) == 280
    assert work.logprob_bytes(_step(output="scalar")) == 0
    assert work.logprob_bytes(_step(no_grad_forwards=0)) == 6 * 4 * 400 * 512
    assert work.dequant_bytes(1000, 0.5, 2, passes=3) == 3 * 1000 * 2.5


def test_the_optimizer_step_moves_what_its_kernels_read_and_write():
    """Bytes per updated parameter (work.optimizer_pass_bytes): fused AdamW 28 in fp32 and 14 in pure bf16; torch's
    foreach AdamW 76; bitsandbytes' 8-bit states 2 bytes + 2 fp32 absmax per 256 (a tensor under 4096 elements keeps
    32-bit states); Adafactor's eleven passes 84."""
    big, small = [(4096, 4096)], [(64, 32)]
    assert work.optimizer_param_bytes("adamw_torch_fused", big) == 28
    assert work.optimizer_param_bytes("adamw_torch_fused", big, param_bytes=2) == 14
    assert work.optimizer_param_bytes("adamw_torch", big) == 76
    assert work.optimizer_param_bytes("paged_adamw_8bit", big) == pytest.approx(12 + 2 * (2 + 8 / 256))
    assert work.optimizer_param_bytes("adamw_8bit", small) == work.optimizer_param_bytes("paged_adamw_32bit", small)
    assert work.optimizer_param_bytes("adafactor", big) == 84
    profile = load_profile("2xA10")
    workload = load_workload(profile.workload)
    cell = Cell(init=Init.TWO_MODELS, quant=Quant.NONE, backend=Backend.SINGLE, launcher="accelerate")
    speeds = {}
    for optim in ("adamw_torch_fused", "adamw_8bit"):
        train = workload.train.model_copy(update={"optim": optim})
        speeds[optim] = predict_speed(plan_for(cell, profile, workload.model_copy(update={"train": train})))
    fused, eight_bit = (speeds[o].terms["optimizer"] for o in ("adamw_torch_fused", "adamw_8bit"))
    assert eight_bit / fused == pytest.approx((12 + 2 * (2 + 8 / 256)) / 28, rel=0.02)


def test_a_paged_state_the_card_has_no_room_for_migrates_each_step():
    """offload.evicted_paged_bytes: what the rest of the process leaves of the card holds that much of the paged
    state, the rest goes out and comes back in each step. phi-2's full fine-tune on an A10 with paged 8-bit AdamW:
    5.6 GB of paged state beside 20.9 GB held, 2.5 GB evicted; its unpaged twin and an adapter's have no term."""
    state = offload.PagedState
    assert offload.evicted_paged_bytes(state(6.0, 20.0, 24.0)) == 2.0
    assert offload.evicted_paged_bytes(state(3.0, 20.0, 24.0)) == offload.evicted_paged_bytes(state(3.0, 30.0)) == 0.0
    assert offload.evicted_paged_bytes(state(3.0, 30.0, 24.0)) == 3.0
    profile = load_profile("2xA10")
    workload = load_workload(profile.workload)
    for init, optim, evicted in (
        (Init.TWO_MODELS, "paged_adamw_8bit", True),
        (Init.TWO_MODELS, "adamw_8bit", False),
        (Init.ONE_ADAPTER, "paged_adamw_8bit", False),
    ):
        cell = Cell(init=init, quant=Quant.NONE, backend=Backend.SINGLE, launcher="accelerate")
        train = workload.train.model_copy(update={"optim": optim})
        plan = plan_for(cell, profile, workload.model_copy(update={"train": train}))
        memory, terms = predict(plan), predict_speed(plan).terms
        assert ("paged_migration" in terms) == evicted
        if evicted:
            out = memory.paged_bytes - (profile.memory_per_device_gb * 1e9 - memory.total_bytes)
            link = device_figures(profile, (1.0, 1.0, "")).host_link_bytes_s
            assert out > 1e9 and terms["paged_migration"] == pytest.approx(2 * out / link)


def test_ring_collectives():
    assert comm.ring_all_reduce(100.0, 4) == pytest.approx(150.0)
    assert comm.ring_gather_or_scatter(100.0, 4) == pytest.approx(75.0)
    ddp = comm.step_traffic(backend_spec(Backend.DDP), 2, 100.0, 400.0, 3, 10, 3)
    assert (ddp.bytes, ddp.calls, ddp.overlappable) == (100.0, 1, "backward")
    assert comm.step_traffic(backend_spec(Backend.DDP), 1, 100.0, 400.0, 3, 10, 3).bytes == 0
    zero3 = comm.step_traffic(backend_spec(Backend.ZERO3), 2, 100.0, 400.0, 3, 10, 3)
    assert zero3.bytes == pytest.approx(3 * 200.0 + 50.0)
    alone = comm.step_traffic(backend_spec(Backend.ZERO3_OFFLOAD), 1, 100.0, 400.0, 3, 10, 3)
    assert (alone.bytes, alone.calls) == (0.0, 30)  # the fetch hooks still run on one rank
    assert comm.exposed_seconds(1.0, 0.6, 1.0) == pytest.approx(0.4)
    assert comm.exposed_seconds(1.0, 2.0, 1.0) == 0.0
    assert comm.exposed_seconds(1.0, 2.0, 0.0) == 1.0


def test_every_shipped_accelerator_profile_has_device_figures():
    for name in available(SCENARIOS_DIR / "hardware"):
        profile = load_profile(name)
        if profile.device == "cpu":
            with pytest.raises(BenchError, match="measured matmul rate"):
                device_figures(profile)
            continue
        figures = device_figures(profile)
        assert figures.peak_flops == profile.peak_tflops * 1e12
        assert figures.memory_bytes_s > figures.interconnect_bytes_s > 0
        assert figures.source.startswith("https://")


def test_unknown_card_is_a_one_line_error():
    with pytest.raises(BenchError, match="no GPU catalog entry for card 'Nope'"):
        gpu_by_card("Nope")


def test_links_are_taken_one_way_and_an_unpublished_one_is_a_one_line_error():
    h100 = card_figures(gpu("H100-SXM"))
    assert (h100.interconnect_bytes_s, h100.host_link_bytes_s) == (450e9, 64e9)  # NVLink 900, PCIe 5.0 x16 128
    a10 = card_figures(gpu("A10"))
    assert a10.interconnect_bytes_s == a10.host_link_bytes_s == 32e9  # PCIe 4.0 x16 is both links
    with pytest.raises(BenchError, match="A10G: no dense tensor TFLOP/s"):
        card_figures(gpu("A10G"))
    with pytest.raises(BenchError, match="A10G: the catalog has no interconnect figure"):
        card_figures(gpu("A10G"), peak_tflops=125)


def test_fit_recovers_known_constants():
    """Rows made with known constants give them back (the fit can fail: a wrong column order would)."""
    truth = [1 / 0.25, 0.02, 0.001, 0.04, 0.05, 0.002]
    features = [[0.01 * (i % 7 + 1), 1.0, i % 5, i % 2, (i // 2) % 2, (i % 3) * 10] for i in range(30)]
    measured = [sum(c * f for c, f in zip(truth, row, strict=True)) + 0.003 for row in features]
    fitted = fit_class(features, [0.003] * 30, measured)
    assert fitted["efficiency"] == pytest.approx(0.25, rel=1e-6)
    for name, value in zip(FEATURES[1:], truth[1:], strict=True):
        assert fitted[name] == pytest.approx(value, rel=1e-6, abs=1e-9)
    with pytest.raises(BenchError, match="needs 18 rows"):
        fit_class(features[:5], [0.0] * 5, measured[:5])


def test_prediction_is_labelled_and_ranged():
    cell = Cell(init=Init.ONE_ADAPTER, quant=Quant.NONE, backend=Backend.DDP, launcher="torchrun")
    profile = load_profile("2xA10")
    s = predict_speed(plan_for(cell, profile, load_workload(profile.workload)))
    assert s.status == "predicted" and s.world_size == 2
    assert s.tokens_per_s_low <= s.tokens_per_s <= s.tokens_per_s_high
    assert s.s_per_step == pytest.approx(sum(s.terms.values()))
    assert s.tokens_per_s == pytest.approx(s.tokens_per_step / s.s_per_step)


MIN_SMALL_RHO = 0.7
"""The median over runs of Spearman's rho of PREDICTED vs measured tokens/s, within each run of the small workload
with at least MIN_RUN_CELLS ok cells the CPU constants were not fitted on. Within a run, not pooled over runs: this
VM's speed moves from day to day more than the model's terms do (DPO's one_adapter-none-single measured 139 and 153
tokens/s on 2026-11-23, 289 on 2026-11-26, 206 and 207 on 2026-11-28, predicted 145–257 from each run's host
figures), so a ranking pooled over days ranks the days (pooled: 0.76 over 75 cells, 0.67 over 123 once
cpu-budget-4g/20261128-135038 joined). Measured 2026-11-28: the median of 7 runs is 0.87 (0.56–0.92). The noise
ceiling is below 1: two runs of the same 18 cells (cpu-budget 20261123-080923 and -143013) rank-agree with each
other at 0.88 only; 0.7 fails when the model loses a real part of the ordering in most runs."""
MIN_RUN_CELLS = 8


def test_small_workload_ranking_agrees_with_the_measured_one():
    from statistics import median

    from bench.estimate.speed.speed_validation import speed_rows, summarize

    rows = [
        r for r in speed_rows(tracked_results(), load_speed_calibration()) if r.workload == "small" and not r.fitted
    ]
    runs = [s for s in summarize(rows) if s.cells >= MIN_RUN_CELLS]
    assert len(runs) >= 5
    assert median(s.spearman_rho for s in runs) >= MIN_SMALL_RHO


def test_the_committed_calibration_is_what_fit_gives_on_the_committed_runs():
    """Within fit_tolerance's bounds, not exactly: the last digits of a fit are the CPU's BLAS kernels'."""
    from bench.estimate.speed.speed_validation import fit

    committed = load_speed_calibration()
    assert not mismatches(fit(tracked_results(), committed.host), committed)


@pytest.fixture(scope="module")
def committed_cells() -> list:
    from bench.estimate.speed.speed_validation import measured_cells

    return measured_cells(tracked_results(), load_speed_calibration().host)


def _moved(cells: list, by: float, seed: int) -> list:
    """Every measured step time times 1 +- `by` (a fixed seed picks each sign)."""
    rng = random.Random(seed)
    return [replace(m, s_per_step=m.s_per_step * (1 + rng.choice((-by, by)))) for m in cells]


def test_a_refit_on_step_times_moved_by_1e_12_is_the_committed_calibration(committed_cells):
    """What another CPU's BLAS does to the fit (an EPYC Zen 5's refit differed in the 17th digit, and 3.5e-6 of a
    constant at its bound) the comparison takes; a change of the data a millionth of a step is not taken."""
    from bench.estimate.speed.speed_validation import fit_cells

    committed = load_speed_calibration()
    refit = fit_cells(_moved(committed_cells, 1e-12, seed=54), committed.host)
    assert refit != committed  # the last digits moved: the tolerance, not luck, holds them
    assert not mismatches(refit, committed)
    moved = mismatches(fit_cells(_moved(committed_cells, 1e-6, seed=54), committed.host), committed)
    assert any(".cpu." in m for m in moved) and any(".gpu." in m for m in moved)


def test_the_fit_tolerance_takes_another_cpus_last_digits_and_nothing_more():
    zen4 = {"layer_pass_s": 0.001230972484601539, "step_overhead_s": 5.1369866861007194e-20, "fitted": ["x"]}
    zen5 = {"layer_pass_s": 0.0012309724846015391, "step_overhead_s": 5.137004699897262e-20, "fitted": ["x"]}
    assert not mismatches(zen5, zen4)
    assert mismatches(zen4["layer_pass_s"] * (1 + 1e-8), zen4["layer_pass_s"])
    assert mismatches(1e-9, 0.0)  # a nanosecond per step where the committed constant is at its bound
    assert mismatches({**zen5, "fitted": ["y"]}, zen4) == [".fitted[0]: 'y' != 'x'"]
    assert mismatches([1.0], [1.0, 2.0]) and mismatches({"a": 1.0}, {"b": 1.0}) and mismatches("x", "y")


def test_committed_calibration_names_its_rows():
    calibration = load_speed_calibration()
    for name, constants in calibration.classes.items():
        assert constants.fitted_on, name
        assert "efficiency" in constants.fitted
    for run in calibration.classes["cpu"].fitted_on:
        assert (tracked_results() / run / "results.jsonl").is_file()


def test_validate_speed_and_its_fit_leave_out_every_speed_measured_beside_something_else(tmp_path):
    from bench.estimate.speed.speed_validation import measured_cells
    from bench.results.schema import Metrics, ResultRecord
    from bench.results.store import append_result

    metrics = Metrics(
        tokens_per_s=1000.0, pairs_per_s=10.0, step_time_median_s=0.5, step_time_p90_s=0.6, steps=10,
        warmup_steps=1, tokens_total=20000, memory_kind="rss", load_peak_bytes=None, train_peak_bytes=None,
        mem_growth_per_step_bytes=None, load_s=None,
    )  # fmt: skip
    alone = ResultRecord(
        run_id="r", cell_id="one_adapter-none-single", init="one_adapter", quant="none", backend="single",
        launcher="python", hardware="cpu", workload="tiny", status="ok", metrics=metrics,
    )  # fmt: skip
    run_dir = tmp_path / "cpu" / "r"
    run_dir.mkdir(parents=True)
    shared = [
        {"trial": 1, "gpu_shared": True, "shared_with": ["two_models-none-single"]},  # in slots of one device
        {"trial": 2, "shared_with": ["two_models-none-single"]},  # on other devices of the machine
        {"trial": 3, "overlapped_by": ["another-run"]},  # another runner on the machine
    ]
    for record in [alone, *(alone.model_copy(update=u) for u in shared)]:
        append_result(run_dir, record)
    found = measured_cells(tmp_path, load_speed_calibration().host)
    assert [(m.run, m.cell_id) for m in found] == [("cpu/r", "one_adapter-none-single")]


def test_dequantization_repeats_in_every_micro_step():
    """Gradient accumulation runs the forward and backward once per micro-batch, and bitsandbytes dequantizes each
    quantized weight in every one of them: the dequantization's calls and bytes scale with the micro-steps, as the
    layer passes do."""
    from bench.estimate.speed.model import StepSetup, quant_calls

    one, eight = _step(), _step(micro_steps=8)
    assert work.weight_passes(eight) == 8 * work.weight_passes(one)
    setup = StepSetup(eight, backend_spec(Backend.SINGLE), 1, 2, 1000, 7, 0.5, 2500.0, True, 0, 0)
    assert quant_calls(setup) == 7 * 8 * work.weight_passes(one)
    assert work.layer_passes(eight) == work.weight_passes(eight) * SHAPE.layers


def test_the_gpu_range_weighs_each_source_once():
    """Eight rows of one source within 2 % cannot narrow the range the other sources' errors set: a source's rows
    share a stack and count as one piece of evidence."""
    import math

    from bench.estimate.speed.calibration import log_error_range, source_weighted_range

    measured = [1.0] * 11
    errors = [0.01, -0.01, 0.02, -0.02, 0.0, 0.01, -0.01, 0.0, -0.5, 0.1, 0.6]
    predicted = [m / math.exp(e) for m, e in zip(measured, errors, strict=True)]
    sources = ["one"] * 8 + ["two", "three", "four"]
    plain = log_error_range(predicted, measured)
    weighted = source_weighted_range(predicted, measured, sources)
    assert plain[0] > -0.1 and plain[1] < 0.2
    assert weighted[0] < -0.3 and weighted[1] > 0.3
    # three sources of one row each: each sits at 1/6, 3/6, 5/6, so the 10th and 90th percentiles are the extremes
    assert source_weighted_range(predicted[:3], measured[:3], ["a", "b", "c"]) == pytest.approx((-0.01, 0.02))
