"""Does the interleaved A/B ever cry wolf, and what slowdown does it catch? Measured on this machine.

    python -m bench selfbench ab-noise --pairs 10 --filter 'two_models-none-single' --slowdowns 5,10,20,40
        [--ref .] [--hw cpu] [--threshold 5] [--subset-pairs 4] [--out DIR] [--summary results/ab/SUMMARY.md]

An A/A run (the same code on both sides) counts false verdicts (the goal is 0); A/B runs whose head spins for p % of
each step (`BENCH_FAULT=slow_step`, bench/worker/faults.py) say which slowdowns are caught. Every subset of
`--subset-pairs` pairs is judged as its own A/B: a slowdown is detected reliably when all pairs and at least 90 % of
the subsets say regression. `--ref .` runs the current checkout, uncommitted changes included."""

import argparse
import datetime as dt
import itertools
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.paths import RESULTS_DIR
from bench.report.verdict import ALPHA, MIN_TRIALS, Verdict, decide
from bench.results.env import read_env
from bench.results.schema import Metrics, Status
from bench.results.store import load_results
from bench.selfbench.ab import WORKING_TREE, Runner, Side, run_ab, run_process
from bench.units import bytes_text

RELIABLE = 0.9
"""Share of the subsets that must flag an injected slowdown for it to count as detected reliably."""
MAX_SUBSETS = 5000
METRICS: dict[str, tuple[Callable[[Metrics], float | None], bool]] = {
    "tokens/s": (lambda m: m.tokens_per_s, True),
    "CPU s/step": (lambda m: m.cpu_s_per_step_median, False),
    "memory": (lambda m: m.model_memory_bytes if m.model_memory_bytes is not None else m.train_peak_bytes, False),
}
"""name -> (value of a trial's metrics, bigger is better)."""
SPEED = ("tokens/s", "CPU s/step")

Trials = dict[int, float]
"""trial -> value, for one cell, one metric, one side."""


@dataclass(frozen=True)
class Judged:
    cell: str
    metric: str
    base: float
    head: float
    change: float
    p_value: float | None
    verdict: str
    """On every pair."""
    subsets: int
    """How many subsets of `subset_pairs` pairs were judged (0: too few pairs)."""
    flagged: float | None
    """Share of the subsets with a regression or improvement verdict (A/A: false verdicts)."""
    regression: float | None
    """Share of the subsets with a regression verdict (slowdowns: detections)."""


def trial_values(run_dir: Path, metric: str) -> dict[str, Trials]:
    """cell -> {trial: value} over ok trials (the newest line of a trial wins)."""
    field, _ = METRICS[metric]
    out: dict[str, Trials] = {}
    for record in load_results(run_dir).records:
        if record.status == Status.OK and record.metrics is not None and (v := field(record.metrics)) is not None:
            out.setdefault(record.cell_id, {})[record.trial] = float(v)
        else:
            out.setdefault(record.cell_id, {}).pop(record.trial, None)
    return out


def subsets(trials: list[int], k: int, limit: int = MAX_SUBSETS) -> list[tuple[int, ...]]:
    """Every k-subset of `trials`, or `limit` of them drawn with a fixed seed when there are more."""
    if k > len(trials):
        return []
    if math.comb(len(trials), k) <= limit:
        return list(itertools.combinations(trials, k))
    rng = random.Random(0)
    return [tuple(sorted(rng.sample(trials, k))) for _ in range(limit)]


def judge(cell: str, metric: str, base: Trials, head: Trials, threshold: float, k: int) -> Judged | None:
    """The verdict on every pair, and the shares of k-pair subsets flagged / flagged as a regression."""
    _, bigger = METRICS[metric]
    paired = sorted(set(base) & set(head))
    if not paired or statistics.median(base.values()) == 0:
        return None
    full = decide(list(base.values()), list(head.values()), threshold, bigger)
    chosen = subsets(paired, k) if k >= MIN_TRIALS else []
    verdicts = [decide([base[t] for t in s], [head[t] for t in s], threshold, bigger).verdict for s in chosen]
    flagged = sum(v in (Verdict.REGRESSION, Verdict.IMPROVEMENT) for v in verdicts)
    regressions = sum(v == Verdict.REGRESSION for v in verdicts)
    return Judged(
        cell=cell,
        metric=metric,
        base=statistics.median(base.values()),
        head=statistics.median(head.values()),
        change=full.change,
        p_value=full.p_value,
        verdict=str(full.verdict),
        subsets=len(chosen),
        flagged=flagged / len(chosen) if chosen else None,
        regression=regressions / len(chosen) if chosen else None,
    )


def judge_runs(base: Side, head: Side, hw: str, metrics: tuple[str, ...], threshold: float, k: int) -> list[Judged]:
    rows = []
    for metric in metrics:
        b, h = trial_values(base.run_dir(hw), metric), trial_values(head.run_dir(hw), metric)
        for cell in b:
            if cell in h and (row := judge(cell, metric, b[cell], h[cell], threshold, k)) is not None:
                rows.append(row)
    return rows


def step_times(run_dir: Path) -> dict[str, float]:
    """cell -> median over ok trials of its median step time (s)."""
    by_cell: dict[str, dict[int, float]] = {}
    for record in load_results(run_dir).records:
        if record.status == Status.OK and record.metrics is not None:
            by_cell.setdefault(record.cell_id, {})[record.trial] = record.metrics.step_time_median_s
    return {cell: statistics.median(values.values()) for cell, values in by_cell.items()}


def reliable(row: Judged) -> bool:
    return row.verdict == Verdict.REGRESSION and row.regression is not None and row.regression >= RELIABLE


def smallest_reliable(slow: list[dict], metric: str) -> dict[str, float | None]:
    """cell -> the smallest slowdown (percent) detected reliably on `metric`; None when none was."""
    out: dict[str, float | None] = {}
    for entry in sorted(slow, key=lambda e: e["slowdown"]):
        for row in entry["rows"]:
            if row.metric == metric:
                out.setdefault(row.cell, None)
                if out[row.cell] is None and reliable(row):
                    out[row.cell] = entry["slowdown"]
    return out


# ---------------------------------------------------------------- Markdown


def _fmt(metric: str, value: float) -> str:
    if metric == "CPU s/step":
        return f"{value * 1000:,.1f} ms"
    if metric == "memory":
        return bytes_text(value, "MiB", 1)
    return f"{value:,.0f}"


def _share(value: float | None, subsets: int) -> str:
    return "—" if value is None else f"{value:.0%} of {subsets}"


def _p(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def to_markdown(facts: dict, aa: list[Judged], slow: list[dict]) -> str:
    k, pairs, threshold = facts["subset_pairs"], facts["pairs"], facts["threshold"]
    lines = [
        "# Interleaved A/B: noise floor and smallest detected slowdown",
        "",
        f"Measured {facts['finished_at']} on `{facts['machine']}` ({facts['hw']} profile), code "
        f"`{facts['code']}`, {pairs} pairs (A B B A …) per A/B, cells `{facts['filter']}`, verdict rule of "
        f"`compare`: two-sided Mann–Whitney U p ≤ {ALPHA} and |change| > {threshold:.0%}, ≥ {MIN_TRIALS} trials "
        f"per side. Wall time of the experiment: {facts['wall_min']:.1f} min. Script: "
        f"`python -m bench selfbench ab-noise {facts['argv']}`.",
        "",
    ]
    if facts.get("smoke"):
        lines += [
            "> [!NOTE]",
            f"> **Smoke run** ({pairs} pairs, below the {MIN_TRIALS} trials per side a verdict needs): it shows that "
            "the experiment runs end to end and what it records; its verdicts are all `no verdict`. The full "
            "experiment is `--pairs 10` or more.",
            "",
        ]
    lines += _aa_section(aa, k, pairs)
    lines += _slowdown_section(slow, k, pairs)
    lines += _smallest_section(slow, bool(facts.get("smoke")))
    return "\n".join(lines) + "\n"


def _aa_section(aa: list[Judged], k: int, pairs: int) -> list[str]:
    lines: list[str] = []
    false = [r for r in aa if r.verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT)]
    judged = [r for r in aa if r.verdict != Verdict.NO_VERDICT]
    lines += [
        "## A/A: the same code on both sides",
        "",
        f"**{len(false)} false verdicts** of {len(judged)} judged cell × metric comparisons "
        f"({len(aa) - len(judged)} without verdict). Subsets: every {k}-pair subset judged as its own A/B "
        f"(the PR workflow's size); the share with any verdict is the false-verdict rate at {k} pairs.",
        "",
        f"| cell | metric | base | head | change | p | verdict ({pairs} pairs) | flagged, {k}-pair subsets |",
        "|---|---|---:|---:|---:|---:|---|---:|",
    ]
    lines += [
        f"| `{r.cell}` | {r.metric} | {_fmt(r.metric, r.base)} | {_fmt(r.metric, r.head)} | {r.change:+.1%} | "
        f"{_p(r.p_value)} | {r.verdict} | {_share(r.flagged, r.subsets)} |"
        for r in aa
    ]
    return lines


def _slowdown_section(slow: list[dict], k: int, pairs: int) -> list[str]:
    lines: list[str] = []
    lines += [
        "",
        "## Injected slowdowns (`BENCH_FAULT=slow_step` on the head)",
        "",
        "The delay is p % of the cell's median A/A step time, spun as CPU work at every step end on every rank. "
        f"*Detected reliably*: a regression on all {pairs} pairs and in ≥ {RELIABLE:.0%} of the {k}-pair subsets.",
        "",
        f"| cell | slowdown | delay | metric | change | p | verdict ({pairs} pairs) | regression, {k}-pair subsets |",
        "|---|---:|---:|---|---:|---:|---|---:|",
    ]
    for entry in slow:
        for r in entry["rows"]:
            if r.cell != entry["cell"]:
                continue
            lines.append(
                f"| `{r.cell}` | {entry['slowdown']:g} % | {entry['delay_ms']:.1f} ms | {r.metric} | {r.change:+.1%} | "
                f"{_p(r.p_value)} | {r.verdict} | {_share(r.regression, r.subsets)} |"
            )
    return lines


def _smallest_section(slow: list[dict], smoke: bool) -> list[str]:
    lines: list[str] = []
    lines += ["", "## Smallest slowdown detected reliably", ""]
    for metric in SPEED:
        found = smallest_reliable(slow, metric)
        none = f"not judged (fewer than {MIN_TRIALS} pairs)" if smoke else "none of those tried"
        text = ", ".join(f"`{cell}`: {f'{p:g} %' if p is not None else none}" for cell, p in found.items())
        lines.append(f"- {metric}: {text or '—'}")
    lines += [
        "",
        "CPU s/step (process CPU time of the lead rank per step) is the measure less sensitive to co-tenant load; "
        "tokens/s is wall time. Raw runs: the folders listed in the JSON beside this file.",
    ]
    return lines


# ---------------------------------------------------------------- main


def run_experiment(args: argparse.Namespace, runner: Runner = run_process) -> tuple[str, dict]:
    started, clock = dt.datetime.now(dt.UTC), time.monotonic()
    out_dir = Path(args.out) if args.out else RESULTS_DIR / "ab" / f"noise-{started:%Y%m%d-%H%M%S}"
    no_fault = {"BENCH_FAULT": "", "BENCH_FAULT_CELL": ""}

    def ab(name: str, cell_filter: str, head_env: dict[str, str]) -> tuple[Side, Side]:
        envs = {"base": no_fault, "head": no_fault | head_env}
        return run_ab(args.ref, args.ref, args.pairs, args.hw, cell_filter, out_dir / name, envs=envs, runner=runner)

    base, head = ab("aa", args.filter, {})
    aa = judge_runs(base, head, args.hw, tuple(METRICS), args.threshold, args.subset_pairs)
    steps = step_times(base.run_dir(args.hw))
    slow = []
    for cell, step_s in steps.items():
        for percent in args.slowdowns:
            delay_ms = step_s * percent / 100 * 1000
            env = {"BENCH_FAULT": "slow_step", "BENCH_FAULT_DELAY_MS": f"{delay_ms:.3f}"}
            b, h = ab(f"slow-{percent:g}-{cell}", cell, env)
            rows = judge_runs(b, h, args.hw, SPEED, args.threshold, args.subset_pairs)
            slow.append(
                {"cell": cell, "slowdown": percent, "delay_ms": delay_ms, "dir": str(b.results.parent), "rows": rows}
            )
    env = read_env(base.run_dir(args.hw))
    facts = {
        "finished_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": env.hardware.summary if env is not None else "?",
        "hw": args.hw,
        "code": (env.git_label if env is not None else args.ref) if args.ref == WORKING_TREE else args.ref,
        "filter": args.filter,
        "pairs": args.pairs,
        "subset_pairs": args.subset_pairs,
        "threshold": args.threshold,
        "wall_min": (time.monotonic() - clock) / 60,
        "argv": " ".join(args.argv),
        "smoke": args.pairs < MIN_TRIALS,
        "out": str(out_dir),
    }
    markdown = to_markdown(facts, aa, slow)
    data = {
        "facts": facts,
        "aa": [asdict(r) for r in aa],
        "slowdowns": [e | {"rows": [asdict(r) for r in e["rows"]]} for e in slow],
    }
    return markdown, data


def _percents(text: str) -> list[float]:
    try:
        values = [float(v.strip().rstrip("%")) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of percents: {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"slowdowns must be > 0: {text!r}")
    return sorted(values)


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pairs", type=int, default=10, help="A/B pairs per experiment (default: %(default)s)")
    p.add_argument("--filter", required=True, help="cells, comma-separated globs (keep it to a few small cells)")
    p.add_argument("--slowdowns", type=_percents, default=_percents("5,10,20,40"), help="percent of step time")
    p.add_argument("--ref", default=WORKING_TREE, help="code to run on both sides (default: the working tree)")
    p.add_argument("--hw", default="cpu")
    p.add_argument("--threshold", type=lambda v: float(v.rstrip("%")) / 100, default=0.05, help="percent")
    p.add_argument("--subset-pairs", type=int, default=MIN_TRIALS, help="pairs per judged subset (default 4)")
    p.add_argument("--out", default=None, help="runs folder (default: results/ab/noise-<timestamp>)")
    p.add_argument("--summary", default=str(RESULTS_DIR / "ab" / "SUMMARY.md"))


def run(args: argparse.Namespace) -> int:
    """The experiment, its summary written as Markdown and JSON. `args.argv`: the tool's own arguments."""
    try:
        markdown, data = run_experiment(args)
    except KeyboardInterrupt:
        print("\nab_noise interrupted; the finished runs are kept", file=sys.stderr)
        return 130
    summary = Path(args.summary)
    summary.parent.mkdir(parents=True, exist_ok=True)
    summary.write_text(markdown, encoding="utf-8")
    summary.with_suffix(".json").write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    sys.stdout.write("\n" + markdown)
    print(f"\nsummary written to {summary} (data: {summary.with_suffix('.json')})")
    return 0
