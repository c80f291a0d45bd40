"""The CUDA caching allocator's own record of a cell's start (torch.cuda.memory._record_memory_history, without
tracebacks): every allocation, free and segment from before the model loads to the end of the first `steps`
optimizer steps, kept compact in the cell's folder (HISTORY_FILE) where HISTORY_ENV=<steps> asks for it on a CUDA
rank. `dpo-bench replay-allocator` holds bench/estimate/allocator.py's model against it: which requests leave
reserved memory beside the allocated is what the estimator's allocator term has to say."""

import gzip
import json
import os
import sys
from pathlib import Path
from typing import Any

from bench.files import write_whole_bytes

HISTORY_ENV = "BENCH_ALLOCATOR_HISTORY"
HISTORY_FILE = "allocator_history.rank{rank}.json.gz"
HISTORY_GLOB = HISTORY_FILE.format(rank="*")
"""A fresh trial of the cell keeps these (bench/run/one_cell.py): the window's speed pass reruns recorded cells
unrecorded, and the first trial's history is the only one."""
KEPT_ACTIONS = ("alloc", "free_completed", "segment_alloc", "segment_free", "segment_map", "segment_unmap", "oom")
"""What a replay reads: a block handed out, a block back in the cache, a segment mapped or released (a request that
failed as `oom`). `free_requested` is left out: on one stream the block is reusable at `free_completed`."""
MAX_ENTRIES = 4_000_000
"""The history's ring: a 1B cell's first steps make about 10^5 entries, a 7B cell's a few times more."""


def requested_steps(environ: dict[str, str] | None = None) -> int:
    """The steps HISTORY_ENV asks to record (0: none)."""
    text = (environ if environ is not None else os.environ).get(HISTORY_ENV, "")
    return int(text) if text.isdigit() else 0


def start(on_cuda: bool) -> int:
    """Start recording where HISTORY_ENV asks and the rank has CUDA; the steps to record (0: not recording)."""
    steps = requested_steps()
    if not (steps and on_cuda):
        return 0
    import torch

    try:
        torch.cuda.memory._record_memory_history(enabled="all", context=None, max_entries=MAX_ENTRIES)
    except Exception as e:  # as in `save`: the record is never the cell's failure
        print(f"allocator history not recorded: {e!r}", file=sys.stderr, flush=True)
        return 0
    return steps


def compact(snapshot: dict[str, Any], device: int) -> dict[str, Any]:
    """The device's history as [action, address, bytes] rows in order, and the segments cached when it was taken."""
    trace = snapshot["device_traces"][device]
    rows = [[e["action"], int(e["addr"]), int(e["size"])] for e in trace if e["action"] in KEPT_ACTIONS]
    segments = [int(s["total_size"]) for s in snapshot["segments"] if int(s.get("device", device)) == device]
    return {
        "version": 1,
        "device": device,
        "events": rows,
        "segments": segments,
        "truncated": len(trace) >= MAX_ENTRIES,
    }


def write(path: Path, history: dict[str, Any]) -> None:
    """Written whole (bench/files.py): the window's bundle (bench/run/window_bundle.py) packs the cell folders while
    cells run and must never take half a history for a whole one."""
    write_whole_bytes(path, gzip.compress(json.dumps(history, separators=(",", ":")).encode("utf-8")))


def read(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt", encoding="utf-8") as source:
        return json.load(source)


def history_callback(steps: int, out_dir: str, rank: int) -> Any:
    """A TrainerCallback that at the end of step `steps` writes the history to the cell's folder and stops the
    recording (the rest of the cell runs unrecorded). transformers is imported here: the window reads HISTORY_ENV
    from this module without it."""
    from transformers import TrainerCallback

    path = Path(out_dir) / HISTORY_FILE.format(rank=rank)

    class HistoryCallback(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            nonlocal steps
            if steps and state.global_step >= steps:
                steps = 0
                save(path)

    return HistoryCallback()


def save(path: Path) -> None:
    """Write the history and stop recording. A history that cannot be written costs the cell nothing: one line
    says why, and the cell trains on."""
    import torch

    try:
        write(path, compact(torch.cuda.memory._snapshot(), torch.cuda.current_device()))
    except Exception as e:  # the record is a by-product: never the cell's failure
        print(f"allocator history not written: {e!r}", file=sys.stderr, flush=True)
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
