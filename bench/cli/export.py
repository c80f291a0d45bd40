"""`export` and `export-task`: a run as JSON for benchmark dashboards, and a cloud task file that runs the suite."""

import argparse
import json
from pathlib import Path

from bench.cli.common import resolve_run, write_or_print
from bench.errors import BenchError
from bench.executors import docker_images as images
from bench.executors.skypilot import WORKDIR, render, skypilot_task
from bench.matrix.profiles import NAME_PATTERN, load_profile
from bench.secrets import redact


def cmd_export(args: argparse.Namespace) -> int:
    from bench.report.compare import load_run
    from bench.report.dashboard_json import gab_entries, pytest_benchmark_json

    run = load_run(resolve_run(args.run, Path(args.scenarios)))
    if args.to is not None:
        return export_table(run, args.to, args.output)
    data = pytest_benchmark_json(run) if args.format == "pytest-benchmark" else gab_entries(run, args.metric)
    write_or_print(redact(json.dumps(data, indent=2)) + "\n", args.output)
    return 0


def export_table(run, to: str, output: str | None) -> int:
    """`--to parquet` (one file) or `--to hub` (a Hub dataset folder): every record with its env fingerprint."""
    from bench.report.records_table import write_hub_folder, write_parquet

    if to == "parquet":
        path = Path(output or f"{run.name}.parquet")
        rows = write_parquet(run, path)
        print(f"wrote {rows} records of run {run.name} to {path}")
        return 0
    folder = Path(output or f"{run.name}-dataset")
    written = write_hub_folder(run, folder)
    print(f"wrote {', '.join(str(p.relative_to(folder)) for p in written)} to {folder}")
    print(f"  hf upload <user>/<dataset> {folder} --repo-type dataset")
    return 0


def cmd_export_task(args: argparse.Namespace) -> int:
    profile = load_profile(args.hw, Path(args.scenarios))
    if not NAME_PATTERN.match(args.run_id) or not NAME_PATTERN.match(args.cluster):
        raise BenchError("export-task: --run-id and --cluster: letters, digits, '_', '-', '.'")
    image = args.image or images.image_tag(profile.image_flavor)
    task = skypilot_task(profile, image, args.run_id, args.bucket)
    output = Path(args.output or f"dpo-bench-{profile.name}.sky.yaml")
    output.write_text(render(task, profile, args.cluster, args.bucket), encoding="utf-8")
    print(f"wrote {output}")
    print(f"  sky launch -c {args.cluster} {output}")
    if args.bucket:
        print(f"  results: {args.bucket}/{profile.name}/{args.run_id}/")
    else:
        print(f"  rsync -Pavz {args.cluster}:{WORKDIR}/results/{profile.name}/ results/{profile.name}/")
    return 0


def register(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser(
        "export",
        help="export a run as github-action-benchmark custom JSON or pytest-benchmark JSON, or its records as Parquet",
    )
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
    p.add_argument(
        "--to",
        choices=["parquet", "hub"],
        default=None,
        help="every record instead, with the run's env.json as env.* columns: parquet (one file; --output, default "
        "<run>.parquet) or hub (a Hugging Face Hub dataset folder: data/<run>.parquet, env.json, README.md; "
        "--output, default <run>-dataset)",
    )
    p.add_argument("--output", default=None, help="write here instead of stdout")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("export-task", help="write a cloud task file (SkyPilot) that runs the suite on rented GPUs")
    p.add_argument("--to", choices=["skypilot"], default="skypilot")
    p.add_argument("--hw", required=True, help="hardware profile (scenarios/hardware/<hw>.yaml), e.g. 2xA10")
    p.add_argument("--image", default=None, help="image reference the cloud pulls (default: the pinned image's tag)")
    p.add_argument("--bucket", default=None, metavar="URI", help="s3://, gs://, ... bucket mounted for the results")
    p.add_argument("--run-id", default="sky", help="run id of the results (default: %(default)s)")
    p.add_argument("--cluster", default="dpo-bench", help="SkyPilot cluster name in the printed commands")
    p.add_argument("--output", default=None, help="task file (default: dpo-bench-<hw>.sky.yaml)")
    p.set_defaults(func=cmd_export_task)
