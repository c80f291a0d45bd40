"""`trace`: one cell's real training step traced on the CPU (its FLOPs and peak tensor memory by category) beside
the estimator's analytic figures (docs/evidence/trace.md)."""

import argparse
from pathlib import Path

from bench.cli.target_flags import add_target_arguments, target
from bench.errors import BenchError


def cmd_trace(args: argparse.Namespace) -> int:
    from bench.estimate.trace import cache_entry, trace_cell
    from bench.estimate.trace.cache import TRACED_FLOPS, save_traced
    from bench.estimate.trace.table import trace_table
    from bench.matrix.plan import plan_for
    from bench.matrix.scenario import expand, load_matrix, select

    profile, workload = target(args)
    cells = select(expand(load_matrix()), args.only)
    if not cells:
        raise BenchError(f"no cell matches --only {args.only!r}; `dpo-bench list` shows the cell ids")
    traces, entries = [], []
    for cell in cells:
        plan = plan_for(cell, profile, workload)
        print(f"tracing {cell.id} on {workload.name} ...", flush=True)
        trace = trace_cell(plan, memory=not args.no_memory)
        traces.append(trace)
        entry = cache_entry(plan, trace)
        if entry is not None:
            entries.append(entry)
    print(trace_table(traces), end="")
    if args.write and entries:
        save_traced(entries)
        print(f"written: {TRACED_FLOPS} ({len(entries)} entries)")
    return 0


def cmd_replay_allocator(args: argparse.Namespace) -> int:
    from bench.estimate.allocator import held_against
    from bench.units import MiB
    from bench.worker.allocator_history import read

    for path in args.history:
        try:
            history = read(path)
            check = held_against(history)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise BenchError(f"{path}: not an allocator history ({e!r})") from e
        other = (
            "every one the same" if check.first_other_segment is None else f"first other: #{check.first_other_segment}"
        )
        print(
            f"{path}: {check.requests:,} requests, peak allocated {check.peak_allocated / MiB:,.0f} MiB; reserved "
            f"{check.peak_reserved / MiB:,.0f} MiB by the allocator, {check.model_peak_reserved / MiB:,.0f} MiB by the "
            f"model; segments {check.segments:,} and {check.model_segments:,} ({other})"
            + (" (the history's ring was full: it starts mid-run)" if history.get("truncated") else "")
        )
    return 0


def register(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser(
        "trace",
        help="trace a cell's real training step on the CPU (FlopCounterMode, MemTracker) beside the analytic "
        "FLOPs and memory",
    )
    add_target_arguments(p)
    p.add_argument("--only", required=True, help="comma-separated glob patterns of cell ids (single-device cells)")
    p.add_argument("--no-memory", action="store_true", help="count FLOPs only (skip MemTracker)")
    p.add_argument(
        "--write",
        action="store_true",
        help="add the traced FLOPs to scenarios/derived/traced_flops.json, which the speed model then uses for "
        "these cells (regenerate PREDICTED with `predict --hw all --write` after)",
    )
    p.set_defaults(func=cmd_trace)
    r = sub.add_parser(
        "replay-allocator",
        help="replay a GPU cell's recorded allocator history (BENCH_ALLOCATOR_HISTORY=<steps>) through the model of "
        "torch's caching allocator and compare the memory it reserves",
    )
    r.add_argument("history", nargs="+", type=Path, help="allocator_history.rank<N>.json.gz files of cells")
    r.set_defaults(func=cmd_replay_allocator)
