"""`selfbench TOOL`: the suite measuring itself and testing its own checks, one tool a subcommand. A tool module
(bench/selfbench/) is imported only when its subcommand runs: `arguments(parser)` adds its flags, `run(args)` runs
it with them."""

import argparse
import importlib

TOOLS = {
    "overhead": ("overhead", "the suite against the same cell as a plain TRL script, paired round by round"),
    "plain-dpo": ("plain_dpo", "one DPO cell as a plain TRL script, without the suite (overhead's baseline)"),
    "ab-noise": ("ab_noise", "A/A noise and injected slowdowns: what compare-ab can tell apart on this machine"),
    "fork-parity": ("fork_parity", "two runs of a profile, forked and fresh: did every cell end alike"),
    "perf": ("perf", "where a run's cells spend their wall time, per launcher and start (make perf-matrix)"),
    "memory-phases": ("memory_phases", "where a CPU cell's memory goes, phase by phase, in a memory cgroup"),
    "head-tiles": ("head_tiles", "the LM head's and the full-logits losses' temporaries, in tiles"),
    "onednn-primitives": ("onednn_primitives", "what one oneDNN bf16 matmul primitive keeps, per ISA"),
    "mutants": ("mutants", "mutation testing of the checks, surviving mutants explained or failed (make mutants)"),
}
"""Subcommand: (module under bench/selfbench/, what it does)."""


def cmd_selfbench(args: argparse.Namespace) -> int:
    module = importlib.import_module(f"bench.selfbench.{TOOLS[args.tool][0]}")
    prog = f"dpo-bench selfbench {args.tool}"
    parser = argparse.ArgumentParser(prog=prog, description=(module.__doc__ or "").splitlines()[0])
    module.arguments(parser)
    tool_args = parser.parse_args(args.argv)
    tool_args.argv = args.argv
    return module.run(tool_args)


def register(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser(
        "selfbench",
        help="the suite measuring itself: " + ", ".join(TOOLS) + " (`dpo-bench selfbench TOOL --help`)",
        description="\n".join(f"{name}: {what}" for name, (_, what) in TOOLS.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("tool", choices=list(TOOLS), metavar="TOOL")
    p.add_argument("argv", nargs=argparse.REMAINDER, help="the tool's own arguments")
    p.set_defaults(func=cmd_selfbench)
