"""GPU terms and the three figures of a GPU prediction (bench/estimate/gpu_terms.py)."""

import pytest

from bench.estimate import gpu_terms
from bench.estimate.knobs import Knobs
from bench.estimate.predict import predict_cell
from bench.matrix.axes import Backend, Init, Quant
from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.matrix.gpus import load_catalog
from bench.matrix.profiles import load_profile, load_workload
from bench.units import MiB


def cell(init, quant, backend):
    return Cell(init=init, quant=quant, backend=backend, launcher=backend_spec(backend).default_launcher)


def test_gpus_of_the_profiles():
    a10 = gpu_terms.gpu_of(load_profile("2xA10"))
    assert (a10.sms, a10.major, a10.nvlink) == (72, 8, False)
    a100 = gpu_terms.gpu_of(load_profile("2x8xA100-80G"))
    assert (a100.name, a100.nvlink) == ("A100-80G", True)  # the catalog's interconnect
    assert gpu_terms.gpu_of(load_profile("1xT4")).major == 7
    assert gpu_terms.gpu_of(load_profile("1xH100").model_copy(update={"gpu": "MI300X"})) is None
    for name in ("1xH100", "1xL4", "2x4090", "1x4090", "1xA10", "8xA100-80G"):
        assert gpu_terms.gpu_of(load_profile(name)) is not None, name


def test_context_workspaces_and_nccl():
    h100, a10 = gpu_terms.gpu_named("H100-SXM"), gpu_terms.gpu_named("A10")
    assert gpu_terms.cuda_context(h100) == 132 * 3 * MiB
    assert gpu_terms.cublas_workspaces(h100) == 2 * (32 * MiB + 1 * MiB)  # Hopper's 32 MiB default
    assert gpu_terms.cublas_workspaces(a10) == 2 * (8.125 * MiB + 1 * MiB)  # :4096:2:16:8
    assert gpu_terms.nccl_buffers(h100, 1) == 0
    assert gpu_terms.nccl_buffers(h100, 8) == 24 * 2 * 10 * MiB
    assert gpu_terms.nccl_buffers(a10, 2) == 2 * 2 * 10 * MiB


def test_allocated_reserved_nvidia_smi_in_order():
    profile, workload = load_profile("2xA10"), load_workload("phi-2")
    p = predict_cell(cell(Init.ONE_ADAPTER, Quant.NONE, Backend.DDP), profile, workload)
    assert p.memory_kind == "cuda_allocated"
    assert p.train_bytes < p.reserved_bytes < p.nvidia_smi_bytes == p.total_bytes + p.paged_bytes
    gpu = gpu_terms.gpu_named("A10")
    assert p.nvidia_smi_bytes - p.reserved_bytes == pytest.approx(
        gpu_terms.cuda_context(gpu)
        + gpu_terms.training_kernels(gpu)
        + gpu_terms.nccl_buffers(gpu, 2)
        + gpu_terms.nccl_communicator(2, deepspeed=False)
    )
    assert p.terms["cublas_workspaces"] == gpu_terms.cublas_workspaces(gpu)
    expandable = predict_cell(
        cell(Init.ONE_ADAPTER, Quant.NONE, Backend.DDP), profile, workload, knobs=Knobs(expandable_segments=True)
    )
    assert expandable.reserved_bytes < p.reserved_bytes and expandable.train_bytes == p.train_bytes


def test_an_unknown_gpu_is_said_and_taken_as_an_h100():
    profile = load_profile("1xH100").model_copy(update={"name": "1xMI300X", "gpu": "MI300X"})
    p = predict_cell(cell(Init.ONE_ADAPTER, Quant.NONE, Backend.SINGLE), profile, load_workload("llama-3.2-1b"))
    assert any("(MI300X) has no CUDA figures: taken as H100-SXM" in n for n in p.notes)
    workload = load_workload("llama-3.2-1b")
    h100 = predict_cell(cell(Init.ONE_ADAPTER, Quant.NONE, Backend.SINGLE), load_profile("1xH100"), workload)
    assert p.total_bytes == h100.total_bytes


def test_allocator_overhead_half_a_rounding_step_per_large_tensor_and_one_freed_transient():
    # c10/cuda/CUDACachingAllocator.cpp: large segments are rounded to 2 MiB, 1 MiB lost on average per tensor
    assert gpu_terms.allocator_overhead(10, 100.0 * MiB, expandable_segments=False) == 10 * MiB + 100 * MiB
    # expandable segments: a freed range serves any later request, no cached block of the transient
    assert gpu_terms.allocator_overhead(10, 100.0 * MiB, expandable_segments=True) == 10 * MiB
    assert gpu_terms.allocator_overhead(0, 0.0, expandable_segments=False) == 0


def test_the_gpus_of_the_data_sheets():
    # NVIDIA data sheets and whitepapers: SM counts, compute capability majors (Turing 7, Ampere/Ada 8, Hopper 9,
    # Blackwell 10 and 12); NVLink where the catalog's interconnect is NVLink
    assert {e.name: (g.sms, g.major, g.nvlink) for e in load_catalog().gpus if (g := gpu_terms.gpu_named(e.name))} == {
        "T4": (40, 7, False),
        "V100-16G": (80, 7, True),  # SXM2: 80 SMs, NVLink 2.0
        "V100-32G": (80, 7, True),
        "L4": (58, 8, False),
        "A10": (72, 8, False),
        "A10G": (80, 8, False),
        "RTX-3090": (82, 8, True),
        "RTX-4090": (128, 8, False),
        "RTX-5090": (170, 12, False),
        "RTX-A6000": (84, 8, True),
        "RTX-6000-Ada": (142, 8, False),  # AD102 as the L40S: no NVLink
        "L40S": (142, 8, False),
        "A100-40G": (108, 8, True),
        "A100-80G": (108, 8, True),
        "A800": (108, 8, True),  # the A100 with NVLink cut to 400 GB/s
        "H100-PCIe": (114, 9, False),
        "H100-SXM": (132, 9, True),
        "H800": (132, 9, True),  # the H100 SXM with NVLink cut to 400 GB/s
        "H20": (78, 9, True),  # SM count from a device listing, not a data sheet (scenarios/gpus.yaml says so)
        "H200": (132, 9, True),
        "B200": (148, 10, True),
    }


def test_the_training_kernels_term_is_what_the_first_gpu_runs_measured():
    """TRAINING_KERNELS_BYTES is read from the committed GPU records, not chosen: NVML's process figure less torch's
    reserved peak, less the H200's per-SM context, median over the single-process cells without DeepSpeed."""
    import statistics

    from bench.estimate import gpu_terms
    from bench.paths import PROJECT_ROOT
    from bench.results.store import load_results
    from bench.units import MiB

    outside = [
        r.metrics.nvml_peak_bytes - r.metrics.cuda_reserved_peak_bytes
        for run in gpu_terms.MEASURED_ON
        for r in load_results(PROJECT_ROOT / run).records
        if r.status == "ok" and r.world_size == 1 and "zero" not in r.backend
    ]
    assert len(outside) == 8
    assert max(outside) - min(outside) < 16 * MiB  # one figure per process, whatever the model or method
    h200 = gpu_terms.gpu_named("H200")
    measured = statistics.median(outside) - gpu_terms.cuda_context(h200)
    assert abs(measured - gpu_terms.training_kernels(h200)) < 1 * MiB


def test_an_nccl_communicator_where_a_process_group_runs_collectives():
    # NVIDIA/nccl#2366: 484 MiB for a one-GPU communicator, 996 MiB with NCCL 2.28's one-rank NET buffer
    assert gpu_terms.nccl_communicator(1, deepspeed=False) == 0  # torch opens none without a collective
    assert gpu_terms.nccl_communicator(1, deepspeed=True) == 996 * MiB
    assert gpu_terms.nccl_communicator(8, deepspeed=False) == 484 * MiB
    # with 8x H100's ring buffers: 964 MiB, against NVIDIA/nccl#1685's 1.06 GB (1011 MiB) held by NCCL
    assert gpu_terms.nccl_communicator(8, False) + gpu_terms.nccl_buffers(gpu_terms.gpu_named("H100-SXM"), 8) == (
        964 * MiB
    )


def test_the_deepspeed_cell_of_the_first_gpu_runs_holds_its_communicator_beyond_the_kernels():
    """The one-rank ZeRO cell held ~950 MiB more outside the allocator than the cells without DeepSpeed: the
    communicator term, taken from NCCL's reports, is within 64 MiB of it."""
    from bench.paths import PROJECT_ROOT
    from bench.results.store import load_results

    zero = [
        r.metrics.nvml_peak_bytes - r.metrics.cuda_reserved_peak_bytes
        for run in gpu_terms.MEASURED_ON
        for r in load_results(PROJECT_ROOT / run).records
        if r.status == "ok" and r.world_size == 1 and "zero" in r.backend and r.metrics.nvml_peak_bytes
    ]
    assert zero
    h200 = gpu_terms.gpu_named("H200")
    kernels = gpu_terms.cuda_context(h200) + gpu_terms.training_kernels(h200)
    for outside in zero:
        assert abs(outside - kernels - gpu_terms.nccl_communicator(1, deepspeed=True)) < 64 * MiB


def test_lora_input_copies_of_one_recomputed_layer_on_gpus_only():
    """With checkpointing only the recomputed layer holds its copies; fp32 adapters under bf16 autocast save a bf16
    copy of each adapted input (peft lora Linear.forward). CPU cells count none."""
    workload = load_workload("llama-3.2-1b")
    one = cell(Init.ONE_ADAPTER, Quant.NONE, Backend.SINGLE)
    p = predict_cell(one, load_profile("1xH200"), workload)
    from bench.estimate.shapes import shapes_for

    shapes = shapes_for(workload)
    adapted = shapes.lora_targets(workload.lora.target_modules)
    tokens = p.terms["lora_input_copies"] / (
        sum(lin.in_features for lin in adapted) // shapes.layers * 2
        + workload.lora.r * len(adapted) // shapes.layers * 2
    )
    assert tokens == 2 * workload.train.per_device_train_batch_size * workload.train.max_length  # DPO: 2B rows
    assert "lora_input_copies" not in predict_cell(one, load_profile("cpu"), load_workload("tiny")).terms
