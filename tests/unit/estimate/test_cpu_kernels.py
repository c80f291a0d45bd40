"""The kernels a CPU cell's bf16 adapter matmuls take, keyed on the CPU's features (bench/estimate/cpu_kernels.py):
what oneDNN keeps per shape, how many shapes a cell makes, and where the term enters a prediction."""

import pytest

from bench.estimate import cpu_kernels
from bench.estimate.predict import predict_cell
from bench.matrix.axes import Backend, Init, Quant
from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.matrix.profiles import load_profile, load_workload
from bench.results.cpu_features import CpuFeatures, OneDnn, detect_cpu_features
from bench.units import KiB

AMX = CpuFeatures(
    flags=["avx2", "avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512_bf16", "amx_tile", "amx_bf16"],
    torch_onednn_bf16=True,
    onednn=OneDnn(bf16_matmul="brg_matmul:avx10_1_512_amx"),
)
ZEN3 = CpuFeatures(flags=["avx2", "fma"], torch_onednn_bf16=False)
"""An AMD EPYC without AVX-512 (Milan): torch runs bf16 matmuls itself."""
CASCADE_LAKE = CpuFeatures(flags=["avx2", "avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512_vnni"])


def cell(init: Init, quant: Quant, backend: Backend) -> Cell:
    return Cell(init=init, quant=quant, backend=backend, launcher=backend_spec(backend).default_launcher)


def test_the_path_follows_what_onednn_created_else_the_flags():
    assert cpu_kernels.bf16_path(AMX) == "amx"
    assert (
        cpu_kernels.bf16_path(AMX.model_copy(update={"onednn": OneDnn(bf16_matmul="brg_matmul:avx512_core_bf16")}))
        == "avx512_core_bf16"
    )
    # ONEDNN_MAX_CPU_ISA=AVX512_CORE on an AMX CPU: oneDNN converts in AVX-512, whatever the flags say
    assert cpu_kernels.bf16_path(AMX.model_copy(update={"onednn": OneDnn(bf16_matmul="gemm:jit:bf16")})) == (
        "avx512_core"
    )
    assert cpu_kernels.bf16_path(ZEN3) == "aten"
    assert cpu_kernels.bf16_path(CASCADE_LAKE) == "avx512_core"
    assert cpu_kernels.bf16_path(CpuFeatures(flags=[*CASCADE_LAKE.flags, "avx512_bf16"])) == "avx512_core_bf16"
    assert cpu_kernels.bf16_path(CpuFeatures(flags=[*CASCADE_LAKE.flags, "avx512_bf16", "amx_bf16"])) == "amx"
    assert cpu_kernels.bf16_path(None) == cpu_kernels.REFERENCE == "aten"


def test_without_a_probe_avx512_bw_vl_dq_are_needed_and_a_torch_without_onednn_bf16_runs_it_itself():
    exactly = ["avx512bw", "avx512vl", "avx512dq"]
    assert cpu_kernels.bf16_path(CpuFeatures(flags=exactly)) == "avx512_core"
    for missing in exactly:
        assert cpu_kernels.bf16_path(CpuFeatures(flags=[f for f in exactly if f != missing])) == "aten"
    # torch built without oneDNN's bf16 (mkldnn_bf16_device_check false) on a CPU that has the flags
    assert cpu_kernels.bf16_path(CASCADE_LAKE.model_copy(update={"torch_onednn_bf16": False})) == "aten"
    assert cpu_kernels.bf16_path(CASCADE_LAKE.model_copy(update={"torch_onednn_bf16": True})) == "avx512_core"


def test_the_primitive_cache_capacity_is_read_under_either_name_and_only_as_a_count():
    def capacity(env):
        return cpu_kernels.cache_capacity(AMX.model_copy(update={"onednn": OneDnn(env=env)}))

    assert capacity({"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "10"}) == 10
    assert capacity({"DNNL_PRIMITIVE_CACHE_CAPACITY": "20"}) == 20  # oneDNN's older name
    assert capacity({"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "10", "DNNL_PRIMITIVE_CACHE_CAPACITY": "20"}) == 10
    assert capacity({"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "many"}) == 1024
    assert capacity({}) == 1024


def test_an_adapter_as_wide_as_its_rank_makes_three_problems():
    # in = r = out: A's and B's forward, input gradient and weight gradient are the same three products
    assert cpu_kernels.adapter_problems([(8, 8)], 8) == 3


def test_each_path_keeps_its_own_bytes_per_primitive():
    assert cpu_kernels.primitive_bytes(AMX) == 682 * KiB
    assert cpu_kernels.primitive_bytes(CpuFeatures(flags=[*CASCADE_LAKE.flags, "avx512_bf16"])) == 654 * KiB
    assert cpu_kernels.primitive_bytes(CASCADE_LAKE) == 59 * KiB
    assert cpu_kernels.primitive_bytes(ZEN3) == cpu_kernels.primitive_bytes(None) == 0.0


def test_an_adapter_makes_six_problems_per_batch_shape_and_equal_adapters_share_them():
    assert cpu_kernels.adapter_problems([(64, 64)] * 4, 8) == 6  # tiny's q, k, v, o: 156 primitives over 26 lengths
    assert cpu_kernels.adapter_problems([(64, 64), (64, 16)], 8) == 9  # GQA's k/v: B's three problems over (8, 16)
    assert cpu_kernels.adapter_problems([], 8) == 0


def test_expected_batch_lengths_stay_under_the_worst_case():
    assert cpu_kernels.batch_lengths(30, 128) == pytest.approx(26.84, abs=0.005)  # tiny met 26
    for steps in (1, 5, 30, 200, 5000):
        assert cpu_kernels.batch_lengths(steps, 128) <= min(steps, 128) + 1e-9
    assert cpu_kernels.batch_lengths(1, 128) == pytest.approx(1)
    assert cpu_kernels.batch_lengths(10_000, 128) == pytest.approx(128)


def test_the_kept_kernels_are_capped_by_onednn_s_primitive_cache():
    full = cpu_kernels.adapter_kernels(AMX, [(64, 64)], 8, 30, 128)
    assert full == pytest.approx(6 * 128 * (1 - (127 / 128) ** 30) * 682 * KiB)
    capped = AMX.model_copy(
        update={"onednn": OneDnn(bf16_matmul="brg_matmul:x_amx", env={"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "10"})}
    )
    assert cpu_kernels.adapter_kernels(capped, [(64, 64)], 8, 30, 128) == 10 * 682 * KiB
    assert cpu_kernels.cache_capacity(None) == 1024
    assert cpu_kernels.adapter_kernels(ZEN3, [(64, 64)], 8, 30, 128) == 0.0


def test_only_quantized_cpu_cells_with_bf16_adapters_carry_the_term():
    profile, workload = load_profile("cpu"), load_workload("tiny")
    quantized = cell(Init.ONE_ADAPTER, Quant.INT8, Backend.SINGLE)
    on_amx = predict_cell(quantized, profile, workload, cpu=AMX)
    on_epyc = predict_cell(quantized, profile, workload, cpu=ZEN3)
    assert on_amx.terms["onednn_bf16_kernels"] == pytest.approx(
        cpu_kernels.adapter_kernels(AMX, [(64, 64)], 8, 30, 128)
    )
    assert on_amx.train_bytes - on_epyc.train_bytes == pytest.approx(on_amx.terms["onednn_bf16_kernels"])
    assert "onednn_bf16_kernels" not in on_epyc.terms
    assert "amx path" in on_amx.notes[-1]
    assert "CPU features not given" in predict_cell(quantized, profile, workload).notes[-1]
    # fp32 adapters (unquantized) and full fine-tunes run no bf16 matmul
    for other in (cell(Init.ONE_ADAPTER, Quant.NONE, Backend.SINGLE), cell(Init.TWO_MODELS, Quant.NONE, Backend.DDP)):
        assert "onednn_bf16_kernels" not in predict_cell(other, profile, workload, cpu=AMX).terms
    # a GPU keeps its own kernels: no CPU term whatever the host
    gpu = predict_cell(
        cell(Init.ONE_ADAPTER, Quant.NF4, Backend.SINGLE), load_profile("1xH100"), load_workload("tiny"), cpu=AMX
    )
    assert "onednn_bf16_kernels" not in gpu.terms


def test_this_machine_s_primitives_keep_what_the_table_says():
    """The probe's measurement (32 shapes of one product) against the table's (100 shapes of each of three): the
    same figure, or, where torch runs bf16 matmuls itself, no primitive at all."""
    features = detect_cpu_features()
    path = cpu_kernels.bf16_path(features)
    if path == "aten":
        assert features.onednn.bf16_primitive_bytes is None and features.onednn.bf16_matmul is None
    else:
        assert features.onednn.bf16_primitive_bytes == pytest.approx(cpu_kernels.BF16_PRIMITIVE_BYTES[path], rel=0.3)


def test_a_prediction_names_the_path_and_the_kernels_it_keeps_or_that_no_cpu_was_given():
    profile, workload = load_profile("cpu"), load_workload("tiny")
    quantized = cell(Init.ONE_ADAPTER, Quant.INT8, Backend.SINGLE)
    # 6 problems x 26.84 expected lengths x 682 KiB
    assert predict_cell(quantized, profile, workload, cpu=AMX).notes[-1] == (
        "bf16 adapter matmuls on the given CPU: amx path (107 MiB of oneDNN kernels kept)"
    )
    assert predict_cell(quantized, profile, workload).notes[-1] == (
        "CPU features not given: the bf16 adapter matmuls are predicted as on the CPU first validated (AMD EPYC: "
        "torch's own kernels, nothing kept); with AVX-512 BF16 or AMX oneDNN keeps ~0.67 MiB per matmul shape "
        "(docs/estimator.md, CPUs)"
    )


def test_the_kernels_of_a_prediction_follow_the_micro_steps_and_the_adapters_rank():
    profile, tiny = load_profile("cpu"), load_workload("tiny")
    quantized = cell(Init.ONE_ADAPTER, Quant.INT8, Backend.SINGLE)

    def kernels(workload):
        return predict_cell(quantized, profile, workload, cpu=AMX).terms["onednn_bf16_kernels"]

    # 30 steps of 2 accumulated batches: 60 batches, 6 x 128 x (1 - (127/128)^60) = 281.4 shapes of 682 KiB
    accumulating = tiny.model_copy(update={"train": tiny.train.model_copy(update={"gradient_accumulation_steps": 2})})
    assert kernels(accumulating) == pytest.approx(192.0 * 2**20, rel=1e-4)
    # rank 64 on tiny's 64-wide projections: A's and B's products coincide, 3 problems a length
    wide = tiny.model_copy(update={"lora": tiny.lora.model_copy(update={"r": 64})})
    assert kernels(wide) == pytest.approx(53.62 * 2**20, rel=1e-4)
