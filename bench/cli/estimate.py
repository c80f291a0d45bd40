"""`predict` and `validate-estimate`: the memory estimator's answers, and the estimator held against every run."""

import argparse
from pathlib import Path

from bench.cli.common import add_method_argument, checked_scenario_files, write_or_print
from bench.cli.generation_flags import check_online
from bench.cli.target_flags import add_target_arguments, target
from bench.errors import BenchError


def cmd_predict(args: argparse.Namespace) -> int:
    from bench.estimate.prediction_tables import predict_all, to_csv, to_json, to_markdown

    checked_scenario_files(Path(args.scenarios))
    if args.write:
        if args.hw is None or args.model is not None:
            raise BenchError("--write takes --hw (a profile, or all) with its own workload, not --gpu or --model")
        from bench.estimate.predicted_files import write_predicted_files

        for written in write_predicted_files(args.hw, Path(args.results)):
            print(f"written: {written}")
        return 0
    from bench.estimate.speed.cell_speeds import speeds_for
    from bench.matrix.scenario import parse_methods

    check_online(args)
    profile, workload = target(args)
    cpu = None
    if profile.device == "cpu" and args.cpu_features == "this-machine":
        from bench.results.cpu_features import detect_cpu_features

        cpu = detect_cpu_features()
    predictions = predict_all(profile, workload, args.filter, parse_methods(args.method), cpu=cpu)
    if not predictions:
        raise BenchError(f"no cell matches --filter {args.filter!r}")
    speeds = speeds_for(profile, workload, [p.cell_id for p in predictions])
    if args.format == "csv":
        text = to_csv(predictions, speeds)
    elif args.format == "json":
        text = to_json(predictions)
    else:
        text = to_markdown(predictions, profile.device, speeds=speeds)
    write_or_print(text, args.output)
    return 0


def cmd_validate_estimate(args: argparse.Namespace) -> int:
    if args.fit:
        from bench.estimate.calibrate import main as calibrate
        from bench.estimate.predict import CALIBRATION_FILE

        calibrate()
        print(f"written: {CALIBRATION_FILE}")
    if args.write:
        from bench.estimate.validate import VALIDATION_DOC, validation_document

        VALIDATION_DOC.write_text(validation_document(), encoding="utf-8")
        print(f"written: {VALIDATION_DOC}")
        return 0
    if args.published:
        from bench.estimate import published

        write_or_print(published.to_markdown(published.published_rows()), args.output)
        return 0
    from bench.estimate.published import published_rows
    from bench.estimate.validate import coverage, current_spreads, to_markdown, validate

    rows, skipped = validate(Path(args.results))
    published = published_rows()
    covered = coverage(rows, published, current_spreads(rows, published))
    write_or_print(to_markdown(rows, skipped, covered), args.output)
    return 0


def cmd_validate_speed(args: argparse.Namespace) -> int:
    from bench.estimate.speed.calibration import load_speed_calibration, write_speed_calibration
    from bench.estimate.speed.speed_validation import fit, published_rows, speed_rows, to_markdown

    calibration = load_speed_calibration()
    if args.fit:
        calibration = fit(Path(args.results), calibration.host)
        write_speed_calibration(calibration)
    rows = speed_rows(Path(args.results), calibration)
    if not rows:
        raise BenchError(f"no measured CPU cell (results/cpu*/<run>/results.jsonl, status ok) under {args.results}")
    write_or_print(to_markdown(rows, published_rows(calibration) if args.published else None), args.output)
    return 0


def register(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser(
        "predict",
        help="PREDICTED per-device memory of every cell (load, train, terms), its verdict (fits, likely_fits, "
        "likely_oom, oom) with the probability of fitting, and PREDICTED tokens/s, from configs",
    )
    add_target_arguments(p)
    add_method_argument(p)
    p.add_argument("--filter", default=None, help="comma-separated glob patterns of cell ids")
    p.add_argument("--format", choices=["md", "csv", "json"], default="md")
    p.add_argument("--output", default=None, help="write here instead of stdout")
    p.add_argument(
        "--cpu-features",
        choices=["this-machine", "reference"],
        default="this-machine",
        help="CPU profiles: predict for this machine's CPU (its bf16 matmul kernels, docs/estimator.md CPUs), or for "
        "the CPU the figures were validated on first (AMD EPYC without AVX-512) (default: %(default)s)",
    )
    p.add_argument(
        "--write",
        action="store_true",
        help="write results/<HW>/PREDICTED.md and predicted.csv (the profile's default workload, every cell of "
        "every method), with the estimator's current validation error on the runs git tracks (`git add` a new run "
        "first), after scenarios/derived/spread.json (the ranges' spreads)",
    )
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser(
        "validate-estimate", help="memory estimator vs every measured cell under results/: error %% and fits/OOM"
    )
    p.add_argument(
        "--results", default=argparse.SUPPRESS, help="results folder (default: the one before the command, results/)"
    )
    p.add_argument("--output", default=None, help="write the Markdown here instead of stdout")
    p.add_argument("--fit", action="store_true", help="refit the constants (scenarios/derived/calibration.json) first")
    p.add_argument(
        "--published",
        action="store_true",
        help="instead: predict every published GPU figure in scenarios/published/memory.yaml (memory, or the longest "
        "context that fits) against its published value, with a reason for every row beyond 15 %%",
    )
    p.add_argument("--write", action="store_true", help="write both tables into docs/estimator-validation.md")
    p.set_defaults(func=cmd_validate_estimate)

    p = sub.add_parser(
        "validate-speed",
        help="speed model vs every measured CPU cell: PREDICTED tokens/s error and Spearman rho per run",
    )
    p.add_argument(
        "--results", default=argparse.SUPPRESS, help="results folder (default: the one before the command, results/)"
    )
    p.add_argument("--published", action="store_true", help="add the published throughput rows")
    p.add_argument(
        "--fit", action="store_true", help="refit the constants (scenarios/derived/speed_calibration.json) first"
    )
    p.add_argument("--output", default=None, help="write the Markdown here instead of stdout")
    p.set_defaults(func=cmd_validate_speed)
