"""`compare`, `compare-ab` (bench/cli/compare_ab.py) and `publish`: runs side by side for pull requests, and the
published index and site. Thin: parse, call, write, exit code."""

import argparse
import json
import os
import sys
from pathlib import Path

from bench.cli import compare_ab
from bench.cli.arg_types import positive, threshold
from bench.cli.common import cell_ids, resolve_run, rows_added_in, write_or_print
from bench.matrix.axes import Method
from bench.secrets import redact


def cmd_compare(args: argparse.Namespace) -> int:
    from bench.report.compare import (
        compare,
        failing_kinds,
        ignored_fail_on,
        load_run,
        parse_fail_on,
        to_json,
        to_markdown,
    )

    fail_on = parse_fail_on(args.fail_on)
    scenarios = Path(args.scenarios)
    base = load_run(resolve_run(args.base, scenarios))
    head = load_run(resolve_run(args.head, scenarios))
    result = compare(base, head, args.threshold, include_overlapped=args.include_overlapped)
    write_or_print(to_markdown(result, fail_on), args.output)
    if args.json:
        write_or_print(redact(json.dumps(to_json(result, fail_on), indent=2)) + "\n", args.json)
    for line in ignored_fail_on(result, fail_on):
        print(line, file=sys.stderr)
    failed = failing_kinds(result, fail_on)
    if failed:
        print(f"compare: regressions in {', '.join(failed)} (--fail-on {args.fail_on})", file=sys.stderr)
    return 1 if failed else 0


def cmd_publish(args: argparse.Namespace) -> int:
    from bench.report.decide_data import DecisionPageJob
    from bench.report.decide_grid import DECIDE_FILE, load_grid
    from bench.report.decide_page import PAGE
    from bench.report.decide_point import advise_point
    from bench.report.publish import publish

    results = Path(args.results)
    site = Path(args.out) if args.out else results / "site"
    scenarios = Path(args.scenarios)
    others = {m.value: cell_ids(scenarios, (m,)) for m in Method if m != Method.DPO}
    grid = load_grid(scenarios / DECIDE_FILE)
    decision = None if grid is None else DecisionPageJob(grid, advise_point, args.jobs)
    readme, index = publish(results, site, cell_ids(scenarios), rows_added_in(scenarios), others, decision)
    print(f"index written to {readme}\nsite written to {index}")
    if grid is not None:
        print(f"decision page written to {index.parent / PAGE} ({grid.size()} points, PREDICTED)")
    return 0


def register(sub: "argparse._SubParsersAction") -> None:
    _register_compare(sub)
    compare_ab.register(sub)
    p = sub.add_parser("publish", help="regenerate results/README.md and the static site results/site/")
    p.add_argument("--out", default=None, help="site folder (default: <results>/site)")
    p.add_argument(
        "--jobs",
        type=positive,
        default=os.cpu_count() or 1,
        help="processes predicting the decision page's grid (default: the CPUs, %(default)s)",
    )
    p.set_defaults(func=cmd_publish)


def _register_compare(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser(
        "compare",
        help="Markdown diff of two runs (status changes, then throughput and memory), for PR comments",
        description="BASE and HEAD: a run dir, its results.jsonl, or a hardware folder (its latest complete run).",
    )
    p.add_argument("base", metavar="BASE")
    p.add_argument("head", metavar="HEAD")
    p.add_argument(
        "--threshold",
        type=threshold,
        default=0.05,
        help="flag metric changes above this percent that a rank test over >= 4 trials per side backs (default 5)",
    )
    p.add_argument(
        "--fail-on",
        default="status",
        help="exit 1 on regressions of these kinds: comma-separated status,throughput,memory,cpu, or none "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--include-overlapped",
        action="store_true",
        help="count the trials measured on a shared machine in the metric verdicts: while another run ran "
        "(overlapped_by) or beside other cells of their run (shared_with; these keep their memory verdicts); by "
        "default they are left out and listed",
    )
    p.add_argument("--output", default=None, help="write the Markdown here instead of stdout")
    p.add_argument("--json", default=None, help="also write a machine-readable JSON version here")
    p.set_defaults(func=cmd_compare)
