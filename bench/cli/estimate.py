"""`predict` and `validate-estimate`: the memory estimator's answers, and the estimator held against every run."""

import argparse
from pathlib import Path

from bench.cli.common import add_method_argument, write_or_print


def cmd_predict(args: argparse.Namespace) -> int:
    from bench.estimate.report import predict_matrix, to_csv, to_json, to_markdown
    from bench.matrix.profiles import load_profile

    if args.write:
        from bench.estimate.published import published_rows
        from bench.estimate.report import predicted_profiles, write_predicted
        from bench.estimate.validate import validate, validation_line, write_current_spreads

        rows, _ = validate(Path(args.results))
        published = published_rows()
        print(f"written: {write_current_spreads(rows, published)}")
        line = validation_line(rows, published)
        for hardware in predicted_profiles() if args.hw == "all" else [args.hw]:
            for path in write_predicted(hardware, Path(args.results), line):
                print(f"written: {path}")
        return 0
    from bench.matrix.scenario import parse_methods

    predictions = predict_matrix(args.hw, args.workload, args.filter, parse_methods(args.method))
    if args.format == "csv":
        text = to_csv(predictions)
    elif args.format == "json":
        text = to_json(predictions)
    else:
        text = to_markdown(predictions, load_profile(args.hw).device)
    write_or_print(text, args.output)
    return 0


def cmd_validate_estimate(args: argparse.Namespace) -> int:
    if args.published:
        from bench.estimate import published

        write_or_print(published.to_markdown(published.published_rows()), args.output)
        return 0
    from bench.estimate.validate import to_markdown, validate

    rows, skipped = validate(Path(args.results))
    write_or_print(to_markdown(rows, skipped), args.output)
    return 0


def register(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser(
        "predict",
        help="PREDICTED per-device memory of every cell (load, train, terms) and fits / predicted_oom, from configs",
    )
    p.add_argument(
        "--hw",
        required=True,
        help="hardware profile (scenarios/hardware/<HW>.yaml); with --write, `all`: every GPU profile",
    )
    p.add_argument("--workload", default=None, help="workload (default: the profile's)")
    add_method_argument(p)
    p.add_argument("--filter", default=None, help="comma-separated glob patterns of cell ids")
    p.add_argument("--format", choices=["md", "csv", "json"], default="md")
    p.add_argument("--output", default=None, help="write here instead of stdout")
    p.add_argument(
        "--write",
        action="store_true",
        help="write results/<HW>/PREDICTED.md and predicted.csv (the profile's default workload, every cell of "
        "every method), "
        "with the estimator's current validation error, after bench/estimate/spread.json (the ranges' spreads)",
    )
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser(
        "validate-estimate", help="memory estimator vs every measured cell under results/: error %% and fits/OOM"
    )
    p.add_argument("--results", default="results", help="results folder (default: %(default)s)")
    p.add_argument("--output", default=None, help="write the Markdown here instead of stdout")
    p.add_argument(
        "--published",
        action="store_true",
        help="instead: predict every published GPU figure in scenarios/published/memory.yaml (memory, or the longest "
        "context that fits) against its published value, with a reason for every row beyond 15 %%",
    )
    p.set_defaults(func=cmd_validate_estimate)
