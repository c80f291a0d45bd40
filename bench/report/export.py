"""Export a run for github-action-benchmark (`customBiggerIsBetter` / `customSmallerIsBetter` tools).

That action takes one direction per file, so throughput and memory are separate exports.
"""

import statistics

from bench.report.compare import Run
from bench.report.summary import summarize

# metric -> (github-action-benchmark tool, unit)
GAB_METRICS = {
    "throughput": ("customBiggerIsBetter", "tokens/s"),
    "memory": ("customSmallerIsBetter", "MiB"),
}


def gab_entries(run: Run, metric: str) -> list[dict]:
    """[{name, unit, value, extra}] for every cell that is ok in `run`, value = median over its ok trials."""
    unit = GAB_METRICS[metric][1]
    profile = (run.env and run.env.hardware_profile) or (run.records[0].hardware if run.records else "?")
    entries = []
    for cell in summarize(run.records).values():
        values = cell.tokens_per_s if metric == "throughput" else [v / 2**20 for v in cell.train_peak_bytes]
        if cell.status != "ok" or not values:
            continue
        low, high = min(values), max(values)
        entries.append(
            {
                "name": f"{profile}/{cell.cell_id} {metric}",
                "unit": unit,
                "value": round(statistics.median(values), 3),
                "range": f"{high - low:.3f}",
                "extra": f"run {run.name}; median of {len(values)} trial(s); min {low:.3f}, max {high:.3f}",
            }
        )
    return entries
