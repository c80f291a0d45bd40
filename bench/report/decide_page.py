"""The decision page (results/site/decide.html) and its data file: pure, grid and encoded data in, text out.
Computing the data: bench/report/decide_data.py; writing the files: publish.py."""

import json

from markupsafe import Markup

from bench.report.cells import VERDICT_BADGES
from bench.report.decide_data import FLAGS, TOKENS, VERDICT_CODES, pack
from bench.report.decide_grid import DecisionGrid
from bench.report.decide_mfu import CLASS_CODES, NO_RATE
from bench.report.templating import render

PAGE = "decide.html"
DATA_FILE = "decide-data.js"
DATA_FILE_CEILING = 3_000_000
"""The most bytes the data file may have (a page people open on a phone): each method's part of the grid in
scenarios/decide.yaml is sized to keep under it; tests/unit/report/test_decide.py holds the published file to it."""
MEANINGS = {
    "fits": "PREDICTED to fit: 90 % or more of comparable measurements' errors keep it inside the device's memory",
    "likely_fits": "PREDICTED to fit more likely than not (50-90 % of comparable errors keep it inside)",
    "likely_oom": "PREDICTED to run out more likely than not (fits under 10-50 % of comparable errors)",
    "oom": "PREDICTED out of memory (fits under 10 % or fewer of comparable errors)",
    "host_oom": "fits the device, but its offloaded state is over the host memory of a node (advise --host-ram)",
    "unknown": "no memory figure",
    "not_applicable": "cannot run on this hardware",
}
DEFAULTS = {"method": "dpo", "model": "qwen2.5-7b", "gpu": "A10", "count": "2", "length": "2048", "batch": "1"}
"""What the page shows first (the question it was made for: Qwen2.5-7B on two A10s, 2,048 tokens), where the grid
has it."""


def _json(value: object) -> str:
    """JSON safe inside a <script> element."""
    return json.dumps(value, separators=(",", ":")).replace("</", "<\\/")


def data_script(data: dict) -> str:
    """The data file: its small tables as JSON, the per-point arrays packed (decide_data.pack)."""
    return "window.DECIDE=" + _json(pack(data)) + ";\n"


def gpu_names(grid: DecisionGrid) -> dict[str, str]:
    """Every name `--gpu` takes for the page's GPUs (aliases included), as `spelling` folds it -> the catalog name the
    page lists: the URL takes what the CLI takes (`gpu=4090`)."""
    from bench.matrix.gpus import gpu, spelling

    entries = [gpu(name) for name in grid.gpus]
    return {spelling(n): g.name for g in entries for n in (g.name, *g.aliases)}


def render_page(grid: DecisionGrid, data: dict) -> str:
    known = [v for v in VERDICT_BADGES if v in data["verdicts"]]
    present = [*known, *(v for v in data["verdicts"] if v not in known), "not_applicable"]
    legend = [(v, VERDICT_BADGES.get(v, v), MEANINGS.get(v, v)) for v in present]
    config = {
        "codes": VERDICT_CODES,
        "labels": VERDICT_BADGES,
        "flags": FLAGS,
        "tokens": TOKENS,
        "classes": CLASS_CODES,
        "no_rate": NO_RATE,
        "defaults": DEFAULTS,
        "gpu_names": gpu_names(grid),
    }
    return render(
        PAGE,
        config=Markup(_json(config)),
        data_file=DATA_FILE,
        estimator_version=data["estimator_version"],
        models=len(grid.models),
        gpus=len(grid.gpus),
        parts=[
            (
                m["title"],
                ", ".join(map(str, m["counts"])),
                ", ".join(map(str, m["max_lengths"])),
                ", ".join(map(str, m["batch_sizes"])),
            )
            for m in data["methods"]
        ],
        points=grid.size(),
        legend=legend,
    )
