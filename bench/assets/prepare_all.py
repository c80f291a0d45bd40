"""Several workloads' assets prepared in the background, each usable as soon as it is ready: `prepare_all` returns a
future per workload at once. The first is prepared alone and the others side by side after it, since on a small
machine they would slow down the one the caller needs first.

Each workload is prepare() in a process of its own (random weights generated there on the device asked for): the
libraries are not safe to drive from several threads (datasets and transformers' first imports fail), a GPU context
ends with its process so the caller never holds one, and a Ctrl-C or the caller's death (PR_SET_PDEATHSIG) ends them
all. The price is each process's imports, paid side by side.

`python -m bench.assets.prepare_all --device cuda < workload.json` is that process: one workload, read as JSON."""

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path

from bench.assets.prepare import MANIFEST, Note, PreparedAssets, asset_folder, prepare, read_manifest
from bench.errors import BenchError
from bench.matrix.profiles import Workload
from bench.paths import BUILD_DIR


def prepare_all(
    workloads: Sequence[Workload],
    device: str = "cpu",
    build_dir: Path = BUILD_DIR,
    carried: Path | None = None,
    note: Note = print,
) -> dict[str, Future[PreparedAssets]]:
    """Start preparing the workloads, each in a process of its own: the first now, the others once it is ready;
    name -> the future of its assets (or of a BenchError naming the process's last line). `device`, `carried`,
    `note`: as prepare() takes them."""
    pool = ThreadPoolExecutor(max_workers=max(1, len(workloads)), thread_name_prefix="assets")
    futures: dict[str, Future[PreparedAssets]] = {}
    for workload in workloads:
        after = next(iter(futures.values()), None)
        futures[workload.name] = pool.submit(_after, after, workload, device, build_dir, carried, note)
    pool.shutdown(wait=False)
    return futures


def _after(
    first: Future | None, workload: Workload, device: str, build_dir: Path, carried: Path | None, note: Note
) -> PreparedAssets:
    """prepare_in_child once `first` has ended, however it ended."""
    if first is not None:
        wait([first])
    return prepare_in_child(workload, device, build_dir, carried, note)


def prepare_in_child(
    workload: Workload, device: str, build_dir: Path, carried: Path | None, note: Note
) -> PreparedAssets:
    """prepare() in a process of its own, its lines passed to `note` as they come."""
    from bench.isolation.lifeline import die_with_parent

    parent = os.getpid()
    argv = [sys.executable, "-m", "bench.assets.prepare_all", "--device", device, "--build-dir", str(build_dir)]
    argv += ["--carried", str(carried)] if carried is not None else []
    with tempfile.TemporaryFile("w+", encoding="utf-8") as errors:
        with subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            preexec_fn=lambda: die_with_parent(parent),
        ) as child:
            assert child.stdin is not None and child.stdout is not None
            child.stdin.write(workload.model_dump_json())
            child.stdin.close()
            for line in child.stdout:
                note(line.rstrip("\n"))
        errors.seek(0)
        why = [line.strip() for line in errors.read().splitlines() if line.strip()] or ["no message"]
    if child.returncode:
        raise BenchError(f"preparing the assets of {workload.name} failed (exit {child.returncode}): {why[-1]}")
    assets = read_manifest(asset_folder(workload, build_dir) / MANIFEST)
    if assets is None:
        raise BenchError(f"preparing the assets of {workload.name} ended without writing {MANIFEST}")
    return assets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.assets.prepare_all", description=__doc__)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--build-dir", default=str(BUILD_DIR))
    parser.add_argument("--carried", default=None)
    args = parser.parse_args(argv)
    workload = Workload.model_validate_json(sys.stdin.read())
    carried = Path(args.carried) if args.carried else None
    try:
        prepare(workload, Path(args.build_dir), args.device, carried, lambda line: print(line, flush=True), False)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
