"""`compare-ab`: two git refs, or two sets of library versions, run alternately on this machine and compared
(bench/selfbench/ab.py)."""

import argparse

from bench.cli.arg_types import pairs, threshold
from bench.cli.common import add_method_argument


def cmd_compare_ab(args: argparse.Namespace) -> int:
    from bench.selfbench.ab import cmd_compare_ab as run

    return run(args)


def register(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser(
        "compare-ab",
        help="interleaved A/B: run two git refs or two sets of library versions alternately (A B B A ...) on this "
        "machine, then compare them",
        description="Each ref is checked out in a temporary git worktree and runs its own code; a side given "
        "packages runs in an overlay venv of them over this one; pair i records trial i of each side; the results "
        "stay in results/ab/<timestamp>/ (docs/compare-and-publish.md).",
    )
    p.add_argument(
        "--base",
        default=None,
        metavar="REF",
        help="git ref of the base (e.g. main, a sha); without it (and with --base-with/--head-with) both sides run "
        "the current checkout",
    )
    p.add_argument(
        "--head",
        default=None,
        metavar="REF",
        help="git ref of the head (default: HEAD, or `.` without --base); `.` = the current checkout with "
        "uncommitted changes",
    )
    for side in ("base", "head"):
        p.add_argument(
            f"--{side}-with",
            action="extend",
            nargs="+",
            default=[],
            metavar="SPEC",
            help=f"packages of the {side} side, over this venv: NAME==VERSION (from the index), NAME=PATH (a local "
            "checkout or a wheel); several allowed",
        )
    p.add_argument("--filter", default=None, help="glob(s) over cell ids, comma-separated (default: every cell)")
    add_method_argument(p)
    p.add_argument("--pairs", type=pairs, default=4, help="A/B pairs = trials per side (default: %(default)s)")
    p.add_argument("--hw", default="cpu")
    p.add_argument("--executor", choices=["local", "docker", "auto"], default="local")
    p.add_argument("--out", default=None, help="A/B folder (default: <results>/ab/<timestamp>)")
    p.add_argument("--threshold", type=threshold, default=0.05, help="as for compare (default 5)")
    p.add_argument("--fail-on", default="status", help="as for compare (default: %(default)s)")
    p.add_argument(
        "--include-overlapped",
        action="store_true",
        help="as for compare: count the trials measured while another run shared the machine",
    )
    p.add_argument("--output", default=None, help="also write the Markdown here")
    p.add_argument("--json", default=None, help="also write the comparison as JSON here")
    p.set_defaults(func=cmd_compare_ab)
