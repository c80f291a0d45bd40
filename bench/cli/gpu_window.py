"""`window`: what a GPU lent for minutes measures, in one command (bench/run/window.py), and its bundle unpacked."""

import argparse
from pathlib import Path

from bench.cli.arg_types import positive_float, slot_count
from bench.cli.common import run_id_of


def cmd_window(args: argparse.Namespace) -> int:
    from bench.run.window import window
    from bench.run.window_bundle import unpack

    if args.unpack:
        runs, left = unpack(Path(args.unpack), Path(args.results))
        print(f"window: unpacked under {args.results}: {', '.join(runs) or 'no run'}")
        if left:
            print(f"window: {len(left)} files were left out of the bundle when it was packed: {', '.join(left)}")
        return 0
    run_id = run_id_of(args)
    out = Path(args.out) if args.out else Path(args.results) / "window" / run_id
    bundle = Path(args.bundle) if args.bundle else None
    window(args.minutes, out, run_id, args.hw, args.plan, args.gpu_slots, bundle)
    print(f"window: everything under {out}" + (f", packed into {bundle}" if bundle and not args.plan else ""))
    return 0


def register(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser(
        "window",
        help="on a GPU lent for minutes: the card's DPO matrix, the other methods, emulated 24 GB cards, the 7B cells "
        "and a speed pass, in that priority, side by side in the card's slots, everything under --out as it ends "
        "(docs/hardware.md, 'A window on a lent GPU')",
    )
    p.add_argument("--minutes", type=positive_float, default=9.0, help="the window's deadline (default: %(default)s)")
    p.add_argument("--out", default=None, help="where everything goes (default: results/window/<run-id>)")
    p.add_argument("--run-id", default=None)
    p.add_argument(
        "--hw",
        default=None,
        help="the one-GPU profile to plan for (default: the card nvidia-smi lists), or a CPU profile with "
        "memory_budget_gb to rehearse the window on (cpu-budget)",
    )
    p.add_argument(
        "--gpu-slots",
        type=slot_count,
        default=None,
        metavar="N",
        help="the slots every phase's run cuts the card into (default: the card's automatic count, one per 24 GiB)",
    )
    p.add_argument(
        "--plan", action="store_true", help="print the plan and its PREDICTED coverage, write plan.json, run nothing"
    )
    p.add_argument(
        "--bundle",
        default=None,
        metavar="DIR",
        help="also keep DIR holding the window's folder packed into at most 8 flat files of at most 15 MiB, packed "
        "again as it changes (what a device tool that returns only a few shallow files brings back)",
    )
    p.add_argument(
        "--unpack",
        default=None,
        metavar="DIR",
        help="instead: put the runs of a bundle DIR under --results (and the window's own files under "
        "<results>/window/<run-id>/)",
    )
    p.set_defaults(func=cmd_window)
