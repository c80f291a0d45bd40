"""The static results site: one self-contained index.html (inline CSS, JS and SVG, nothing fetched).

Pure rendering: `ProfileView`s in, HTML text out. Reading files is publish.py's job.
"""

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from html import escape

from bench.matrix.axes import Backend
from bench.report.cells import LEGEND, MARKS, budget_line, cell_label, gib, is_link, method_title, mib
from bench.report.grid import Grid, build_grid, in_axis_order, row_label
from bench.report.summary import CellSummary
from bench.results.env_schema import EnvFingerprint
from bench.results.schema import Learning, RankMemoryFigures, ResultRecord, StageRecord, Status

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
    Status.SILENT_FALLBACK: "background:#fff4bf",
    Status.NOT_APPLICABLE: "background:#eee;color:#666",
    Status.UNTESTED: "background:#e4ebf5;color:#555",
    Status.LEARNING_FAILED: "background:#ecdff7",
    Status.NOT_RUN: "background:#f4f4f4;color:#777;border:1px dashed #bbb",
}


def status_css() -> str:
    return "".join(f".s-{status.value}{{{STATUS_COLORS[status]}}}" for status in Status)


def status_legend() -> str:
    """One badge per status, in the enum's order: the mark and the status name, coloured as the cells are."""
    badges = "".join(
        f'<span class="badge s-{status.value}">{escape(MARKS[status])} {escape(status.value)}</span> '
        for status in Status
    )
    return f'<p class="status-legend">{badges.rstrip()}</p>'


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


def _cell_link(view: ProfileView, cell_id: str) -> str:
    summary = view.cells[cell_id]
    label = cell_label(summary)
    return (
        f'<a class="cell s-{escape(summary.status)}" href="#{escape(panel_id(view.hardware, cell_id))}" '
        f'data-cell="{escape(cell_id)}" title="{escape(cell_id)}">{escape(label)}</a>'
    )


def grid_table(grid: Grid, render: Callable[[str], str], hardware: str, css_class: str = "matrix") -> str:
    """The init · quant x backend table of `grid`, each cell rendered by `render(cell_id)`, variants listed after."""
    head = "".join(f"<th>{escape(b)}</th>" for b in grid.backends)
    body = []
    for init, quant in grid.rows:
        cells = []
        for backend in grid.backends:
            cell_id = grid.cell(init, quant, backend)
            cells.append(f"<td>{render(cell_id)}</td>" if cell_id else '<td class="not-run">not run</td>')
        body.append(f"<tr><th>{escape(row_label(init, quant))}</th>{''.join(cells)}</tr>")
    table = (
        f'<table class="{css_class}" data-hardware="{escape(hardware)}"><thead><tr><th>init · quant</th>{head}</tr>'
        f"</thead><tbody>{''.join(body)}</tbody></table>"
    )
    if grid.variants:
        items = "".join(f"<li><code>{escape(c)}</code> {render(c)}</li>" for c in grid.variants)
        table += f'<h4>Variants (other launchers, options and setups)</h4><ul class="variants">{items}</ul>'
    return table


def matrix_table(view: ProfileView) -> str:
    return grid_table(build_grid(view.records.values()), lambda cell_id: _cell_link(view, cell_id), view.hardware)


def profile_heading(view: ProfileView) -> str:
    env = view.env or EnvFingerprint()
    partial = "" if view.complete else ' <span class="warn">partial run: not every cell has a result</span>'
    budget = budget_line(view.records.values())
    title = view.hardware if view.method == "dpo" else f"{view.hardware} · {method_title(view.method)}"
    return (
        f'<h3>{escape(title)}</h3><p class="meta">run <code>{escape(view.run_name)}</code> · '
        f"{escape(env.created_at or '?')} · workload {escape(env.workload or '?')} · "
        f"image {escape(env.image_label)}{partial}</p>"
        + (f'<p class="meta budget">{escape(budget)}</p>' if budget else "")
    )


def stage_html(record: StageRecord) -> str:
    text = MARKS[Status(record.status)] + (f" ({record.error_class})" if record.error_class else "")
    if record.wall_s is not None:
        text += f" {record.wall_s:,.1f} s"
    if record.peak_bytes is not None:
        text += f" · {mib(record.peak_bytes)}"
    title = record.message or ", ".join(f"{k} {v}" for k, v in record.checks.items() if k != "text")
    return f'<span class="cell s-{escape(record.status)}" title="{escape(title)}">{escape(text)}</span>'


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
    return "—" if value is None else f"{value / 2**20:,.1f} MiB"


def peak_kind(record: ResultRecord) -> str:
    """What Metrics.peak_bytes is for this record."""
    m = record.metrics
    if m is not None and m.memory_kind != "rss":
        return "CUDA max allocated"
    return "kernel cgroup peak" if record.memory_budget_bytes is not None else "peak RSS"


def _first(*values: float | None) -> float | None:
    return next((v for v in values if v is not None), None)


def metrics_table(record: ResultRecord, summary: CellSummary) -> str:
    m = record.metrics
    if m is None:
        return ""
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
    rows = [
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
    body = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
    return f'<table class="metrics">{body}</table>'


def _loss(value: float | None) -> str:
    return "—" if value is None else f"{value:.4f}"


def learning_section(learning: Learning | None) -> str:
    """The learning check's evidence: first / end / last loss, reward accuracy, and what failed."""
    if learning is None:
        return ""
    rows = [
        ("first loss (ln 2 = 0.6931 expected)", _loss(learning.first_loss)),
        ("end loss (mean of the last quarter of the steps)", _loss(learning.end_loss)),
        ("last loss", _loss(learning.last_loss)),
        ("reward accuracy (last step)", "—" if learning.reward_accuracy is None else f"{learning.reward_accuracy:.2%}"),
    ]
    if learning.losses:
        finite = sum(v is not None for v in learning.losses)
        rows.append(("steps with a finite loss", f"{finite} of {len(learning.losses)}"))
    body = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
    verdict = (
        '<ul class="learning-failures">' + "".join(f"<li>{escape(f)}</li>" for f in learning.failures) + "</ul>"
        if learning.failures
        else '<p class="learning-passed">The learning check passed.</p>'
    )
    return f'<h5>Learning</h5><table class="learning">{body}</table>{verdict}'


def prediction_section(record: ResultRecord) -> str:
    """The memory estimator's prediction, made before the cell ran (or instead of running it), beside what was
    measured: always labelled as a prediction."""
    p = record.prediction
    if p is None:
        return ""
    rows = [
        ("verdict", p.verdict),
        ("train peak per device", _fmt_bytes(p.train_bytes)),
        ("total with context / baseline and slack", _fmt_bytes(p.total_bytes)),
        ("usable", _fmt_bytes(p.usable_bytes)),
        ("margin", "—" if p.margin_bytes is None else f"{p.margin_bytes / 2**20:+,.0f} MiB"),
    ]
    largest = sorted(p.terms.items(), key=lambda kv: -kv[1])[:4]
    if largest:
        rows.append(("largest terms", ", ".join(f"{k} {v / 2**20:,.0f} MiB" for k, v in largest)))
    body = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
    title = f"Predicted memory (estimator {p.estimator_version}; a prediction, not a measurement)"
    return f'<h5>{escape(title)}</h5><table class="prediction">{body}</table>'


def rank_memory_section(record: ResultRecord) -> str:
    """Each rank's memory figures (also for failed cells: an OOM-killed rank has its kernel peak here); the budget
    itself is among the panel's facts."""
    if not record.rank_memory:
        return ""
    header = (
        "<tr><th>rank</th><th>baseline RSS</th><th>baseline cgroup</th><th>peak RSS</th><th>kernel peak</th>"
        "<th>limit</th><th>OOM-killed</th></tr>"
    )

    def row(f: RankMemoryFigures) -> str:
        values = [
            str(f.rank),
            *(
                _fmt_bytes(v)
                for v in (f.baseline_rss_bytes, f.baseline_cgroup_bytes, f.peak_rss_bytes, f.kernel_peak_bytes)
            ),
            _fmt_bytes(f.limit_bytes),
            "yes" if f.oom_killed else "no",
        ]
        return "<tr>" + "".join(f"<td>{escape(v)}</td>" for v in values) + "</tr>"

    table = f'<table class="rank-memory">{header}{"".join(row(f) for f in record.rank_memory)}</table>'
    return f"<h5>Memory per rank</h5>{table}"


def _known_issue(summary: CellSummary) -> str:
    link = summary.known_issue
    if not link:
        return ""
    shown = f'<a href="{escape(link)}">{escape(link)}</a>' if is_link(link) else escape(link)
    note = f" — {escape(summary.known_issue_note)}" if summary.known_issue_note else ""
    return f'<p class="known-issue">Known issue: {shown}{note}</p>'


def _configs(files: list[ConfigFile]) -> str:
    if not files:
        return "<p>No generated config files.</p>"
    items = []
    for f in files:
        body = f"<pre>{escape(f.text)}</pre>" if f.text is not None else "<p>(not in the published results)</p>"
        items.append(f'<details class="config"><summary><code>{escape(f.path)}</code></summary>{body}</details>')
    return "".join(items)


def cell_panel(view: ProfileView, cell_id: str) -> str:
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
    parts = [
        f'<details class="panel" id="{escape(panel_id(view.hardware, cell_id))}" data-cell="{escape(cell_id)}">',
        f'<summary><code>{escape(cell_id)}</code> <span class="badge s-{escape(summary.status)}">'
        f"{escape(MARKS[Status(summary.status)])} {escape(status)}</span> <small>{escape(view.hardware)}</small>"
        "</summary>",
        "<dl>" + "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in facts) + "</dl>",
    ]
    if summary.message:
        parts.append(f'<h5>Message</h5><pre class="message">{escape(summary.message)}</pre>')
    parts.append(_known_issue(summary))
    if record.mismatches:
        parts.append("<h5>What ran instead</h5><ul>" + "".join(f"<li>{escape(m)}</li>" for m in record.mismatches))
        parts.append("</ul>")
    parts.append(metrics_table(record, summary))
    parts.append(learning_section(record.learning))
    parts.append(rank_memory_section(record))
    parts.append(prediction_section(record))
    parts.append(f'<h5>Reproduce</h5><pre class="repro">{escape(reproduce_command(view.hardware, cell_id))}</pre>')
    parts.append("<h5>Config files</h5>" + _configs(view.configs.get(cell_id, [])))
    if record.engagement is not None:
        engaged = json.dumps(record.engagement.model_dump(), indent=1)
        parts.append(f"<details><summary>What really ran (engagement)</summary><pre>{escape(engaged)}</pre></details>")
    if record.status != Status.OK and record.log_tail:
        parts.append(f"<details><summary>Log tail</summary><pre>{escape(record.log_tail)}</pre></details>")
    parts.append("</details>")
    return "".join(parts)


# ---------------------------------------------------------------- plots


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high] (1/2/5 x 10^k steps)."""
    if high <= low:
        high = low + (abs(low) or 1.0)
    raw = (high - low) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    start = math.floor(low / step) * step
    ticks = []
    value = start
    while value < high + step * 0.999:
        ticks.append(round(value, 10))
        value += step
    return ticks


LEGEND_LINE = 14


def legend_layout(backends: list[str], left: float, right: float) -> list[tuple[str, float, int]]:
    """(backend, x, line) per legend entry: entries flow left to right and wrap before `right`."""
    placed: list[tuple[str, float, int]] = []
    x, line = left, 0
    for backend in backends:
        entry = 14 + 7 * len(backend) + 10  # swatch, label at ~7 px per character, gap
        if x + entry > right and x > left:
            x, line = left, line + 1
        placed.append((backend, x, line))
        x += entry
    return placed


def _legend(placed: list[tuple[str, float, int]], y: float) -> str:
    return "".join(
        f'<rect x="{x:.0f}" y="{y + line * LEGEND_LINE - 9:.0f}" width="10" height="10" fill="{backend_color(b)}"/>'
        f'<text x="{x + 14:.0f}" y="{y + line * LEGEND_LINE:.0f}">{escape(b)}</text>'
        for b, x, line in placed
    )


def scatter_svg(view: ProfileView, width: int = 460, height: int = 300) -> str:
    """tokens/s (y) against peak training memory (x) for every ok cell, coloured by backend."""
    points = []
    for cell_id, s in view.cells.items():
        tokens, memory = s.headline_tokens_per_s, s.headline_train_peak_bytes
        if s.status == Status.OK and tokens is not None and memory is not None:
            points.append((cell_id, view.records[cell_id].backend, memory / 2**20, tokens))
    left, right, top, bottom = 64, 14, 28, 58
    legend = legend_layout(in_axis_order((p[1] for p in points), Backend), left, width - right)
    extra = LEGEND_LINE * max((line for _, _, line in legend), default=0)
    height, bottom = height + extra, bottom + extra
    title = f"{view.label}: tokens/s vs peak memory"
    head = (
        f'<svg class="plot scatter" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="{escape(title)}">'
        f'<text class="title" x="{width / 2:.0f}" y="16" text-anchor="middle">{escape(title)}</text>'
    )
    if not points:
        return head + f'<text x="{width / 2:.0f}" y="{height / 2:.0f}" text-anchor="middle">no ok cell</text></svg>'
    xt = nice_ticks(min(p[2] for p in points), max(p[2] for p in points))
    yt = nice_ticks(min(0.0, min(p[3] for p in points)), max(p[3] for p in points))

    def sx(v: float) -> float:
        return left + (v - xt[0]) / (xt[-1] - xt[0]) * (width - left - right)

    def sy(v: float) -> float:
        return height - bottom - (v - yt[0]) / (yt[-1] - yt[0]) * (height - top - bottom)

    grid = [
        f'<line class="grid" x1="{left}" x2="{width - right}" y1="{sy(t):.1f}" y2="{sy(t):.1f}"/>'
        f'<text x="{left - 4}" y="{sy(t) + 4:.1f}" text-anchor="end">{t:,.0f}</text>'
        for t in yt
    ] + [
        f'<line class="grid" y1="{top}" y2="{height - bottom}" x1="{sx(t):.1f}" x2="{sx(t):.1f}"/>'
        f'<text x="{sx(t):.1f}" y="{height - bottom + 14}" text-anchor="middle">{t:,.0f}</text>'
        for t in xt
    ]
    dots = [
        f'<circle class="point" data-cell="{escape(c)}" cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="5" '
        f'fill="{backend_color(b)}"><title>{escape(c)}: {y:,.0f} tok/s, {x:,.1f} MiB</title>'
        "</circle>"
        for c, b, x, y in points
    ]
    labels = (
        f'<text x="{(left + width - right) / 2:.0f}" y="{height - bottom + 30}" text-anchor="middle">'
        "peak training memory (MiB)</text>"
        f'<text transform="translate(14 {(top + height - bottom) / 2:.0f}) rotate(-90)" text-anchor="middle">'
        "tokens/s</text>"
    )
    return head + "".join(grid) + labels + "".join(dots) + _legend(legend, height - bottom + 50) + "</svg>"


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


def winners_svg(view: ProfileView, width: int = 460) -> str:
    rows = winners(view)
    row_h, top, label_w = 24, 28, 150
    height = top + row_h * max(len(rows), 1) + 10
    title = f"{view.label}: fastest working backend per init · quant"
    best = max((t for _, _, t in rows if t is not None), default=1.0)
    parts = [
        f'<svg class="plot winners" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="{escape(title)}">'
        f'<text class="title" x="{width / 2:.0f}" y="16" text-anchor="middle">{escape(title)}</text>'
    ]
    for n, (key, backend, tokens) in enumerate(rows):
        y = top + n * row_h
        parts.append(f'<text x="{label_w - 6}" y="{y + 15}" text-anchor="end">{escape(key)}</text>')
        if backend is None or tokens is None:
            parts.append(f'<text class="none" x="{label_w}" y="{y + 15}">no working backend</text>')
            continue
        bar = max(2.0, tokens / best * (width - label_w - 10))
        color = backend_color(backend)
        parts.append(
            f'<rect class="bar" data-backend="{escape(backend)}" x="{label_w}" y="{y + 3}" width="{bar:.1f}" '
            f'height="{row_h - 6}" fill="{color}"><title>{escape(key)}: {escape(backend)} {tokens:,.0f} tok/s</title>'
            f'</rect><text class="on-bar" x="{label_w + 4}" y="{y + 15}">{escape(backend)} · {tokens:,.0f} tok/s</text>'
        )
    return "".join(parts) + "</svg>"


# ---------------------------------------------------------------- page

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 1.5rem 3rem;color:#222}
h1{margin:1rem 0 .2rem}.meta{color:#555;margin:.2rem 0 .6rem}.warn{color:#a40}
.matrices,.plots{display:flex;flex-wrap:wrap;gap:1.5rem;align-items:flex-start}
.profile{overflow-x:auto;max-width:100%}
table{border-collapse:collapse}th,td{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
table.matrix td{padding:0}a.cell{display:block;padding:3px 6px;color:inherit;text-decoration:none;min-width:7rem}
a.cell:hover{outline:2px solid #333}.not-run{color:#999;padding:3px 6px}
.badge{padding:1px 6px;border-radius:8px}.status-legend .badge{display:inline-block;margin:1px 0}
details.panel{border:1px solid #ccc;border-radius:6px;margin:.4rem 0;padding:.3rem .7rem}
details.panel[open]{box-shadow:0 0 0 2px #4e79a7}
pre{background:#f6f6f6;padding:.5rem;overflow-x:auto;max-height:24rem;white-space:pre-wrap}
dl{display:grid;grid-template-columns:max-content auto;gap:0 1rem}dt{color:#555}dd{margin:0}
svg.plot{background:#fff;border:1px solid #ddd;font-size:11px}svg .grid{stroke:#eee}
svg .title{font-weight:600;font-size:12px}svg .on-bar{fill:#fff;font-weight:600}svg .none{fill:#a00}
.variants{list-style:none;padding:0}.variants li{display:flex;gap:.5rem;align-items:center;margin:2px 0}
"""

# Open the panel named by the URL fragment (clicks on matrix cells change it); works from file:// too.
JS = """
function openFromHash(){
  var id = decodeURIComponent(location.hash.slice(1));
  var panel = id && document.getElementById(id);
  if (panel && panel.tagName === 'DETAILS') { panel.open = true; panel.scrollIntoView({block: 'start'}); }
}
window.addEventListener('hashchange', openFromHash);
document.addEventListener('DOMContentLoaded', function(){
  openFromHash();
  document.documentElement.setAttribute('data-ready', '1');
});
"""


def render_site(views: list[ProfileView], generated_at: str, predicted: str = "") -> str:
    """`predicted`: the rendered predicted matrices (bench/report/predicted_site.py), shown after the measured ones."""
    matrices = "".join(
        f'<section class="profile" id="{escape(v.anchor)}">{profile_heading(v)}{matrix_table(v)}'
        f"{pipelines_html(v.pipelines)}</section>"
        for v in views
    )
    plots = "".join(
        f'<div class="profile-plots" data-hardware="{escape(v.hardware)}">{scatter_svg(v)}{winners_svg(v)}</div>'
        for v in views
    )
    panels = "".join(
        f'<section class="panels" data-hardware="{escape(v.hardware)}"><h3>{escape(v.label)}</h3>'
        + "".join(cell_panel(v, cell_id) for cell_id in v.records)
        + "</section>"
        for v in views
    )
    empty = "" if views else "<p>No hardware profile has a MATRIX.md yet: run <code>make bench</code>.</p>"
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>dpo-bench results</title><style>{CSS}{status_css()}</style>"
        f"<script>{JS}</script></head><body>"
        f'<h1>dpo-bench: DPO compatibility matrices</h1><p class="meta">Generated {escape(generated_at)} by '
        "<code>python -m bench publish</code>. Click a cell for its details.</p>"
        f'<p class="legend">{escape(LEGEND)}</p>{status_legend()}{empty}'
        f'<h2>Matrices</h2><div class="matrices">{matrices}</div>{predicted}'
        f'<h2>Plots</h2><div class="plots">{plots}</div>'
        f"<h2>Cell details</h2>{panels}</body></html>\n"
    )
