"""results/<HW>/MATRIX.md and matrix.csv, written from DPO's run and, for each other training method, that
method's own run."""

import datetime as dt
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench.errors import BenchError
from bench.files import write_whole
from bench.matrix.axes import Method
from bench.matrix.cell import Cell, method_of_id
from bench.matrix.scenario import expand, load_matrix, rows_added
from bench.report.matrix_table import csv_frame, render
from bench.report.pipeline_row import pipeline_section
from bench.results.env import read_env
from bench.results.env_schema import EnvFingerprint
from bench.results.layout import ENV_FILE, RESULTS_FILE
from bench.results.runs import later_records, latest_complete_run
from bench.results.schema import ResultRecord
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


def later_rows_line(later: Path, cells: int) -> str:
    """The context line of the rows a later run measured (they joined the matrix after the run above)."""
    return (
        f"{cells} rows that joined the matrix after this run: from run `{later.name}` "
        f"([`{later.name}/{RESULTS_FILE}`]({later.name}/{RESULTS_FILE}), [`{later.name}/{ENV_FILE}`]"
        f"({later.name}/{ENV_FILE}))."
    )


def method_runs(
    hardware_dir: Path, cells: Sequence[Cell], added: Mapping[str, dt.datetime] | None = None
) -> dict[str, Path]:
    """Method -> the newest run under hardware_dir that covers every row of that method (rows added after it started
    excepted); a method no run covers is left out."""
    found = {}
    for method in Method:
        ids = [c.id for c in cells if c.method == method]
        if ids:
            try:
                found[method.value] = latest_complete_run(hardware_dir, ids, added)
            except BenchError:
                continue
    return found


def matrix_title(records: list[ResultRecord], hardware: str) -> str:
    """The page's title: the methods its cells train, in the order they appear. Pure."""
    methods = list(dict.fromkeys(str(r.method) for r in records)) or ["dpo"]
    if methods == ["dpo"]:
        return f"DPO compatibility matrix — {hardware}"
    return f"Compatibility matrix ({', '.join(methods)}) — {hardware}"


def write_matrix(run_dir: Path, cell_ids: list[str], others: Mapping[str, Path] | None = None) -> Path:
    """Every trial of the matrix's cells recorded in `run_dir`, in matrix order (cells no longer in the matrix are
    left out); for each method in `others`, that method's cells from its own run instead, with that run's context."""
    order = {cell_id: n for n, cell_id in enumerate(cell_ids)}
    others = {m: d for m, d in (others or {}).items() if d != run_dir}
    records = [r for r in load_results(run_dir).records if r.cell_id in order and r.method not in others]
    method_context = {}
    for method, other in others.items():
        records += [r for r in load_results(other).records if r.cell_id in order and r.method == method]
        method_context[method] = context_lines(other.name, read_env(other) or EnvFingerprint())[:1]
    present = {r.cell_id for r in records}
    context = context_lines(run_dir.name, read_env(run_dir) or EnvFingerprint())
    dpo_missing = [c for c in cell_ids if c not in present and method_of_id(c) not in others]
    for later, found in later_records(run_dir, dpo_missing).items():
        records += found
        context += ["", later_rows_line(later, len({r.cell_id for r in found}))]
    records.sort(key=lambda r: order[r.cell_id])
    hardware = records[0].hardware if records else run_dir.parent.name
    present = {r.cell_id for r in records}
    pending = [c for c in cell_ids if c not in present and "+" in c]
    text = render(records, matrix_title(records, hardware), context, pending, method_context)
    if pipelines := pipeline_section(run_dir.parent):
        text += "\n" + pipelines
    out = run_dir.parent / "MATRIX.md"
    write_whole(out, text)
    latest = {r.cell_id: r for r in records}
    write_whole(run_dir.parent / "matrix.csv", csv_frame(list(latest.values())).to_csv(index=False))
    return out


def write_hardware_matrix(hardware_dir: Path, scenarios: Path, run_dir: Path | None = None) -> Path:
    """MATRIX.md of a hardware folder: DPO's newest complete run (or `run_dir`) and each other method's."""
    matrix = load_matrix(scenarios / "matrix.yaml")
    cells, added = expand(matrix), rows_added(matrix)
    if run_dir is not None:
        return write_matrix(run_dir, [c.id for c in cells])
    runs = method_runs(hardware_dir, cells, added)
    if "dpo" not in runs:  # one line: the DPO run is missing
        latest_complete_run(hardware_dir, [c.id for c in cells if c.method == "dpo"], added)
    return write_matrix(runs["dpo"], [c.id for c in cells], runs)
