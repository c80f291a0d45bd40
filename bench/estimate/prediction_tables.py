"""Render predictions of a whole matrix: Markdown, CSV, JSON; and the committed results/<HW>/PREDICTED.md + CSV."""

import csv
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from bench.estimate import VERSION
from bench.estimate.predict import Prediction, load_calibration, predict_cell
from bench.estimate.speed.model import SpeedPrediction
from bench.units import MiB, bytes_text

if TYPE_CHECKING:
    from bench.matrix.cell import Cell
    from bench.matrix.profiles import HardwareProfile, Workload
    from bench.results.cpu_features import CpuFeatures


def predict_matrix(
    hardware: str, workload_name: str | None = None, pattern: str | None = None, methods: tuple[str, ...] | None = None
) -> list[Prediction]:
    """Every matrix cell of `methods` (default: every method) matching `pattern`, predicted."""
    from bench.matrix.profiles import load_profile, load_workload

    profile = load_profile(hardware)
    return predict_all(profile, load_workload(workload_name or profile.workload), pattern, methods)


def predict_all(
    profile: "HardwareProfile",
    workload: "Workload",
    pattern: str | None = None,
    methods: tuple[str, ...] | None = None,
    cells: "list[Cell] | None" = None,
    cpu: "CpuFeatures | None" = None,
) -> list[Prediction]:
    """Every matrix cell (or `cells`) of `methods` matching `pattern`, predicted for `profile` and `workload` (on a
    CPU with `cpu`'s features): the one path of `predict --hw/--workload` and of `--gpu`/`--model` with their
    settings."""
    from bench.matrix.scenario import expand, load_matrix, of_methods, select
    from bench.matrix.settings import with_precomputed_reference

    calibration = load_calibration()
    cells = expand(load_matrix()) if cells is None else cells
    if methods is not None:
        cells = of_methods(cells, methods)
    cells = with_precomputed_reference(select(cells, pattern), workload)
    return [predict_cell(c, profile, workload, calibration, cpu=cpu) for c in cells]


def _memory(value: float | None, device: str) -> str:
    """MiB on CPU (its figures are small), GB elsewhere (as cards are sold)."""
    return bytes_text(value, "MiB", 0) if device == "cpu" else bytes_text(value, "GB", 1)


def to_markdown(
    predictions: list[Prediction], device: str, validation: str = "", speeds: dict[str, SpeedPrediction] | None = None
) -> str:
    """`speeds`: a PREDICTED tokens/s column (bench/estimate/speed) where given."""
    first = predictions[0]
    lines = [
        f"# PREDICTED memory — {first.hardware} · workload `{first.workload}` (estimator {VERSION})",
        "",
        "**PREDICTED, not measured.** Per device: `load` after loading, `train` the training peak "
        "(CUDA max allocated on GPU; peak − library baseline on CPU), `reserved` CUDA max reserved (train + the "
        "caching allocator's segment rounding and cached freed blocks; GPU only), `total` what is held against usable "
        "memory "
        "(GPU: the nvidia-smi figure = reserved + CUDA context + NCCL buffers; CPU: train + library baseline), "
        "`range` the 80 % interval of the measured total from the validation errors of comparable cells (a wider "
        "pool, named in `pool`, where fewer than 5 exist); `P(fit)` the share of those errors under which the "
        "measured total stays within usable memory; verdict ✅ fits (P(fit) 90 % or more), ☑️ likely_fits "
        "(50-90 %), ⚠️ likely_oom (10-50 %), 💥 oom (10 % or less), never on the side of fitting when the total is "
        "more than 10 % over (nor of running out when 10 % under); `host` what an offload backend keeps in host "
        "memory per rank instead (on CPU the host is the device: it is part of train). Regenerate: "
        "`make predicted` (every GPU profile) or "
        "`python -m bench predict --hw " + first.hardware + " --write`. Method: docs/estimator.md.",
        "",
    ]
    if validation:
        lines += [validation, ""]
    speed_head, speed_rule = ("PREDICTED tokens/s (range) | ", "---|") if speeds is not None else ("", "")
    if speeds is not None:
        lines += [SPEED_NOTE, ""]
    lines += [
        "| cell | verdict | P(fit) | margin | total | range | pool | train | reserved | load | host | "
        f"{speed_head}largest terms |",
        f"|---|---|---|---|---|---|---|---|---|---|---|{speed_rule}---|",
    ]
    for p in predictions:
        speed = "" if speeds is None else _speed(speeds.get(p.cell_id)) + " | "
        if p.status == "not_applicable":
            lines.append(f"| {p.cell_id} | N/A | — | — | — | — | — | — | — | — | — | {speed}{p.reason.split(':')[0]} |")
            continue
        top = sorted(p.terms.items(), key=lambda kv: -kv[1])[:3]
        terms = ", ".join(f"{k} {_memory(v, device)}" for k, v in top)
        mark = VERDICT_MARK.get(p.verdict or "", p.verdict or "—")
        lines.append(
            f"| {p.cell_id} | {mark} | {_probability(p)} | {_memory(p.margin_bytes, device)} "
            f"| {_memory(p.total_bytes, device)} | {_range(p, device)} | {_pool(p)} | {_memory(p.train_bytes, device)} "
            f"| {_memory(p.reserved_bytes, device)} | {_memory(p.load_bytes, device)} | {_host(p, device)} "
            f"| {speed}{terms} |"
        )
    notes = sorted({n for p in predictions for n in p.notes})
    if notes:
        lines += ["", *[f"- {n}" for n in notes]]
    return "\n".join(lines) + "\n"


SPEED_NOTE = (
    '**PREDICTED tokens/s**: the speed model (docs/estimator.md, "Speed"), over every rank, at full max_length '
    "sequences, with the range its calibration rows spread over, and the MFU it implies (bench/judge/mfu.py's "
    "convention, the card's peak); `python -m bench validate-speed` holds it against every measured CPU cell."
)


def _speed(s: SpeedPrediction | None) -> str:
    if s is None or s.tokens_per_s is None:
        return "—"
    mfu = f" · MFU {s.mfu:.1%}" if s.mfu is not None else ""
    return f"{s.tokens_per_s:,.0f} ({s.tokens_per_s_low:,.0f}–{s.tokens_per_s_high:,.0f}){mfu}"


def _host(p: Prediction, device: str) -> str:
    """`21.2 GB (params 5.6 GB, ...)`: the host share of an offload backend; `—` without one."""
    if not p.host_terms:
        return "—"
    shown = _memory(p.host_bytes, device) + " " if p.host_bytes else ""
    return shown + "(" + ", ".join(f"{k} {_memory(v, device)}" for k, v in p.host_terms.items()) + ")"


VERDICT_MARK = {"fits": "✅ fits", "likely_fits": "☑️ likely_fits", "likely_oom": "⚠️ likely_oom", "oom": "💥 oom"}


def _probability(p: Prediction) -> str:
    return "—" if p.fit_probability is None else f"{p.fit_probability:.0%}"


def _pool(p: Prediction) -> str:
    """`12 comparable` or `wider: cuda:cuda_allocated (35)`."""
    if p.range_kind is None:
        return "—"
    if p.range_kind == p.error_kind:
        return f"{p.range_rows} comparable"
    return f"wider: {p.range_kind} ({p.range_rows})"


def _range(p: Prediction, device: str) -> str:
    if p.range_low_bytes is None or p.range_high_bytes is None:
        return "—"
    return f"{_memory(p.range_low_bytes, device)} – {_memory(p.range_high_bytes, device)}"


HOST_TERM_COLUMNS = ("params", "gradients", "optimizer_states", "offload_buffers", "reference_model")
"""What an offload backend keeps in host memory (Prediction.host_terms)."""
TERM_COLUMNS = (
    "weights",
    "adapters",
    "reference_model",
    "optimizer",
    "optimizer_master",
    "grads_optimizer_master",
    "gradients",
    "zero2_end_of_backward",
    "zero3_gathered_layer",
    "activations",
    "lm_head_backward",
    "full_logits",
    "scalar_head",
    "kl_batch_forward",
    "recomputed_layer",
    "layer_backward",
    "optimizer_step_temporaries",
    "ddp_buckets",
    "zero_buckets",
    "fsdp_gather",
    "dequant_buffer",
    "cublas_workspaces",
    "trainer_state",
    "model_and_data_objects",
    "heap_retention",
    "library_pages",
    "zero3_engine_state",
    "deepspeed_shm_allreduce",
    "offload_staging",
    "offloaded_to_host",
)


def _mib_text(value: float | None) -> str:
    return "" if value is None else f"{value / MiB:.1f}"


CSV_COLUMNS: tuple[tuple[str, Callable[[Prediction], object]], ...] = (
    ("estimator_version", lambda p: VERSION),
    ("predicted", lambda p: "PREDICTED"),
    ("hardware", lambda p: p.hardware),
    ("workload", lambda p: p.workload),
    ("cell_id", lambda p: p.cell_id),
    ("method", lambda p: p.method),
    ("init", lambda p: p.init),
    ("quant", lambda p: p.quant),
    ("backend", lambda p: p.backend),
    ("status", lambda p: p.status),
    ("verdict", lambda p: p.verdict or ""),
    ("margin_mib", lambda p: _mib_text(p.margin_bytes)),
    ("total_mib", lambda p: _mib_text(p.total_bytes)),
    ("train_mib", lambda p: _mib_text(p.train_bytes)),
    ("load_mib", lambda p: _mib_text(p.load_bytes)),
    ("usable_mib", lambda p: _mib_text(p.usable_bytes)),
    ("range_low_mib", lambda p: _mib_text(p.range_low_bytes)),
    ("range_high_mib", lambda p: _mib_text(p.range_high_bytes)),
    ("fit_probability", lambda p: "" if p.fit_probability is None else f"{p.fit_probability:.3f}"),
    ("range_kind", lambda p: p.range_kind or ""),
    ("reserved_mib", lambda p: _mib_text(p.reserved_bytes)),
    ("nvidia_smi_mib", lambda p: _mib_text(p.nvidia_smi_bytes)),
    ("overhead_mib", lambda p: _mib_text(p.overhead_bytes)),
    ("host_mib", lambda p: _mib_text(p.host_bytes)),
)
"""predicted.csv's columns before the terms: name, and the text of a prediction's value."""


def to_csv(predictions: list[Prediction], speeds: dict[str, SpeedPrediction] | None = None) -> str:
    """`speeds`: PREDICTED tokens/s and s/step columns (bench/estimate/speed) where given."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(
        [
            *(name for name, _ in CSV_COLUMNS),
            *(f"{t}_mib" for t in TERM_COLUMNS),
            *(f"host_{t}_mib" for t in HOST_TERM_COLUMNS),
            *(SPEED_COLUMNS if speeds is not None else ()),
        ]
    )
    for p in predictions:
        writer.writerow(
            [
                *(value(p) for _, value in CSV_COLUMNS),
                *(_mib_text(p.terms.get(t)) for t in TERM_COLUMNS),
                *(_mib_text(p.host_terms.get(t)) for t in HOST_TERM_COLUMNS),
                *(_speed_cells(speeds.get(p.cell_id)) if speeds is not None else ()),
            ]
        )
    return buf.getvalue()


SPEED_COLUMNS = (
    "predicted_tokens_per_s",
    "predicted_tokens_per_s_low",
    "predicted_tokens_per_s_high",
    "predicted_s_per_step",
    "predicted_mfu",
)


def _speed_cells(s: SpeedPrediction | None) -> list[str]:
    if s is None or s.tokens_per_s is None:
        return [""] * len(SPEED_COLUMNS)
    figures = [
        f"{v:.1f}" if v >= 1 else f"{v:.4f}"
        for v in (s.tokens_per_s, s.tokens_per_s_low, s.tokens_per_s_high, s.s_per_step)
    ]
    return [*figures, "" if s.mfu is None else f"{s.mfu:.4f}"]


def to_json(predictions: list[Prediction]) -> str:
    return json.dumps([p.model_dump() for p in predictions], indent=2) + "\n"


def predicted_profiles() -> list[str]:
    """The profiles whose PREDICTED.md + predicted.csv are committed: every GPU/accelerator profile (CPU profiles are
    measured here)."""
    from bench.matrix.profiles import available, load_profile
    from bench.paths import scenarios_dir

    return [name for name in available(scenarios_dir() / "hardware") if load_profile(name).device != "cpu"]


def write_predicted(hardware: str, results: Path, validation: str) -> tuple[Path, Path]:
    from bench.estimate.speed.cell_speeds import speeds_for
    from bench.matrix.profiles import load_profile, load_workload

    profile = load_profile(hardware)
    predictions = predict_matrix(hardware)
    speeds = speeds_for(profile, load_workload(profile.workload), [p.cell_id for p in predictions])
    folder = results / hardware
    folder.mkdir(parents=True, exist_ok=True)
    md, csv_path = folder / "PREDICTED.md", folder / "predicted.csv"
    md.write_text(to_markdown(predictions, profile.device, validation, speeds=speeds), encoding="utf-8")
    csv_path.write_text(to_csv(predictions, speeds), encoding="utf-8")
    return md, csv_path
