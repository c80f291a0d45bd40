"""Write results/<HW>/MATRIX.md and matrix.csv from a run's records."""

from pathlib import Path

from bench.errors import BenchError
from bench.report.matrix import csv_frame, render
from bench.results import ENV_FILE, RESULTS_FILE, load_results, read_env
from bench.results_schema import ResultRecord


def run_is_complete(records: dict[str, ResultRecord], cell_ids: list[str]) -> bool:
    return all(cell_id in records for cell_id in cell_ids)


def latest_complete_run(hardware_dir: Path, cell_ids: list[str]) -> Path:
    runs = sorted((p.parent for p in hardware_dir.glob(f"*/{RESULTS_FILE}")), reverse=True)
    for run_dir in runs:
        if run_is_complete(load_results(run_dir).latest_by_cell(), cell_ids):
            return run_dir
    raise BenchError(f"no complete run under {hardware_dir}; run `make bench` without FILTER first")


def context_lines(run_dir: Path) -> list[str]:
    env = read_env(run_dir)
    packages = env.get("packages", {})
    versions = ", ".join(f"{k} {v}" for k, v in packages.items() if v)
    hw = env.get("hardware", {})
    machine = hw.get("cpu_model") or hw.get("machine") or "unknown"
    gpus = ", ".join(g["name"] for g in hw.get("gpus", [])) or "no GPU"
    image = env.get("image") or "none (local venv)"
    return [
        f"Run `{run_dir.name}` · workload `{env.get('workload')}` · measured {env.get('created_at')} "
        f"· executor {env.get('executor')} · image {image} · git {env.get('git_sha')}",
        "",
        f"Machine: {machine}, {hw.get('cpu_count')} cores, {gpus}. Versions: {versions}.",
        "",
        f"Raw records: [`{run_dir.name}/{RESULTS_FILE}`]({run_dir.name}/{RESULTS_FILE}), "
        f"environment: [`{run_dir.name}/{ENV_FILE}`]({run_dir.name}/{ENV_FILE}). Regenerate: "
        f"`python -m bench matrix --hw {env.get('hardware_profile')}`.",
    ]


def write_matrix(run_dir: Path, cell_ids: list[str]) -> Path:
    latest = load_results(run_dir).latest_by_cell()
    records = [latest[c] for c in cell_ids if c in latest]
    hardware = records[0].hardware if records else run_dir.parent.name
    text = render(records, f"DPO compatibility matrix — {hardware}", context_lines(run_dir))
    out = run_dir.parent / "MATRIX.md"
    out.write_text(text, encoding="utf-8")
    csv_frame(records).to_csv(run_dir.parent / "matrix.csv", index=False)
    return out
