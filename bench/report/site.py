"""The static results site: a short index.html linking one self-contained page per hardware profile (inline CSS,
JS and SVG, nothing fetched), and the decision page (decide_page.py).

Pure: `ProfileView`s in, HTML text out. This module builds what each part of the page shows (the view data); the
HTML is in the Jinja templates of bench/report/templates/ (page.html and the macros it imports), the plots' SVG comes
from plots.py (matplotlib). Reading files is publish.py's job.
"""

import json
import re
from dataclasses import dataclass, field
from html import escape

from markupsafe import Markup

from bench.matrix.axes import Backend
from bench.report import plots
from bench.report.cells import BADGES, budget_line, cell_detail, gib, is_link, legend, method_title, mib
from bench.report.grid import Grid, build_grid, in_axis_order, row_label
from bench.report.summary import CellSummary
from bench.report.templating import call, render
from bench.results.env_schema import EnvFingerprint
from bench.results.schema import Learning, RankMemoryFigures, ResultRecord, StageRecord, Status
from bench.units import MiB, bytes_text

# Tableau 10, assigned by a backend's position in the Backend axis: a new backend gets the next colour (they
# repeat after ten).
PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#76b7b2",
    "#e15759",
    "#59a14f",
    "#b07aa1",
    "#edc948",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)
UNKNOWN_COLOR = "#999"


def backend_color(backend: str) -> str:
    axis = [b.value for b in Backend]
    return PALETTE[axis.index(backend) % len(PALETTE)] if backend in axis else UNKNOWN_COLOR


# Background of a cell and its badge, per status (class `s-<status>`); the status legend lists them in the Status
# enum's order. A status added to the enum without a colour here fails tests/unit/report/test_publish.py.
STATUS_COLORS = {
    Status.OK: "background:#dff5e1",
    Status.OOM: "background:#f9d3c4",
    Status.PREDICTED_OOM: "background:#fbeee8;color:#844;border:1px dashed #c96",
    Status.ERROR: "background:#fbe0e0",
    Status.TIMEOUT: "background:#fde9c8",
    Status.HANG: "background:#f5e6c8;color:#6b4a00",
    Status.SILENT_FALLBACK: "background:#fff4bf",
    Status.NOT_APPLICABLE: "background:#eee;color:#666",
    Status.UNTESTED: "background:#e4ebf5;color:#555",
    Status.LEARNING_FAILED: "background:#ecdff7",
    Status.NOT_RUN: "background:#f4f4f4;color:#777;border:1px dashed #bbb",
    Status.HARNESS: "background:#e8eef0;color:#345;border:1px dashed #89a",
}


def status_css() -> str:
    return "".join(f".s-{status.value}{{{STATUS_COLORS[status]}}}" for status in Status)


def status_badges() -> list[tuple[str, str]]:
    """(status, mark) in the enum's order."""
    return [(status.value, BADGES[status]) for status in Status]


def status_legend() -> str:
    return call("matrix.html", "status_legend", status_badges())


@dataclass(frozen=True)
class ConfigFile:
    path: str
    text: str | None
    """None when the file is not in the published results."""


@dataclass(frozen=True)
class ProfileView:
    hardware: str
    run_name: str
    complete: bool
    env: EnvFingerprint | None
    """None when the run has no env.json."""
    records: dict[str, ResultRecord]
    """Newest record per cell, in matrix order: what the cell panel shows."""
    cells: dict[str, CellSummary]
    """Trials folded: status over all trials, metric medians."""
    configs: dict[str, list[ConfigFile]]
    method: str = "dpo"
    """The training method whose cells the view shows (a profile has a view per method that has a run)."""
    pipelines: list[list[StageRecord]] = field(default_factory=list)
    """The profile's newest pipeline run per workload (bench/pipeline), shown with its DPO view."""

    @property
    def label(self) -> str:
        """`cpu` for DPO's view, `cpu · sft` for another method's."""
        return self.hardware if self.method == "dpo" else f"{self.hardware} · {self.method}"

    @property
    def anchor(self) -> str:
        return f"hw-{self.hardware}" if self.method == "dpo" else f"hw-{self.hardware}-{self.method}"


def panel_id(hardware: str, cell_id: str) -> str:
    return f"cell-{hardware}-{cell_id}"


def reproduce_command(hardware: str, cell_id: str) -> str:
    return f"make bench HW={hardware} FILTER='{cell_id}'"


# ---------------------------------------------------------------- matrix


@dataclass(frozen=True)
class GridView:
    """A Grid as a table shows it (matrix.html's grid_table)."""

    backends: list[str]
    rows: list[tuple[str, list[str | None]]]
    """(row label, the cell id under each backend; None: not run)."""
    variants: list[str]


def grid_view(grid: Grid) -> GridView:
    rows = [(row_label(i, q), [grid.cell(i, q, b) for b in grid.backends]) for i, q in grid.rows]
    return GridView(grid.backends, rows, grid.variants)


@dataclass(frozen=True)
class CellLink:
    cell_id: str
    status: str
    panel_id: str
    mark: str
    label: str
    """What follows the mark: throughput, memory, error class."""


def cell_links(view: ProfileView) -> dict[str, CellLink]:
    return {
        cell_id: CellLink(cell_id, s.status, panel_id(view.hardware, cell_id), BADGES[Status(s.status)], cell_detail(s))
        for cell_id, s in view.cells.items()
    }


def matrix_table(view: ProfileView) -> str:
    grid = grid_view(build_grid(view.records.values()))
    return call("matrix.html", "matrix_table", grid, view.hardware, cell_links(view))


@dataclass(frozen=True)
class Heading:
    hardware: str
    run_name: str
    created_at: str
    workload: str
    image: str
    complete: bool
    budget: str | None


def heading(view: ProfileView) -> Heading:
    env = view.env or EnvFingerprint()
    budget = budget_line(view.records.values())
    return Heading(
        view.hardware if view.method == "dpo" else f"{view.hardware} · {method_title(view.method)}",
        view.run_name,
        env.created_at or "?",
        env.workload or "?",
        env.image_label,
        view.complete,
        budget,
    )


def stage_html(record: StageRecord) -> str:
    text = f" ({record.error_class})" if record.error_class else ""
    if record.wall_s is not None:
        text += f" {record.wall_s:,.1f} s"
    if record.peak_bytes is not None:
        text += f" · {mib(record.peak_bytes)}"
    title = record.message or ", ".join(f"{k} {v}" for k, v in record.checks.items() if k != "text")
    mark = f'<span class="mark">{escape(BADGES[Status(record.status)])}</span>'
    return f'<span class="cell s-{escape(record.status)}" title="{escape(title)}">{mark}{escape(text)}</span>'


def pipelines_html(runs: list[list[StageRecord]]) -> str:
    """The pipeline as one row of stages per workload (bench/pipeline): status, wall time, peak memory."""
    if not runs:
        return ""
    head = "".join(f"<th>{r.index}. {escape(r.stage)}</th>" for r in runs[0])
    rows = "".join(
        f"<tr><th>{escape(stages[0].workload)} <code>{escape(stages[0].run_id)}</code></th>"
        + "".join(f"<td>{stage_html(r)}</td>" for r in stages)
        + "</tr>"
        for stages in runs
    )
    return (
        "<h4>Pipeline: SFT → merge → DPO → merge → generate (a process per stage)</h4>"
        f'<table class="matrix pipeline"><thead><tr><th>workload · run</th>{head}</tr></thead><tbody>{rows}'
        "</tbody></table>"
    )


# ---------------------------------------------------------------- cell panel


def _fmt_bytes(value: float | None) -> str:
    return bytes_text(value, "MiB", 1)


def peak_kind(record: ResultRecord) -> str:
    """What Metrics.peak_bytes is for this record."""
    m = record.metrics
    if m is not None and m.memory_kind != "rss":
        return "CUDA max allocated"
    return "kernel cgroup peak" if record.memory_budget_bytes is not None else "peak RSS"


def _first(*values: float | None) -> float | None:
    return next((v for v in values if v is not None), None)


Rows = list[tuple[str, str]]
"""(label, value) lines of a two-column table."""


def metrics_rows(record: ResultRecord, summary: CellSummary) -> Rows:
    """The metrics table; empty when the cell measured nothing."""
    m = record.metrics
    if m is None:
        return []
    tokens = _first(summary.headline_tokens_per_s, m.tokens_per_s)
    train_peak = _first(summary.headline_train_peak_bytes, m.train_peak_bytes)
    trials = ", ".join(f"{v:,.0f}" for v in summary.tokens_per_s)
    memory = []
    if m.model_memory_bytes is not None or m.peak_bytes is not None:
        model = _first(summary.headline_model_memory_bytes, m.model_memory_bytes)
        peak = _first(summary.headline_peak_bytes, m.peak_bytes)
        memory = [
            ("model memory (peak − library baseline, max over ranks, median)", _fmt_bytes(model)),
            (f"peak ({peak_kind(record)}, median)", _fmt_bytes(peak)),
            ("library baseline (libraries imported, model not loaded)", _fmt_bytes(m.baseline_bytes)),
        ]
    return [
        ("tokens/s (median)", f"{tokens:,.1f}" + (f" — trials: {trials}" if len(summary.tokens_per_s) > 1 else "")),
        ("pairs/s", f"{m.pairs_per_s:,.2f}"),
        ("step time median / p90", f"{m.step_time_median_s * 1000:,.1f} ms / {m.step_time_p90_s * 1000:,.1f} ms"),
        ("steps (warm-up)", f"{m.steps} ({m.warmup_steps})"),
        ("tokens total", f"{m.tokens_total:,}"),
        *memory,
        (f"train peak ({m.memory_kind}, median)", _fmt_bytes(train_peak)),
        ("load peak", _fmt_bytes(m.load_peak_bytes)),
        ("CUDA reserved peak", _fmt_bytes(m.cuda_reserved_peak_bytes)),
        ("host peak RSS", _fmt_bytes(m.host_peak_rss_bytes)),
        ("memory growth / step", _fmt_bytes(m.mem_growth_per_step_bytes)),
        ("load time", "—" if m.load_s is None else f"{m.load_s:.2f} s"),
        ("MFU", "—" if m.mfu is None else f"{m.mfu:.2%}"),
    ]


def _loss(value: float | None) -> str:
    return "—" if value is None else f"{value:.4f}"


@dataclass(frozen=True)
class LearningView:
    rows: Rows
    failures: list[str]
    """Empty: the learning check passed."""


def learning_view(learning: Learning | None) -> LearningView | None:
    """The learning check's evidence: first / end / last loss, reward accuracy, and what failed."""
    if learning is None:
        return None
    rows = [
        ("first loss (ln 2 = 0.6931 expected)", _loss(learning.first_loss)),
        ("end loss (mean of the last quarter of the steps)", _loss(learning.end_loss)),
        ("last loss", _loss(learning.last_loss)),
        ("reward accuracy (last step)", "—" if learning.reward_accuracy is None else f"{learning.reward_accuracy:.2%}"),
    ]
    if learning.losses:
        finite = sum(v is not None for v in learning.losses)
        rows.append(("steps with a finite loss", f"{finite} of {len(learning.losses)}"))
    return LearningView(rows, list(learning.failures))


@dataclass(frozen=True)
class PredictionView:
    title: str
    rows: Rows


def prediction_view(record: ResultRecord) -> PredictionView | None:
    """The memory estimator's prediction, made before the cell ran (or instead of running it), beside what was
    measured: always labelled as a prediction."""
    p = record.prediction
    if p is None:
        return None
    rows = [
        ("verdict", p.verdict),
        ("train peak per device", _fmt_bytes(p.train_bytes)),
        ("total with context / baseline and slack", _fmt_bytes(p.total_bytes)),
        ("usable", _fmt_bytes(p.usable_bytes)),
        ("margin", bytes_text(p.margin_bytes, "MiB", 0, sign=True)),
    ]
    largest = sorted(p.terms.items(), key=lambda kv: -kv[1])[:4]
    if largest:
        rows.append(("largest terms", ", ".join(f"{k} {bytes_text(v, 'MiB', 0)}" for k, v in largest)))
    return PredictionView(f"Predicted memory (estimator {p.estimator_version}; a prediction, not a measurement)", rows)


def prediction_section(record: ResultRecord) -> str:
    view = prediction_view(record)
    return "" if view is None else call("panel.html", "prediction", view)


def rank_memory_rows(record: ResultRecord) -> list[list[str]]:
    """Each rank's memory figures (also for failed cells: an OOM-killed rank has its kernel peak here); the budget
    itself is among the panel's facts."""

    def row(f: RankMemoryFigures) -> list[str]:
        figures = (f.baseline_rss_bytes, f.baseline_cgroup_bytes, f.peak_rss_bytes, f.kernel_peak_bytes)
        return [
            str(f.rank),
            *(_fmt_bytes(v) for v in figures),
            _fmt_bytes(f.limit_bytes),
            "yes" if f.oom_killed else "no",
            "—" if f.longest_batch is None else str(f.longest_batch),
        ]

    return [row(f) for f in record.rank_memory]


@dataclass(frozen=True)
class KnownIssueLink:
    """A failed cell's known issue as the site shows it; the issue itself is bench/matrix/known_issues.py KnownIssue."""

    text: str
    link: bool
    """`text` is a URL."""
    note: str | None


@dataclass(frozen=True)
class Panel:
    panel_id: str
    cell_id: str
    hardware: str
    status: str
    mark: str
    status_text: str
    """The status with its error class."""
    facts: Rows
    message: str
    known_issue: KnownIssueLink | None
    mismatches: list[str]
    metrics: Rows
    learning: LearningView | None
    rank_memory: list[list[str]]
    prediction: PredictionView | None
    reproduce: str
    configs: list[ConfigFile]
    engagement: str | None
    """What really ran, as JSON."""
    log_tail: str | None
    """Only for a cell that is not ok."""


def panel(view: ProfileView, cell_id: str) -> Panel:
    record, summary = view.records[cell_id], view.cells[cell_id]
    status = summary.status + (f" ({summary.error_class})" if summary.error_class else "")
    facts = [
        ("status", status + (" — flaky: some trials failed" if summary.flaky else "")),
        ("launcher", record.launcher),
        ("options", ", ".join(record.options) or "none"),
        ("world size", str(record.world_size)),
        ("trials", str(summary.trials)),
        ("wall time", "—" if record.wall_s is None else f"{record.wall_s:.1f} s"),
    ]
    if record.memory_budget_bytes is not None:
        facts.append(("memory budget", f"{gib(record.memory_budget_bytes)} per rank (kernel memory cgroup)"))
    link = summary.known_issue
    return Panel(
        panel_id=panel_id(view.hardware, cell_id),
        cell_id=cell_id,
        hardware=view.hardware,
        status=summary.status,
        mark=BADGES[Status(summary.status)],
        status_text=status,
        facts=facts,
        message=summary.message,
        known_issue=KnownIssueLink(link, is_link(link), summary.known_issue_note) if link else None,
        mismatches=list(record.mismatches),
        metrics=metrics_rows(record, summary),
        learning=learning_view(record.learning),
        rank_memory=rank_memory_rows(record),
        prediction=prediction_view(record),
        reproduce=reproduce_command(view.hardware, cell_id),
        configs=view.configs.get(cell_id, []),
        engagement=None if record.engagement is None else json.dumps(record.engagement.model_dump(), indent=1),
        log_tail=record.log_tail if record.status != Status.OK else None,
    )


def cell_panel(view: ProfileView, cell_id: str) -> str:
    return call("panel.html", "cell_panel", panel(view, cell_id))


# ---------------------------------------------------------------- plots (drawn by bench/report/plots.py)


def scatter_dots(view: ProfileView) -> list[plots.Dot]:
    """A dot per ok cell with both headline figures; its id names the cell (`point-<hardware>-<cell>`, as the cell's
    panel is `cell-<hardware>-<cell>`)."""
    dots = []
    for cell_id, s in view.cells.items():
        tokens, memory = s.headline_tokens_per_s, s.headline_train_peak_bytes
        if s.status == Status.OK and tokens is not None and memory is not None:
            backend = view.records[cell_id].backend
            dots.append(
                plots.Dot(f"point-{view.hardware}-{cell_id}", backend, backend_color(backend), memory / MiB, tokens)
            )
    return dots


def scatter_svg(view: ProfileView) -> str:
    """tokens/s against peak training memory, one dot per ok cell, coloured by backend; every backend present in the
    legend, in axis order."""
    dots = scatter_dots(view)
    legend = [(b, backend_color(b)) for b in in_axis_order((d.backend for d in dots), Backend)]
    return plots.scatter(f"{view.label}: tokens/s vs peak memory", f"scatter-{view.anchor}", dots, legend)


def winners(view: ProfileView) -> list[tuple[str, str | None, float | None]]:
    """Per init · quant row: the backend with the highest median tokens/s among ok base cells (None when none
    works); launcher and option variants do not compete."""
    grid = build_grid(view.records.values())
    rows = []
    for init, quant in grid.rows:
        best: tuple[str | None, float | None] = (None, None)
        for backend in grid.backends:
            cell_id = grid.cell(init, quant, backend)
            summary = view.cells.get(cell_id) if cell_id else None
            if summary is None or summary.status != Status.OK or summary.headline_tokens_per_s is None:
                continue
            if best[1] is None or summary.headline_tokens_per_s > best[1]:
                best = (backend, summary.headline_tokens_per_s)
        rows.append((row_label(init, quant), *best))
    return rows


def winner_bars(view: ProfileView) -> list[plots.Bar]:
    """A bar per init · quant row; its id names the row (`winner-<hardware>-<method>-<init>-<quant>`)."""
    return [
        plots.Bar(
            f"winner-{view.hardware}-{view.method}-{re.sub(r'[^A-Za-z0-9_.]+', '-', key)}",
            key,
            backend,
            tokens,
            backend_color(backend) if backend is not None else UNKNOWN_COLOR,
        )
        for key, backend, tokens in winners(view)
    ]


def winners_svg(view: ProfileView) -> str:
    title = f"{view.label}: fastest working backend per init · quant"
    return plots.winners(title, f"winners-{view.anchor}", winner_bars(view))


# ---------------------------------------------------------------- page


@dataclass(frozen=True)
class ProfilePage:
    """One profile's parts of the page: its matrix, its plots and its cell panels."""

    hardware: str
    label: str
    """`cpu` for DPO's view, `cpu · sft` for another method's."""
    anchor: str
    heading: Heading
    grid: GridView
    links: dict[str, CellLink]
    scatter: Markup
    winners: Markup
    panels: list[Panel]
    pipeline: Markup
    """The pipeline's row of stages (DPO's view only), empty without a pipeline run."""


def profile_page(view: ProfileView) -> ProfilePage:
    return ProfilePage(
        hardware=view.hardware,
        label=view.label,
        anchor=view.anchor,
        heading=heading(view),
        grid=grid_view(build_grid(view.records.values())),
        links=cell_links(view),
        scatter=Markup(scatter_svg(view)),
        winners=Markup(winners_svg(view)),
        panels=[panel(view, cell_id) for cell_id in view.records],
        pipeline=Markup(pipelines_html(view.pipelines)),
    )


def render_site(
    views: list[ProfileView], generated_at: str, predicted: str = "", decide: bool = False, title: str | None = None
) -> str:
    """One page of `views` (publish writes one per hardware profile: its measured views, DPO's first);
    `predicted`: the rendered predicted matrices (bench/report/predicted_site.py), shown after the measured ones;
    `decide`: link the decision page (decide.html)."""
    return render(
        "page.html",
        decide=decide,
        title=title or " · ".join(dict.fromkeys(v.hardware for v in views)) or "results",
        profiles=[profile_page(v) for v in views],
        generated_at=generated_at,
        legend=legend(BADGES),
        statuses=status_badges(),
        status_css=Markup(status_css()),
        predicted=Markup(predicted),
    )


INDEX = "index.html"


def page_name(hardware: str) -> str:
    """The file of a hardware profile's page."""
    return "hw-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", hardware) + ".html"


@dataclass(frozen=True)
class IndexEntry:
    """A line of the index: a hardware profile's page, what it holds."""

    hardware: str
    page: str
    runs: list[tuple[str, str, bool, str]]
    """(method, run name, complete, status counts) of each measured view."""
    predicted: bool


def status_counts(view: ProfileView) -> str:
    counts: dict[str, int] = {}
    for summary in view.cells.values():
        counts[summary.status] = counts.get(summary.status, 0) + 1
    return ", ".join(f"{counts[s.value]} {s.value}" for s in Status if s.value in counts)


def site_pages(
    views: list[ProfileView], generated_at: str, predicted: dict[str, str] | None = None, decide: bool = False
) -> dict[str, str]:
    """File name -> HTML: index.html and a page per hardware profile (its views, then its predicted matrix).
    `predicted`: hardware -> its rendered predicted section."""
    predicted = predicted or {}
    hardware = sorted({v.hardware for v in views} | set(predicted))
    pages, entries = {}, []
    for name in hardware:
        mine = [v for v in views if v.hardware == name]
        pages[page_name(name)] = render_site(mine, generated_at, predicted.get(name, ""), decide, name)
        runs = [(v.method, v.run_name, v.complete, status_counts(v)) for v in mine]
        entries.append(IndexEntry(name, page_name(name), runs, name in predicted))
    pages[INDEX] = render("index.html", decide=decide, entries=entries, generated_at=generated_at)
    return pages
