"""CLI subcommands of the report package: compare, compare-ab, publish, export. Thin: parse, call, write, exit
code."""

import argparse
import json
import sys
from pathlib import Path

from bench.errors import BenchError
from bench.secrets import redact


def _threshold(text: str) -> float:
    """Percent: `5`, `5%` and `2.5` all mean percent of the base median."""
    try:
        value = float(text.strip().rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a percentage: {text!r} (e.g. 5 or 5%)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"threshold must be >= 0, got {text!r}")
    return value / 100


def _pairs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of pairs: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"--pairs must be >= 1, got {text!r}")
    return value


def _write_or_print(text: str, path: str | None) -> None:
    if path is None:
        sys.stdout.write(text)
        return
    out = Path(path)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise BenchError(f"{out}: cannot write ({exc.strerror or exc})") from None


def _resolve_run(path: str, scenarios: Path) -> Path:
    """A run dir or results.jsonl as given; a hardware folder (results/<HW>) means its latest complete run."""
    target = Path(path)
    if not target.exists():
        raise BenchError(f"{target}: no such run dir or results file")
    if target.is_dir() and not (target / "results.jsonl").is_file() and any(target.glob("*/results.jsonl")):
        from bench.report.runs import latest_complete_run

        return latest_complete_run(target, _cell_ids(scenarios), _rows_added(scenarios))
    return target


def _rows_added(scenarios: Path) -> dict:
    from bench.scenario import load_matrix, rows_added

    return rows_added(load_matrix(scenarios / "matrix.yaml"))


def _cell_ids(scenarios: Path) -> list[str]:
    from bench.scenario import expand, load_matrix

    return [c.id for c in expand(load_matrix(scenarios / "matrix.yaml"))]


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
    base = load_run(_resolve_run(args.base, scenarios))
    head = load_run(_resolve_run(args.head, scenarios))
    result = compare(base, head, args.threshold)
    _write_or_print(to_markdown(result, fail_on), args.output)
    if args.json:
        _write_or_print(redact(json.dumps(to_json(result, fail_on), indent=2)) + "\n", args.json)
    for line in ignored_fail_on(result, fail_on):
        print(line, file=sys.stderr)
    failed = failing_kinds(result, fail_on)
    if failed:
        print(f"compare: regressions in {', '.join(failed)} (--fail-on {args.fail_on})", file=sys.stderr)
    return 1 if failed else 0


def cmd_publish(args: argparse.Namespace) -> int:
    from bench.report.publish import publish

    results = Path(args.results)
    site = Path(args.out) if args.out else results / "site"
    readme, index = publish(results, site, _cell_ids(Path(args.scenarios)), _rows_added(Path(args.scenarios)))
    print(f"index written to {readme}\nsite written to {index}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from bench.report.compare import load_run
    from bench.report.export import gab_entries, pytest_benchmark_json

    run = load_run(_resolve_run(args.run, Path(args.scenarios)))
    data = pytest_benchmark_json(run) if args.format == "pytest-benchmark" else gab_entries(run, args.metric)
    _write_or_print(redact(json.dumps(data, indent=2)) + "\n", args.output)
    return 0


def cmd_compare_ab(args: argparse.Namespace) -> int:
    from bench.ab import cmd_compare_ab as run

    return run(args)


def cmd_predict(args: argparse.Namespace) -> int:
    from bench.estimate.report import predict_matrix, to_csv, to_json, to_markdown
    from bench.profiles import load_profile

    if args.write:
        from bench.estimate.report import write_predicted
        from bench.estimate.validate import validate, validation_line

        rows, _ = validate(Path(args.results))
        for path in write_predicted(args.hw, Path(args.results), validation_line(rows)):
            print(f"written: {path}")
        return 0
    predictions = predict_matrix(args.hw, args.workload, args.filter)
    if args.format == "csv":
        text = to_csv(predictions)
    elif args.format == "json":
        text = to_json(predictions)
    else:
        text = to_markdown(predictions, load_profile(args.hw).device)
    _write_or_print(text, args.output)
    return 0


def cmd_validate_estimate(args: argparse.Namespace) -> int:
    from bench.estimate.validate import to_markdown, validate

    rows, skipped = validate(Path(args.results))
    _write_or_print(to_markdown(rows, skipped), args.output)
    return 0


def add_commands(sub: "argparse._SubParsersAction") -> None:
    """Register report subcommands on the `python -m bench` parser."""
    p = sub.add_parser(
        "compare",
        help="Markdown diff of two runs (status changes, then throughput and memory), for PR comments",
        description="BASE and HEAD: a run dir, its results.jsonl, or a hardware folder (its latest complete run).",
    )
    p.add_argument("base", metavar="BASE")
    p.add_argument("head", metavar="HEAD")
    p.add_argument(
        "--threshold",
        type=_threshold,
        default=0.05,
        help="flag metric changes above this percent that a rank test over >= 4 trials per side backs (default 5)",
    )
    p.add_argument(
        "--fail-on",
        default="status",
        help="exit 1 on regressions of these kinds: comma-separated status,throughput,memory,cpu, or none "
        "(default: %(default)s)",
    )
    p.add_argument("--output", default=None, help="write the Markdown here instead of stdout")
    p.add_argument("--json", default=None, help="also write a machine-readable JSON version here")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser(
        "compare-ab",
        help="interleaved A/B: run two git refs alternately (A B B A ...) on this machine, then compare them",
        description="Each ref is checked out in a temporary git worktree and runs its own code; pair i records "
        "trial i of each side; the results stay in results/ab/<timestamp>/ (docs/compare-and-publish.md).",
    )
    p.add_argument("--base", required=True, metavar="REF", help="git ref of the base (e.g. main, a sha)")
    p.add_argument(
        "--head",
        default="HEAD",
        metavar="REF",
        help="git ref of the head (default: %(default)s); `.` = the current checkout with uncommitted changes",
    )
    p.add_argument("--filter", default=None, help="glob(s) over cell ids, comma-separated (default: every cell)")
    p.add_argument("--pairs", type=_pairs, default=4, help="A/B pairs = trials per side (default: %(default)s)")
    p.add_argument("--hw", default="cpu")
    p.add_argument("--executor", choices=["local", "docker", "auto"], default="local")
    p.add_argument("--out", default=None, help="A/B folder (default: <results>/ab/<timestamp>)")
    p.add_argument("--threshold", type=_threshold, default=0.05, help="as for compare (default 5)")
    p.add_argument("--fail-on", default="status", help="as for compare (default: %(default)s)")
    p.add_argument("--output", default=None, help="also write the Markdown here")
    p.add_argument("--json", default=None, help="also write the comparison as JSON here")
    p.set_defaults(func=cmd_compare_ab)

    p = sub.add_parser("publish", help="regenerate results/README.md and the static site results/site/")
    p.add_argument("--out", default=None, help="site folder (default: <results>/site)")
    p.set_defaults(func=cmd_publish)

    p = sub.add_parser("export", help="export a run as github-action-benchmark custom JSON or pytest-benchmark JSON")
    p.add_argument("run", metavar="RUN", help="a run dir, its results.jsonl, or a hardware folder")
    p.add_argument(
        "--format",
        choices=["gab", "pytest-benchmark"],
        default="gab",
        help="gab: github-action-benchmark (default); pytest-benchmark: what `pytest-benchmark compare` loads, one "
        "benchmark per ok cell, seconds per step over every steady step of every trial",
    )
    p.add_argument(
        "--metric",
        choices=["throughput", "memory"],
        default="throughput",
        help="gab only: throughput -> tool customBiggerIsBetter (tokens/s); memory -> customSmallerIsBetter (MiB)",
    )
    p.add_argument("--output", default=None, help="write here instead of stdout")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser(
        "predict",
        help="PREDICTED per-device memory of every cell (load, train, terms) and fits / predicted_oom, from configs",
    )
    p.add_argument("--hw", required=True, help="hardware profile (scenarios/hardware/<HW>.yaml)")
    p.add_argument("--workload", default=None, help="workload (default: the profile's)")
    p.add_argument("--filter", default=None, help="comma-separated glob patterns of cell ids")
    p.add_argument("--format", choices=["md", "csv", "json"], default="md")
    p.add_argument("--output", default=None, help="write here instead of stdout")
    p.add_argument(
        "--write",
        action="store_true",
        help="write results/<HW>/PREDICTED.md and predicted.csv (the profile's default workload, every cell), "
        "with the estimator's current validation error",
    )
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser(
        "validate-estimate", help="memory estimator vs every measured cell under results/: error %% and fits/OOM"
    )
    p.add_argument("--results", default="results", help="results folder (default: %(default)s)")
    p.add_argument("--output", default=None, help="write the Markdown here instead of stdout")
    p.set_defaults(func=cmd_validate_estimate)
