"""The window's folder as a few flat files (`window --bundle DIR`): what a device tool that returns only a handful of
shallow files brings back of a window (the lent GPUs' tool: 8 files, 16 MiB each, two folders down; a window's
records lie five down). Packed again whenever the folder changed, so a command stopped at its limit keeps the last
pack; `unpack` puts its runs back under a results folder.

The bundle: `window.tar.gz` (every file but the allocator histories: the runs under `<profile>/<run>/`, the
window's own files, plan and summary among them, under `window/<run-id>/`, and a manifest of what was left out),
and the CUDA allocator's histories in up to MAX_HISTORY_PARTS uncompressed tars (gzip files already). The window
prints its plan and summary, so the device tool's output shows them without unpacking."""

import fnmatch
import io
import json
import tarfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import BenchError
from bench.files import being_written, write_whole_bytes
from bench.units import MiB
from bench.worker.allocator_history import HISTORY_GLOB

ARCHIVE = "window.tar.gz"
HISTORY_PART = "allocator-histories-{part}.tar"
MANIFEST = "bundle.json"
"""In the archive, beside the window's own files: what each file of the bundle holds and what was left out."""
FILE_LIMIT = 15 * MiB
"""Each file's most, under the tool's 16 MiB (the archive's last compressed block lands after the check)."""
MAX_HISTORY_PARTS = 6
"""With the archive and the temporary a pack stopped midway leaves (each file is written whole, bench/files.py;
a pack first removes an earlier one's): 8 files at most. A 1B cell's history of two steps is about
10^5 events (bench/worker/allocator_history.py), some 3.5 MB of JSON before gzip; what does not fit is named in
the manifest."""
COMPRESSION_GUESS = 3.0
"""A file goes into the archive while its size over this still fits: logs and JSON compress 5-10 times. Where the
archive still comes out over its limit, it is packed again taking every file as incompressible."""
HEADROOM = 16
"""The archive stops taking files 1/HEADROOM short of its limit: its last compressed block lands after the check."""
REFRESH_S = 30.0
"""How often the bundle keeper looks for a change in the folder."""
BLOCK = tarfile.BLOCKSIZE
RECORD = tarfile.RECORDSIZE


@dataclass
class Packed:
    """What one pack wrote: the bundle's files and the archive names left out, each with why."""

    files: list[str] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)


def members(out: Path, run_id: str) -> list[tuple[Path, str]]:
    """(file, name in the bundle) of the window's folder: its runs by their path under `results/`, its own files
    (plan, log, summary, the host op's build log) under `window/<run_id>/`."""
    found: list[tuple[Path, str]] = []
    results = out / "results"
    if results.is_dir():
        found += [(p, p.relative_to(results).as_posix()) for p in sorted(results.rglob("*")) if _plain_file(p)]
    found += [(p, f"window/{run_id}/{p.name}") for p in sorted(out.iterdir()) if _plain_file(p)]
    return found


def _plain_file(path: Path) -> bool:
    """A file to pack: not a link, and whole (not a temporary a writer will rename, bench/files.py)."""
    return path.is_file() and not path.is_symlink() and not being_written(path)


def _is_history(name: str) -> bool:
    return fnmatch.fnmatch(name.rsplit("/", 1)[-1], HISTORY_GLOB)


def tar_bytes(sizes: list[int]) -> int:
    """An uncompressed tar of files of these sizes: a header block each, the data padded to blocks, two closing
    blocks, rounded up to a record (tarfile's)."""
    body = sum(BLOCK + -(-size // BLOCK) * BLOCK for size in sizes) + 2 * BLOCK
    return -(-body // RECORD) * RECORD


def history_parts(
    histories: list[tuple[str, int]], limit: int = FILE_LIMIT, parts: int = MAX_HISTORY_PARTS
) -> tuple[list[list[str]], dict[str, str]]:
    """The histories (name, bytes) in order, filled into at most `parts` tars of at most `limit` bytes each; the
    names that fit none, with why."""
    filled: list[list[str]] = []
    sizes: list[list[int]] = []
    left: dict[str, str] = {}
    for name, size in histories:
        if tar_bytes([size]) > limit:
            left[name] = f"{size} bytes, more than one file may hold ({limit})"
            continue
        if not filled or tar_bytes([*sizes[-1], size]) > limit:
            if len(filled) == parts:
                left[name] = f"the {parts} history files are full"
                continue
            filled.append([])
            sizes.append([])
        filled[-1].append(name)
        sizes[-1].append(size)
    return filled, left


def pack(out: Path, bundle: Path, run_id: str, limit: int = FILE_LIMIT, parts: int = MAX_HISTORY_PARTS) -> Packed:
    """Write the bundle of the window folder `out` into `bundle`, replacing each file whole."""
    bundle.mkdir(parents=True, exist_ok=True)
    for stale in bundle.iterdir():
        if being_written(stale):  # an earlier pack stopped midway
            stale.unlink()
    packed = Packed()
    listed = {name: path for path, name in members(out, run_id)}
    histories = [(name, listed[name].stat().st_size) for name in listed if _is_history(name)]
    filled, packed.left_out = history_parts(histories, limit, parts)
    for number, names in enumerate(filled, start=1):
        part = HISTORY_PART.format(part=number)
        write_whole_bytes(bundle / part, _tar([(listed[n], n) for n in names]))
        packed.files.append(part)
    for stale in bundle.glob(HISTORY_PART.format(part="*")):
        if stale.name not in packed.files:
            stale.unlink()
    rest = [(path, name) for name, path in listed.items() if not _is_history(name)]
    parts_held = {HISTORY_PART.format(part=i): names for i, names in enumerate(filled, start=1)}
    manifest = {"run_id": run_id, "packed_at": time.time(), "histories": parts_held}
    for guess in (COMPRESSION_GUESS, 1.0):
        attempt = manifest | {"left_out": dict(packed.left_out)}
        archive = _archive(rest, limit, attempt, run_id, guess)
        if len(archive) <= limit:
            break
    write_whole_bytes(bundle / ARCHIVE, archive)
    packed.left_out = attempt["left_out"]
    packed.files.append(ARCHIVE)
    return packed


def _tar(files: list[tuple[Path, str]]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for path, name in files:
            tar.add(path, arcname=name, recursive=False)
    return raw.getvalue()


def _archive(files: list[tuple[Path, str]], limit: int, manifest: dict, run_id: str, guess: float) -> bytes:
    """The files smallest first while the compressed stream leaves room (each taken to shrink `guess` times), then
    the manifest."""
    sized = []
    for path, name in files:
        try:
            sized.append((path.stat(), path, name))
        except FileNotFoundError:  # a run removed it while the list was made
            continue
    left = manifest["left_out"]
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz", compresslevel=6) as tar:
        for stat, path, name in sorted(sized, key=lambda s: s[0].st_size):
            if raw.tell() + stat.st_size / guess > limit - limit // HEADROOM:
                left[name] = f"{stat.st_size} bytes: the archive is full ({limit})"
                continue
            _add(tar, path, name, int(stat.st_mtime))
        text = json.dumps(manifest, indent=1).encode()
        info = tarfile.TarInfo(f"window/{run_id}/{MANIFEST}")
        info.size, info.mtime = len(text), int(time.time())
        tar.addfile(info, io.BytesIO(text))
    return raw.getvalue()


def _add(tar: tarfile.TarFile, path: Path, name: str, mtime: int) -> None:
    """A file as it is now; an appended JSON-lines file up to its last whole line (a run may be writing one)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    if name.endswith(".jsonl"):
        data = data[: data.rfind(b"\n") + 1]
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), mtime, 0o644
    tar.addfile(info, io.BytesIO(data))


def signature(out: Path, run_id: str) -> tuple:
    """What changes when a file of the folder does: each member's name, size and modification time."""
    found = []
    for path, name in members(out, run_id):
        try:
            stat = path.stat()
        except FileNotFoundError:
            continue
        found.append((name, stat.st_size, stat.st_mtime_ns))
    return tuple(found)


def check_folders(out: Path, bundle: Path) -> None:
    """The bundle may hold nothing but its own files: neither folder inside the other."""
    a, b = out.resolve(), bundle.resolve()
    if a == b or a in b.parents or b in a.parents:
        raise BenchError(f"--bundle {bundle}: must be outside the window's folder {out}, and it outside the bundle")


@contextmanager
def kept(out: Path, bundle: Path, run_id: str, log, every: float = REFRESH_S) -> Iterator[None]:
    """Pack the bundle now and whenever the folder changed (looked at every `every` seconds) while the block runs,
    and once more as it ends, whatever ends it."""
    stop = threading.Event()
    state = {"seen": None}

    def refresh() -> None:
        seen = signature(out, run_id)
        if seen != state["seen"]:
            packed = pack(out, bundle, run_id)
            state["seen"] = seen
            if packed.left_out:
                print(f"window: bundle: {len(packed.left_out)} files left out (listed in its {MANIFEST})", file=log,
                      flush=True)  # fmt: skip

    def loop() -> None:
        while not stop.wait(every):
            try:
                refresh()
            except OSError as error:  # a full disk: the next look tries again
                print(f"window: bundle not packed: {error}", file=log, flush=True)

    refresh()
    thread = threading.Thread(target=loop, name="window-bundle", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        refresh()
        print(f"window: bundle in {bundle}: {', '.join(sorted(p.name for p in bundle.iterdir()))}", file=log,
              flush=True)  # fmt: skip


def unpack(bundle: Path, results: Path) -> tuple[list[str], dict[str, str]]:
    """Extract a bundle under `results`: its runs to `<profile>/<run>/`, the window's own files to
    `window/<run-id>/`. tarfile's `data` filter refuses absolute names, links out of the folder and devices.
    Returns the runs it held and what its pack left out."""
    archive = bundle / ARCHIVE
    if not archive.is_file():
        raise BenchError(f"{bundle}: no {ARCHIVE} there (not the bundle of a window's --bundle)")
    if not hasattr(tarfile, "data_filter"):
        raise BenchError("unpacking a bundle needs Python's tarfile extraction filters (3.11.4 or later)")
    runs: set[str] = set()
    left: dict[str, str] = {}
    for path in [archive, *sorted(bundle.glob(HISTORY_PART.format(part="*")))]:
        with tarfile.open(path) as tar:
            names = tar.getnames()
            tar.extractall(results, filter="data")
        runs |= {"/".join(n.split("/")[:2]) for n in names if not n.startswith("window/") and n.count("/") >= 2}
        left |= _left_out(results, names)
    return sorted(runs), left


def _left_out(results: Path, names: list[str]) -> dict[str, str]:
    manifests = [n for n in names if n.startswith("window/") and n.endswith(f"/{MANIFEST}")]
    return json.loads((results / manifests[0]).read_text())["left_out"] if manifests else {}
