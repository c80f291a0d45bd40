"""The speed model's constants per device class, and the rows each was fitted on (speed_calibration.json).

`fit_class` fits with scipy.optimize.nnls: measured s/step = (1/efficiency) x compute at peak + step overhead +
collective latency x calls + the modelled rest (memory, bandwidth, offload). Written by `python -m bench
validate-speed --fit`; every fitted constant names its rows; every other measured row is held out.
"""

import math
from pathlib import Path

from pydantic import BaseModel

from bench.errors import BenchError
from bench.files import write_whole
from bench.paths import DERIVED_DIR

CALIBRATION_FILE = DERIVED_DIR / "speed_calibration.json"


class ClassConstants(BaseModel):
    efficiency: float
    """Achieved fraction of the device's matmul rate on the model's matmuls: of the dense peak x the card's
    measured achievable fraction on GPUs (devices.matmul_fraction), of the measured matmul rate on CPU."""
    step_overhead_s: float = 0.0
    """Fixed per step: the Python, trainer and launch work that no FLOP or byte count sees."""
    collective_latency_s: float = 0.0
    """Per collective call (and per ZeRO-3/FSDP fetch hook, which runs at any world size)."""
    multi_process_step_s: float = 0.0
    """Per step of a multi-process cell beyond one process's: its ranks share the host (CPU: the same cores)."""
    offload_step_s: float = 0.0
    """Per step of an offload backend: the engine's host-side bookkeeping around CPU Adam."""
    quant_call_s: float = 0.0
    """Per quantized linear call (bitsandbytes' dispatch and dequantization launch)."""
    overlap: float = 0.0
    """Fraction of the compute a backend's communication can hide behind (0: none)."""
    trl_step_s: float = 0.0
    """Per step of a TRL trainer beyond the other stacks' step overhead (its collation of chosen and rejected,
    metrics gathered every step): fitted on this project's TRL cells against the published rows' stacks. CPU: 0,
    its step_overhead_s is TRL's already."""
    layer_pass_s: float = 0.0
    """Per decoder-layer pass (forward, backward, recompute, forward without gradient, per micro-step): the launch
    and Python time of eager PyTorch's kernels, which no FLOP or byte count sees (work.layer_passes)."""
    activation_traffic: bool = False
    """Whether the elementwise ops' and LoRA branches' memory traffic is a term of its own (work.activation_bytes).
    The CPU constants were fitted before the term existed and absorb it: False there."""
    log_error_low: float = 0.0
    log_error_high: float = 0.0
    """10th and 90th percentile of ln(measured / predicted s/step): the range. CPU: on the fitted rows; GPU: on the
    held-out rows (validate.GPU_HELD_OUT), none of which set a constant."""
    fitted: list[str] = []
    """Which of the constants above were fitted (the rest are stated priors)."""
    fitted_on: list[str] = []
    """The rows they were fitted on: run folders or published-figure ids."""
    note: str = ""


class HostRate(BaseModel):
    """This machine's microbenchmark (bench/results/microbench.py), for runs whose env.json predates it."""

    matmul_gflops: float
    memory_gbps: float
    machine: str
    measured_at: str
    note: str


class SpeedCalibration(BaseModel):
    classes: dict[str, ClassConstants]
    host: HostRate


def load_speed_calibration(path: Path = CALIBRATION_FILE) -> SpeedCalibration:
    if not path.is_file():
        raise BenchError(f"{path}: no speed calibration (dpo-bench validate-speed --fit writes it)")
    return SpeedCalibration.model_validate_json(path.read_text(encoding="utf-8"))


def write_speed_calibration(calibration: SpeedCalibration, path: Path = CALIBRATION_FILE) -> None:
    write_whole(path, calibration.model_dump_json(indent=2) + "\n")


def constants_for(calibration: SpeedCalibration, device_class: str) -> ClassConstants:
    found = calibration.classes.get(device_class)
    if found is None:
        found = calibration.classes.get("gpu")  # hpu: no measurement of its own (docs/estimator.md, "Speed")
    if found is None:
        raise BenchError(f"no speed constants for device class {device_class!r}")
    return found


FEATURES = (
    "compute",
    "step_overhead_s",
    "collective_latency_s",
    "multi_process_step_s",
    "offload_step_s",
    "quant_call_s",
)
"""The columns of the fit: compute at the dense peak (its coefficient is 1/efficiency), then one count per
constant (1 per step, collective calls, 1 if multi-process, 1 if offloading, quantized linear calls)."""


def fit_class(features: list[list[float]], rest_s: list[float], measured_s: list[float]) -> dict[str, float]:
    """The FEATURES' constants by non-negative least squares over the rows (scipy.optimize.nnls), each row weighted
    by 1/measured so that short and long steps count alike (relative error). `features`: one row of FEATURES'
    counts per measurement; `rest_s`: the modelled seconds no constant scales (memory, bandwidth)."""
    import numpy as np
    from scipy.optimize import nnls

    if len(measured_s) < 3 * len(FEATURES):
        raise BenchError(f"fitting {len(FEATURES)} constants needs {3 * len(FEATURES)} rows, got {len(measured_s)}")
    weight = 1.0 / np.asarray(measured_s)
    design = np.asarray(features, dtype=float) * weight[:, None]
    target = (np.asarray(measured_s) - np.asarray(rest_s)) * weight
    found, _ = nnls(design, target)
    if found[0] <= 0:
        raise BenchError("the fit found no compute in the rows: the efficiency is undetermined")
    fitted = dict(zip(FEATURES, (float(v) for v in found), strict=True))
    fitted["efficiency"] = 1.0 / fitted.pop("compute")
    return fitted


def log_error_range(predicted_s: list[float], measured_s: list[float]) -> tuple[float, float]:
    """10th and 90th percentile of ln(measured / predicted)."""
    import numpy as np

    ratios = [math.log(m / p) for p, m in zip(predicted_s, measured_s, strict=True)]
    return float(np.percentile(ratios, 10)), float(np.percentile(ratios, 90))


def source_weighted_range(predicted_s: list[float], measured_s: list[float], sources: list[str]) -> tuple[float, float]:
    """10th and 90th percentile of ln(measured / predicted) with each source's rows weighing one source in all: the
    rows of one source share its stack and setup, so they are one piece of evidence, not several
    (scenarios/published/ADMISSION.md's independent sources). Each row sits at the middle of its weight on the
    cumulative scale, and the percentile is read between them."""
    import numpy as np

    ratios = np.array([math.log(m / p) for p, m in zip(predicted_s, measured_s, strict=True)])
    weights = np.array([1.0 / sources.count(s) for s in sources])
    order = np.argsort(ratios)
    cumulative = (np.cumsum(weights[order]) - weights[order] / 2) / weights.sum()
    low, high = np.interp([0.1, 0.9], cumulative, ratios[order])
    return float(low), float(high)
