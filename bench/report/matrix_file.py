"""results/<HW>/MATRIX.md and matrix.csv, written from one run."""

from pathlib import Path

from bench.report.matrix import csv_frame, render
from bench.results.env import read_env
from bench.results.env_schema import EnvFingerprint
from bench.results.layout import ENV_FILE, RESULTS_FILE
from bench.results.store import load_results


def context_lines(run_name: str, env: EnvFingerprint) -> list[str]:
    """What MATRIX.md says above the table: the run, its environment, where the raw data is."""
    return [
        f"Run `{run_name}` · workload `{env.workload}` · measured {env.created_at} "
        f"· executor {env.executor} · image {env.image_label} · git {env.git_label}",
        "",
        f"Machine: {env.hardware.summary}. Versions: {env.versions}.",
        "",
        f"Raw records: [`{run_name}/{RESULTS_FILE}`]({run_name}/{RESULTS_FILE}), "
        f"environment: [`{run_name}/{ENV_FILE}`]({run_name}/{ENV_FILE}). Regenerate: "
        f"`python -m bench matrix --hw {env.hardware_profile}`.",
    ]


def write_matrix(run_dir: Path, cell_ids: list[str]) -> Path:
    """Every trial of the matrix's cells, in matrix order; cells no longer in the matrix are left out."""
    order = {cell_id: n for n, cell_id in enumerate(cell_ids)}
    records = sorted((r for r in load_results(run_dir).records if r.cell_id in order), key=lambda r: order[r.cell_id])
    hardware = records[0].hardware if records else run_dir.parent.name
    env = read_env(run_dir) or EnvFingerprint()
    present = {r.cell_id for r in records}
    pending = [c for c in cell_ids if c not in present and "+" in c]
    text = render(records, f"DPO compatibility matrix — {hardware}", context_lines(run_dir.name, env), pending)
    out = run_dir.parent / "MATRIX.md"
    out.write_text(text, encoding="utf-8")
    latest = {r.cell_id: r for r in records}
    csv_frame(list(latest.values())).to_csv(run_dir.parent / "matrix.csv", index=False)
    return out
