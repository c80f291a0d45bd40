"""`carry-assets`, `matrix` and `images`: the assets carried to a lent GPU, MATRIX.md regenerated, the docker images
built."""

import argparse
import time
from pathlib import Path

from bench.cli.common import checked_run_id
from bench.errors import BenchError
from bench.executors import docker_images as images
from bench.matrix.profiles import load_profile


def cmd_carry_assets(args: argparse.Namespace) -> int:
    from bench.assets.carried import carry_all, carry_folder
    from bench.matrix.profiles import load_workload
    from bench.run.window_spec import WINDOW_WORKLOADS

    workloads = [load_workload(name) for name in args.workloads or WINDOW_WORKLOADS]  # every name checked first
    carry_all(workloads, Path(args.out) if args.out else carry_folder())
    return 0


def cmd_images(args: argparse.Namespace) -> int:
    if not images.engine_available():
        raise BenchError(f"no docker engine answers `{images.DOCKER} info`; start dockerd first")
    started = time.monotonic()
    built = images.build_image(
        args.flavor,
        offline_base=args.offline_base,
        extra_ca_certs=args.extra_ca_certs,
        wheels=Path(args.wheels) if args.wheels else None,
    )
    print(f"built {images.image_tag(args.flavor)} ({built}) in {time.monotonic() - started:.0f} s")
    return 0


def cmd_matrix(args: argparse.Namespace) -> int:
    from bench.report.matrix_file import write_hardware_matrix

    profile = load_profile(args.hw, Path(args.scenarios))
    hardware_dir = Path(args.results) / profile.name
    run_dir = recorded_run(hardware_dir, checked_run_id(args.run_id)) if args.run_id is not None else None
    print(f"matrix written to {write_hardware_matrix(hardware_dir, Path(args.scenarios), run_dir)}")
    return 0


def recorded_run(hardware_dir: Path, run_id: str) -> Path:
    """The folder of the run `--run-id` names; one line when it has no records (a typo would otherwise head
    MATRIX.md, its cells filled from other runs)."""
    from bench.results.layout import RESULTS_FILE
    from bench.results.runs import run_dirs

    run_dir = hardware_dir / run_id
    if (run_dir / RESULTS_FILE).is_file():
        return run_dir
    try:
        newest = [run.name for run in run_dirs(hardware_dir)[:1]]
    except BenchError:  # another run's env.json does not read: that is not this command's question
        newest = []
    raise BenchError(
        f"--run-id {run_id}: no run of {hardware_dir.name} by that name ({run_dir / RESULTS_FILE} does not exist)"
        + "".join(f"; the newest is {name}" for name in newest)
        + "; leave --run-id out for the newest complete run"
    )


def register(sub: "argparse._SubParsersAction") -> None:
    _register_others(sub)


def _register_others(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser(
        "carry-assets",
        help="build workloads' dataset, tokenizer and derived rows (no model) into a folder that travels with the "
        "tree to a GPU box, where prepare unpacks them (docs/hardware.md, 'A GPU box without internet')",
    )
    p.add_argument("workloads", nargs="*", help="default: the window's (bench/run/window_spec.py WINDOW_WORKLOADS)")
    p.add_argument(
        "--out", default=None, help="the carry folder (default: $BENCH_CARRIED_ASSETS, else build/carried-assets)"
    )
    p.set_defaults(func=cmd_carry_assets)

    p = sub.add_parser(
        "matrix", help="regenerate results/<HW>/MATRIX.md from the latest complete run (of DPO and of each method)"
    )
    p.add_argument("--hw", default="cpu")
    p.add_argument("--run-id", default=None)
    p.set_defaults(func=cmd_matrix)

    p = sub.add_parser("images", help="build the pinned docker image of a flavor (docs/docker.md)")
    p.add_argument("--flavor", default="cpu", choices=["cpu", "cuda"])
    p.add_argument(
        "--offline-base", action="store_true", help="build the base from Debian with debootstrap (no registry)"
    )
    p.add_argument(
        "--extra-ca-certs",
        default=None,
        metavar="auto|PATH",
        help="copy CA certificates into docker/certs/ first: auto = the host's /usr/local/share/ca-certificates",
    )
    p.add_argument(
        "--wheels",
        default=str(images.HOST_WHEELS_DIR),
        metavar="DIR",
        help="copy DIR/torch-*.whl into docker/wheelhouse/ first when DIR exists (default: %(default)s)",
    )
    p.set_defaults(func=cmd_images)
