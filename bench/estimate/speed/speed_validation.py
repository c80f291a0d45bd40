"""The speed model held against every measured cell (results/<hardware>/<run>/results.jsonl, metrics.tokens_per_s:
the CPU runs, and the GPU runs on the card that ran them) and the published rows: error per cell, median and max
|error| and Spearman's rank correlation per run; and the fit that writes speed_calibration.json."""

import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from bench.errors import BenchError
from bench.estimate.speed import published_ratios, published_speeds, work
from bench.estimate.speed.calibration import (
    ClassConstants,
    HostRate,
    SpeedCalibration,
    constants_for,
    fit_class,
    log_error_range,
    source_weighted_range,
)
from bench.estimate.speed.devices import DeviceFigures, card_figures, cpu_figures
from bench.estimate.speed.model import StepSetup, quant_calls, setup_for, step_terms, traffic_of
from bench.matrix.methods import method_spec
from bench.matrix.plan import plan_for
from bench.results.env import read_env
from bench.results.store import load_results
from bench.units import GB

CPU_FIT_RUNS = ("cpu/20261123-141125", "cpu/20261124-001037", "cpu-budget-4g/20261123-083845")
"""The runs the CPU constants are fitted on: the whole tiny-workload DPO matrix (every init, quant and backend),
its offload rows (at 2 ranks and at one), and the small workload's first 4 GiB run; every other run is held out."""
UNIT = ClassConstants(efficiency=1.0)
"""Constants that leave each term as its bare count: compute at the dense peak, no overhead, latency or overlap."""


@dataclass(frozen=True)
class SpeedRow:
    run: str
    """`<hardware>/<run id>`."""
    cell_id: str
    workload: str
    measured_tokens_per_s: float
    predicted_tokens_per_s: float
    measured_s_per_step: float
    predicted_s_per_step: float
    host: str
    """Where the CPU figures came from: env.json, or this machine measured after the run."""
    fitted: bool

    @property
    def error(self) -> float:
        """predicted / measured tokens/s - 1."""
        return self.predicted_tokens_per_s / self.measured_tokens_per_s - 1.0


@dataclass(frozen=True)
class MeasuredSpeed:
    """One measured cell's step time, with the setup the speed model reads for it."""

    run: str
    cell_id: str
    workload: str
    setup: StepSetup
    device: DeviceFigures
    host: str
    tokens_per_s: float
    s_per_step: float


def _cpu_of(run_dir: Path, host: HostRate) -> tuple[float, float, str]:
    """The run's own microbenchmark from env.json, else this machine's measured after the run (labelled, and
    labelled again where the run's CPU model is not this machine's)."""
    env = read_env(run_dir)
    hw = env.hardware if env is not None else None
    if hw is not None and hw.cpu_matmul_gflops and hw.cpu_memory_gbps:
        return hw.cpu_matmul_gflops, hw.cpu_memory_gbps, "env.json"
    label = f"this machine, measured {host.measured_at} after the run"
    if hw is not None and hw.cpu_model and hw.cpu_model not in host.machine:
        label += f"; the run's CPU was {hw.cpu_model}"
    return host.matmul_gflops, host.memory_gbps, label


def _card_of(run_dir: Path) -> DeviceFigures | None:
    """The figures of the GPU a run ran on (env.json's device name through the catalog): under --emulate the big
    card, not the emulated profile's; None where the catalog does not name it."""
    from bench.matrix.gpus import identify

    env = read_env(run_dir)
    names = [g.name for g in env.hardware.gpus] if env is not None else []
    entry = identify(names[0]) if names else None
    return card_figures(entry) if entry is not None else None


def measured_cells(results: Path, host: HostRate) -> list[MeasuredSpeed]:
    """Every ok cell with a throughput measured alone (not ResultRecord.speed_shared), with its step setup at the
    run's measured sequence length (tokens over steps, ranks and sequences: the data's length, an input like the batch
    size, not a fitted figure), on the device that ran it: the CPU's measured rates, or the GPU catalog's card."""
    from bench.matrix.profiles import load_profile, load_workload
    from bench.matrix.scenario import expand, load_matrix

    cells = {c.id: c for c in expand(load_matrix())}
    found: list[MeasuredSpeed] = []
    for path in sorted(results.glob("*/*/results.jsonl")):
        run_dir = path.parent
        run = f"{run_dir.parent.name}/{run_dir.name}"
        try:
            device_kind = load_profile(run_dir.parent.name).device
        except BenchError:  # a folder that is not a shipped profile's (ab/, pipelines)
            continue
        card = _card_of(run_dir) if device_kind == "cuda" else None
        if device_kind != "cpu" and card is None:
            continue
        cpu = _cpu_of(run_dir, host) if card is None else (0.0, 0.0, f"{card.name} (scenarios/gpus.yaml)")
        for record in load_results(path).records:
            metrics = record.metrics
            cell = cells.get(record.cell_id)
            if record.status != "ok" or metrics is None or cell is None or not metrics.tokens_per_s:
                continue
            if record.speed_shared:  # another run or cell shared its machine or device: not this device's speed
                continue
            profile, workload = load_profile(record.hardware), load_workload(record.workload)
            rows = method_spec(cell.method).rows_per_example
            sequences = metrics.steps * record.world_size * workload.train.per_device_train_batch_size * rows
            setup = setup_for(plan_for(cell, profile, workload), metrics.tokens_total / sequences)
            device = card or cpu_figures(cpu[0], cpu[1], profile.threads_per_process, cpu[2])
            found.append(
                MeasuredSpeed(
                    run,
                    record.cell_id,
                    workload.name,
                    setup,
                    device,
                    cpu[2],
                    metrics.tokens_per_s,
                    metrics.step_time_median_s,
                )
            )
    return found


def _seconds(m: MeasuredSpeed, constants: ClassConstants, host_bytes_s: float) -> float:
    return sum(step_terms(m.setup, m.device, constants, host_bytes_s).values())


def speed_rows(results: Path, calibration: SpeedCalibration) -> list[SpeedRow]:
    rows = []
    for m in measured_cells(results, calibration.host):
        constants = constants_for(calibration, m.device.device_class)
        host_bytes_s = m.device.memory_bytes_s if m.device.device_class == "cpu" else calibration.host.memory_gbps * GB
        seconds = _seconds(m, constants, host_bytes_s)
        tokens = m.setup.world * m.setup.step.tokens
        rows.append(
            SpeedRow(
                m.run,
                m.cell_id,
                m.workload,
                m.tokens_per_s,
                tokens / seconds,
                m.s_per_step,
                seconds,
                m.host,
                m.run in constants.fitted_on,
            )
        )
    return rows


@dataclass(frozen=True)
class RunSummary:
    run: str
    workload: str
    cells: int
    median_abs_error: float
    max_abs_error: float
    spearman_rho: float | None
    """Predicted vs measured tokens/s over the run's cells (scipy.stats.spearmanr); None under 3 cells."""
    fitted: bool


def summarize(rows: list[SpeedRow]) -> list[RunSummary]:
    from scipy.stats import spearmanr

    out = []
    for run in sorted({r.run for r in rows}):
        mine = [r for r in rows if r.run == run]
        errors = [abs(r.error) for r in mine]
        rho = None
        if len(mine) >= 3:
            rho = float(
                spearmanr([r.predicted_tokens_per_s for r in mine], [r.measured_tokens_per_s for r in mine]).statistic
            )
        out.append(
            RunSummary(run, mine[0].workload, len(mine), statistics.median(errors), max(errors), rho, mine[0].fitted)
        )
    return out


@dataclass(frozen=True)
class PublishedSpeed:
    id: str
    measured_tokens_per_s: float
    predicted_tokens_per_s: float
    fitted: bool
    assumed: str

    @property
    def error(self) -> float:
        return self.predicted_tokens_per_s / self.measured_tokens_per_s - 1.0


def _published_device(row: published_speeds.PublishedSpeedRow) -> DeviceFigures:
    """The card's figures; cards of a multi-card row talk over PCIe (each source says its cards have no NVLink)."""
    from bench.matrix.gpus import gpu_by_card

    figures = card_figures(gpu_by_card(row.card))
    return figures if row.world == 1 else replace(figures, interconnect_bytes_s=figures.host_link_bytes_s)


def published_rows(calibration: SpeedCalibration) -> list[PublishedSpeed]:
    constants = constants_for(calibration, "gpu")
    out = []
    for row in published_speeds.rows():
        setup = published_speeds.setup_of(row)
        device = _published_device(row)
        seconds = sum(step_terms(setup, device, constants, calibration.host.memory_gbps * GB).values())
        out.append(
            PublishedSpeed(
                row.id,
                row.measured_tokens_per_s,
                setup.step.tokens / seconds,
                row.id in constants.fitted_on,
                row.assumed,
            )
        )
    return out


def fit(results: Path, host: HostRate) -> SpeedCalibration:
    """Fit the CPU constants on CPU_FIT_RUNS and the GPU constants on published_speeds.FITTED with GPU_FIT_RUNS
    (fit_gpu), as measured under `results`; nothing else."""
    cells = measured_cells(results, host)
    if not any(m.run in CPU_FIT_RUNS for m in cells):
        raise BenchError(f"none of the fit runs {', '.join(CPU_FIT_RUNS)} under {results}")
    return fit_cells(cells, host)


def fit_cells(cells: list[MeasuredSpeed], host: HostRate) -> SpeedCalibration:
    """`fit` over measured cells already read (measured_cells)."""
    fit_rows = [m for m in cells if m.run in CPU_FIT_RUNS]
    bare = [step_terms(m.setup, m.device, UNIT, m.device.memory_bytes_s) for m in fit_rows]
    rest = [sum(t.values()) - t["compute"] for t in bare]
    features = [
        [
            t["compute"],
            1.0,
            traffic_of(m.setup).calls,
            float(m.setup.world > 1),
            float(m.setup.backend.offloads),
            quant_calls(m.setup),
        ]
        for t, m in zip(bare, fit_rows, strict=True)
    ]
    measured = [m.s_per_step for m in fit_rows]
    constants = fit_class(features, rest, measured)
    cpu = ClassConstants(
        **constants,
        overlap=0.0,
        fitted=[*constants, "log_error_low", "log_error_high"],
        fitted_on=list(CPU_FIT_RUNS),
        note="overlap 0: gloo's collectives run on the cores that compute (1 thread per rank, 2 ranks, 2 cores)",
    )
    predicted = [_seconds(m, cpu, m.device.memory_bytes_s) for m in fit_rows]
    cpu.log_error_low, cpu.log_error_high = log_error_range(predicted, measured)

    gpu = fit_gpu(cells, host)
    return SpeedCalibration(classes={"cpu": cpu, "gpu": gpu}, host=host)


GPU_FIT_RUNS = ("1xH200/20261126-182033",)
"""This project's GPU run the GPU constants are fitted on, with published_speeds.FITTED (named before the fit):
every other measured GPU run (1xH200/20261126-182856, 1xA10/20261126-182033) is held out."""
NCCL_LATENCY_S = 6e-6
"""Per collective call on GPUs, a stated prior (no multi-GPU run of this project measures it): "When I run with 2
GPUs the latency is approximately 6us" (an NCCL all-reduce of 128 B..64 KiB on an HGX 8x H100 node, NVLSTree,
CUDA graphs; https://github.com/NVIDIA/nccl/issues/1259): the floor of a small collective, without the launch
and Python around it."""
UNIT_GPU = ClassConstants(efficiency=1.0, activation_traffic=True, collective_latency_s=NCCL_LATENCY_S)
"""UNIT with the GPU's own terms: the elementwise and LoRA traffic over the memory bandwidth, the NCCL latency."""
GPU_FEATURES = ("compute", "step_overhead_s", "trl_step_s", "layer_pass_s", "quant_call_s")
"""The columns of the GPU fit: compute at the card's achievable matmul rate (coefficient 1/efficiency), 1 per step,
1 per step of a TRL row (this project's cells), decoder-layer passes per step (work.layer_passes), quantized linear
calls per step (model.quant_calls)."""


THIS_PROJECT = "dpo-bench"
"""The source of this project's own GPU runs."""


@dataclass(frozen=True)
class GpuRow:
    id: str
    setup: StepSetup
    device: DeviceFigures
    measured_s: float
    source: str
    """Who measured it: a published entry's source_key, or this project."""


def gpu_rows(cells: list[MeasuredSpeed]) -> list[GpuRow]:
    """Every GPU row with a measured step time: the published rows, then this project's GPU cells."""
    rows = [
        GpuRow(
            r.id,
            published_speeds.setup_of(r),
            _published_device(r),
            published_speeds.setup_of(r).step.tokens / r.measured_tokens_per_s,
            published_speeds.source_key(r),
        )
        for r in published_speeds.rows()
    ]
    gpu = [m for m in cells if m.device.device_class == "gpu"]
    rows += [GpuRow(m.run, m.setup, m.device, m.s_per_step, THIS_PROJECT) for m in gpu]
    return rows


def fit_gpu(cells: list[MeasuredSpeed], host: HostRate) -> ClassConstants:
    """The GPU constants from the named rows only (published_speeds.FITTED and GPU_FIT_RUNS): GPU_FEATURES together by
    bounded least squares (scipy.optimize.lsq_linear) weighted 1/measured (relative error), every constant at least
    0 and the efficiency at most 1 (no GEMM beats the card's measured achievable matmul rate), over the
    modelled rest (log-prob tiles, elementwise and LoRA traffic, dequantization, optimizer, communication). The
    solver is an active-set one (bvls): a constant the rows would push past its bound is the bound itself (the step
    overhead 0, the efficiency 1), where the trust-region default left it a solver's tolerance inside (5e-20 s). The
    range is the 10th-90th percentile of ln(measured / predicted) over every other GPU row (the held-out ones),
    each source weighing one (calibration.source_weighted_range)."""
    import numpy as np
    from scipy.optimize import lsq_linear

    fitted_on = [*published_speeds.FITTED, *GPU_FIT_RUNS]
    host_bytes_s = host.memory_gbps * GB
    rows = gpu_rows(cells)
    fit_rows = [r for r in rows if r.id in fitted_on]
    held_out = [r for r in rows if r.id not in fitted_on]
    if len(fit_rows) < 2 * len(GPU_FEATURES):
        raise BenchError(f"fitting {len(GPU_FEATURES)} GPU constants needs {2 * len(GPU_FEATURES)} rows")
    bare = [step_terms(r.setup, r.device, UNIT_GPU, host_bytes_s) for r in fit_rows]
    measured = np.array([r.measured_s for r in fit_rows])
    design = np.array(
        [
            [
                t["compute"],
                1.0,
                float(r.setup.trl),
                float(work.layer_passes(r.setup.step)),
                float(quant_calls(r.setup)),
            ]
            for t, r in zip(bare, fit_rows, strict=True)
        ]
    )
    rest = np.array([sum(t.values()) - t["compute"] for t in bare])
    weight = 1.0 / measured
    lower = [1.0] + [0.0] * (len(GPU_FEATURES) - 1)
    found = lsq_linear(design * weight[:, None], (measured - rest) * weight, bounds=(lower, np.inf), method="bvls").x
    gpu = ClassConstants(
        efficiency=1.0 / float(found[0]),
        step_overhead_s=float(found[1]),
        trl_step_s=float(found[2]),
        layer_pass_s=float(found[3]),
        quant_call_s=float(found[4]),
        collective_latency_s=NCCL_LATENCY_S,
        overlap=1.0,
        activation_traffic=True,
        fitted=[*GPU_FEATURES[1:], "efficiency", "log_error_low", "log_error_high"],
        fitted_on=fitted_on,
        note="efficiency (of the card's achievable matmul rate), step overhead, TRL's extra per step, "
        "per-layer-pass time and per quantized call fitted together on Qwen-7B LoRA and Q-LoRA (transformers "
        "Trainer + PEFT, one A100) at 256, 1024 and 4096 tokens and this project's first H200 run (TRL, 1B); the "
        "range from the held-out GPU rows (every other published row and GPU run); collective latency a prior "
        "(6 us, NVIDIA/nccl#1259: an H100 node's small all-reduce); overlap 1: DDP's bucketed all-reduce and "
        "ZeRO-3's prefetch run beside the backward on their own streams (Li et al. 2020; Rajbhandari et al. 2020). "
        "hpu uses these constants, unvalidated.",
    )
    predicted = [sum(step_terms(r.setup, r.device, gpu, host_bytes_s).values()) for r in held_out]
    measured = [r.measured_s for r in held_out]
    gpu.log_error_low, gpu.log_error_high = source_weighted_range(predicted, measured, [r.source for r in held_out])
    return gpu


def _pct(value: float) -> str:
    return f"{value * 100:+.0f}%"


def _ratio_lines(published_speed: list[PublishedSpeed]) -> list[str]:
    """The goals over the published rows: the share within 25 %, and each published ratio (published_ratios)."""
    near = published_ratios.within(published_speed)
    lines = [
        "",
        f"{near} of {len(published_speed)} published rows within {published_ratios.SPEED_GOAL:.0%} "
        f"(goal: {published_ratios.ROW_SHARE_GOAL:.0%}).",
        "",
        "| ratio | rows | measured | PREDICTED | error |",
        "|---|---|---|---|---|",
    ]
    for pair in published_ratios.qlora_pairs(published_speed):
        lines.append(
            f"| LoRA / QLoRA tokens/s | {pair.fast} over {pair.slow} | {pair.measured:.2f} | {pair.predicted:.2f} "
            f"| {_pct(pair.error)} |"
        )
    for pair in published_ratios.offload_pairs(published_speed):
        lines.append(
            f"| no offload / offload tokens/s (each at its own batch) | {pair.fast} over {pair.slow} "
            f"| {pair.measured:.2f} | {pair.predicted:.2f} | {_pct(pair.error)} |"
        )
    return lines


def to_markdown(rows: list[SpeedRow], published_speed: list[PublishedSpeed] | None = None) -> str:
    """Per run: cells, median and max |error| of PREDICTED tokens/s, Spearman's rho; then every cell; then the
    published rows when asked."""
    lines = [
        '# PREDICTED tokens/s held against measurements (speed model, docs/estimator.md "Speed")',
        "",
        "error = predicted / measured tokens/s - 1; rho = Spearman's rank correlation of predicted and measured "
        "tokens/s over the run's ok cells. `fitted`: the run's rows fitted the CPU or GPU constants (the rest are "
        "held out).",
        "",
        "| run | workload | cells | median abs error | max abs error | Spearman rho | fitted | CPU figures |",
        "|---|---|---|---|---|---|---|---|",
    ]
    hosts = {r.run: r.host for r in rows}
    for s in summarize(rows):
        rho = "—" if s.spearman_rho is None else f"{s.spearman_rho:.2f}"
        lines.append(
            f"| {s.run} | {s.workload} | {s.cells} | {s.median_abs_error * 100:.0f}% | {s.max_abs_error * 100:.0f}% "
            f"| {rho} | {'yes' if s.fitted else 'held out'} | {hosts[s.run]} |"
        )
    if published_speed:
        lines += [
            "",
            "## Published rows (scenarios/published/memory.yaml)",
            "",
            "| row | measured tokens/s | PREDICTED tokens/s | error | fitted | assumed |",
            "|---|---|---|---|---|---|",
        ]
        for p in published_speed:
            lines.append(
                f"| {p.id} | {p.measured_tokens_per_s:,.0f} | {p.predicted_tokens_per_s:,.0f} | {_pct(p.error)} "
                f"| {'yes' if p.fitted else 'held out'} | {p.assumed} |"
            )
        lines += _ratio_lines(published_speed)
    lines += [
        "",
        "## Every cell",
        "",
        "| run | cell | measured tokens/s | PREDICTED tokens/s | error | measured s/step | PREDICTED s/step |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.run} | {r.cell_id} | {r.measured_tokens_per_s:,.0f} | {r.predicted_tokens_per_s:,.0f} "
            f"| {_pct(r.error)} | {r.measured_s_per_step:.3f} | {r.predicted_s_per_step:.3f} |"
        )
    return "\n".join(lines) + "\n"
