"""The site's plots, drawn by matplotlib and written as SVG text to embed in the page.

Pure: what to draw in, SVG text out. Figures come from matplotlib's object API (no pyplot, no global figure); the
style is set for each figure alone (`rc_context`). The output is the same bytes every time: a fixed figure size, the
font matplotlib ships, SVG ids hashed with a fixed salt and no date in the file.
"""

import io
import re
from collections.abc import Callable
from dataclasses import dataclass
from html import escape

import matplotlib
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import Formatter

STYLE = {
    "svg.fonttype": "none",  # text stays <text> (selectable, searchable, drawn in the browser), not glyph outlines
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],  # ships with matplotlib: the same text metrics, so layout, on every machine
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.titleweight": "bold",
    "text.parse_math": False,  # a `$` in a hardware name is a dollar sign
    "axes.spines.top": False,
    "axes.spines.right": False,
}
METADATA = {"Date": None, "Creator": None, "Format": None, "Type": None}
"""No <metadata> element: nothing in it the page needs, and no date to change between two publishes."""
WIDTH = 5.6
"""Inches, for both plots (72 SVG units an inch)."""
SCATTER_HEIGHT = 3.8
NO_DATA_COLOR = "#a00"


@dataclass(frozen=True)
class Dot:
    gid: str
    """The SVG id of the point's group."""
    backend: str
    color: str
    memory_mib: float
    tokens_per_s: float


@dataclass(frozen=True)
class Bar:
    gid: str
    """The SVG id of the bar."""
    key: str
    """The row: `init · quant`."""
    backend: str | None
    """None: no working backend in the row."""
    tokens_per_s: float | None
    color: str


def svg_text(figure: Figure) -> str:
    out = io.StringIO()
    figure.savefig(out, format="svg", metadata=METADATA)
    return out.getvalue()


# matplotlib numbers the groups it gives no id of ours (`axes_1`, `line2d_3`, ...) per figure: two plots on one page
# would repeat them. Ours (a Dot's, a Bar's gid) have a hyphen, theirs never.
_NUMBERED_ID = re.compile(r' id="[A-Za-z][A-Za-z0-9.]*_\d+"')


def inline(svg: str, kind: str, title: str) -> str:
    """The `<svg>` element alone, on one line (the page has no line break between elements), with the site's
    class and an accessible name."""
    svg = svg[svg.index("<svg") :].strip()
    svg = _NUMBERED_ID.sub("", svg)
    svg = re.sub(r"\s*\n\s*", " ", re.sub(r">\s+<", "><", svg))  # path data has line breaks too
    return svg.replace("<svg ", f'<svg class="plot {kind}" role="img" aria-label="{escape(title)}" ', 1)


def render(kind: str, title: str, salt: str, height: float, draw: Callable[[Axes], None]) -> str:
    """`salt` seeds the SVG's ids (markers, clip paths): one of its own per plot keeps them unique on the page."""
    with matplotlib.rc_context({**STYLE, "svg.hashsalt": salt}):
        figure = Figure(figsize=(WIDTH, height), layout="constrained")
        FigureCanvasAgg(figure)
        axes = figure.add_subplot()
        axes.set_title(title)
        draw(axes)
        return inline(svg_text(figure), kind, title)


def message(axes: Axes, text: str) -> None:
    axes.set_axis_off()
    axes.text(0.5, 0.5, text, ha="center", va="center", color="#555", transform=axes.transAxes)


class Thousands(Formatter):
    """`1,234`, with the decimals the step between two ticks needs (`646.2`, `646.4` on a narrow axis)."""

    ticks: tuple[float, ...] = ()

    def set_locs(self, locs: list[float]) -> None:
        self.ticks = tuple(locs)

    def __call__(self, x: float, pos: int | None = None) -> str:
        step = min((b - a for a, b in zip(self.ticks, self.ticks[1:], strict=False)), default=1.0)
        places = next((p for p in range(7) if abs(round(step, p) - step) <= 1e-9 * max(1.0, abs(step))), 6)
        return f"{x:,.{places}f}"


def thousands(axes: Axes, which: str) -> None:
    getattr(axes, f"{which}axis").set_major_formatter(Thousands())


def draw_scatter(axes: Axes, dots: list[Dot], legend: list[tuple[str, str]]) -> None:
    if not dots:
        message(axes, "no ok cell")
        return
    axes.grid(True, color="#eee")
    axes.set_axisbelow(True)
    for dot in dots:
        axes.plot([dot.memory_mib], [dot.tokens_per_s], "o", color=dot.color, markersize=6, alpha=0.9, gid=dot.gid)
    axes.set_ylim(bottom=0)
    axes.set_xlabel("peak training memory (MiB)")
    axes.set_ylabel("tokens/s")
    thousands(axes, "x")
    thousands(axes, "y")
    handles = [Line2D([], [], marker="o", linestyle="", color=color, label=name) for name, color in legend]
    axes.figure.legend(handles=handles, loc="outside right upper", frameon=False, title="backend")


def scatter(title: str, salt: str, dots: list[Dot], legend: list[tuple[str, str]]) -> str:
    """tokens/s (y) against peak training memory (x), a dot per `Dot`; `legend`: (backend, colour), in order."""
    return render("scatter", title, salt, SCATTER_HEIGHT, lambda axes: draw_scatter(axes, dots, legend))


def bar_label(bar: Bar, best: float) -> tuple[float, str, str, str]:
    """(x, text, alignment, colour): inside a long bar's end in white, after a short one's in the page's colour."""
    assert bar.tokens_per_s is not None
    text = f"{bar.backend} · {bar.tokens_per_s:,.0f}"
    if bar.tokens_per_s >= best / 2:
        return bar.tokens_per_s - best * 0.02, text, "right", "white"
    return bar.tokens_per_s + best * 0.02, text, "left", "#222"


def draw_winners(axes: Axes, bars: list[Bar]) -> None:
    if not bars:
        message(axes, "no cell")
        return
    best = max((b.tokens_per_s for b in bars if b.tokens_per_s is not None), default=1.0)
    for row, bar in enumerate(bars):
        if bar.backend is None or bar.tokens_per_s is None:
            axes.text(best * 0.02, row, "no working backend", va="center", color=NO_DATA_COLOR)
            continue
        axes.barh(row, bar.tokens_per_s, height=0.7, color=bar.color, gid=bar.gid)
        x, text, align, color = bar_label(bar, best)
        axes.text(x, row, text, ha=align, va="center", color=color, fontweight="bold")
    axes.set_yticks(range(len(bars)), [b.key for b in bars])
    axes.set_ylim(len(bars) - 0.5, -0.5)  # the first row on top
    axes.set_xlim(0, best * 1.05)
    axes.set_xlabel("tokens/s of the fastest working backend")
    axes.tick_params(axis="y", length=0)
    thousands(axes, "x")


def winners(title: str, salt: str, bars: list[Bar]) -> str:
    """A horizontal bar per `init · quant` row, its length the winner's tokens/s, its colour the winner's."""
    height = 1.1 + 0.3 * max(len(bars), 1)
    return render("winners", title, salt, height, lambda axes: draw_winners(axes, bars))
