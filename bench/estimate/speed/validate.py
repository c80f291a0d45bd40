"""The speed model held against every measured cell (results/<hardware>/<run>/results.jsonl, metrics.tokens_per_s:
the CPU runs, and the GPU runs on the card that ran them) and the published rows: error per cell, median and max
|error| and Spearman's rank correlation per run; and the fit that writes speed_calibration.json."""

import statistics
from dataclasses import dataclass
from pathlib import Path

from bench.errors import BenchError
from bench.estimate.speed import published
from bench.estimate.speed.calibration import (
    ClassConstants,
    HostRate,
    SpeedCalibration,
    constants_for,
    fit_class,
    log_error_range,
)
from bench.estimate.speed.devices import DeviceFigures, card_figures, cpu_figures
from bench.estimate.speed.model import StepSetup, quant_calls, setup_for, step_terms, traffic_of
from bench.matrix.methods import method_spec
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
    """Every ok cell with a throughput, with its step setup at the run's measured sequence length (tokens over
    steps, ranks and sequences: the data's length, an input like the batch size, not a fitted figure), on the device
    that ran it: the CPU's measured rates, or the GPU catalog's card."""
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
            profile, workload = load_profile(record.hardware), load_workload(record.workload)
            rows = method_spec(cell.method).rows_per_example
            sequences = metrics.steps * record.world_size * workload.train.per_device_train_batch_size * rows
            setup = setup_for(cell, profile, workload, metrics.tokens_total / sequences)
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


def _published_device(row: published.PublishedSpeedRow) -> DeviceFigures:
    from bench.matrix.gpus import gpu_by_card

    return card_figures(gpu_by_card(row.card))


def published_rows(calibration: SpeedCalibration) -> list[PublishedSpeed]:
    constants = constants_for(calibration, "gpu")
    out = []
    for row in published.ROWS:
        setup = published.setup_of(row)
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
    """Fit the CPU constants on CPU_FIT_RUNS, the GPU efficiency on published.FITTED and the GPU step overhead on
    the measured GPU cells (fit_gpu); nothing else."""
    fit_rows = [m for m in measured_cells(results, host) if m.run in CPU_FIT_RUNS]
    if not fit_rows:
        raise BenchError(f"none of the fit runs {', '.join(CPU_FIT_RUNS)} under {results}")
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

    gpu = fit_gpu(measured_cells(results, host), host)
    return SpeedCalibration(classes={"cpu": cpu, "gpu": gpu}, host=host)


def fit_gpu(cells: list[MeasuredSpeed], host: HostRate) -> ClassConstants:
    """The GPU constants, each from what defines it: the efficiency from the published rows in published.FITTED
    (large steps, where compute is nearly all of the time), then the per-step overhead from this project's measured
    GPU cells (on the card that ran them, at their measured sequence lengths: short steps, where launches, the
    trainers' Python between kernels and gradient checkpointing's re-entry show), by least squares weighted
    1/measured (relative error), at least 0."""
    import numpy as np

    rows = [r for r in published.ROWS if r.id in published.FITTED]
    host_bytes_s = host.memory_gbps * GB
    bare = [step_terms(published.setup_of(r), _published_device(r), UNIT, host_bytes_s) for r in rows]
    seconds = np.array([published.setup_of(r).step.tokens / r.measured_tokens_per_s for r in rows])
    c = np.array([t["compute"] for t in bare])
    rest = np.array([sum(t.values()) - t["compute"] for t in bare])
    weight = 1.0 / seconds
    inverse = float(np.sum(c * (seconds - rest) * weight**2) / np.sum((c * weight) ** 2))

    measured = [m for m in cells if m.device.device_class == "gpu"]
    own = [step_terms(m.setup, m.device, UNIT, host_bytes_s) for m in measured]
    own_s = np.array([m.s_per_step for m in measured])
    modelled = np.array([inverse * t["compute"] + sum(t.values()) - t["compute"] for t in own])
    overhead = max(0.0, float(np.sum((own_s - modelled) / own_s**2) / np.sum(1.0 / own_s**2))) if measured else 0.0
    gpu = ClassConstants(
        efficiency=1.0 / inverse,
        step_overhead_s=overhead,
        overlap=1.0,
        fitted=["efficiency", "step_overhead_s", "log_error_low", "log_error_high"],
        fitted_on=[*published.FITTED, *sorted({m.run for m in measured})],
        note="efficiency from the published rows, step overhead from this project's own GPU cells (1B and 2.7B "
        "models, a few pairs per step, one card); collective latency unmeasured on GPUs (0); overlap 1: DDP's "
        "bucketed all-reduce and ZeRO-3's prefetch run beside the backward on their own streams (Li et al. 2020; "
        "Rajbhandari et al. 2020). hpu uses these constants, unvalidated.",
    )
    predicted = [*(inverse * c + rest + overhead), *(modelled + overhead)]
    gpu.log_error_low, gpu.log_error_high = log_error_range([float(p) for p in predicted], [*seconds, *own_s])
    return gpu


def _pct(value: float) -> str:
    return f"{value * 100:+.0f}%"


def to_markdown(rows: list[SpeedRow], published_speed: list[PublishedSpeed] | None = None) -> str:
    """Per run: cells, median and max |error| of PREDICTED tokens/s, Spearman's rho; then every cell; then the
    published rows when asked."""
    lines = [
        '# PREDICTED tokens/s held against measurements (speed model, docs/estimator.md "Speed")',
        "",
        "error = predicted / measured tokens/s - 1; rho = Spearman's rank correlation of predicted and measured "
        "tokens/s over the run's ok cells. `fitted`: the run's rows fitted the CPU constants (the rest are held out).",
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
