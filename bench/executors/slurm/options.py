"""The `run` command's Slurm options and the executor they make (`--executor slurm`)."""

import argparse
import sys
from pathlib import Path

from bench.matrix.profiles import HardwareProfile


def add_slurm_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("slurm executor (docs/slurm.md)")
    group.add_argument(
        "--slurm-config",
        default=None,
        metavar="FILE",
        help="YAML: partition, account, qos, sbatch, container, template (the CLI options below go on top)",
    )
    group.add_argument(
        "--slurm-template",
        default=None,
        metavar="FILE",
        help="sbatch template to render each cell's job from (default: bench/executors/slurm/job.sbatch)",
    )
    group.add_argument("--partition", default=None)
    group.add_argument("--account", default=None)
    group.add_argument("--qos", default=None)
    group.add_argument(
        "--sbatch-option",
        action="append",
        default=[],
        metavar="--NAME[=VALUE]",
        dest="sbatch_options",
        help="extra sbatch option for every job (repeatable), e.g. --sbatch-option=--constraint=a100",
    )


def slurm_executor(args: argparse.Namespace, profile: HardwareProfile, run_dir: Path):
    from bench.executors.slurm.executor import SlurmExecutor, load_options

    options = load_options(
        Path(args.slurm_config) if args.slurm_config else None,
        partition=args.partition,
        account=args.account,
        qos=args.qos,
        sbatch=args.sbatch_options,
        template=args.slurm_template,
    )
    executor = SlurmExecutor(run_dir, profile, options, python=sys.executable)
    where = f"partition {options.partition}" if options.partition else "the default partition"
    print(f"executor: slurm, one job per cell on {where}, template {executor.template_path}", flush=True)
    return executor
