"""Whether the same cells end alike forked from the fork server and started fresh: the evidence a profile names in
`fork_validated_by` (scenarios/hardware/) before `run --start auto` forks its cells on an accelerator.

    python -m bench selfbench fork-parity --hw 1xH200 FORKED_RUN FRESH_RUN

FORKED_RUN ran with `--start forked`, FRESH_RUN with `--start fresh`, over the same cells. Prints what keeps the pair
from being that evidence (a cell whose status differs, that ran on one side only, whose ranks did not start as their
side asked), or how many cells ended alike; exit code 0 in that case.
"""

import argparse
from collections.abc import Mapping

from bench.judge.record import NOT_RUN
from bench.matrix.profiles import ForkValidation
from bench.paths import RESULTS_DIR
from bench.results.schema import ProcessStart, ResultRecord, Status
from bench.results.store import load_results


def ran(records: Mapping[str, ResultRecord]) -> dict[str, ResultRecord]:
    return {cell: r for cell, r in records.items() if r.status not in NOT_RUN}


def parity(forked: Mapping[str, ResultRecord], fresh: Mapping[str, ResultRecord]) -> list[str]:
    """Pure: what keeps two runs' latest records (cell id -> record) from showing that forking changes no cell's
    status; empty when they show it."""
    forked, fresh = ran(forked), ran(fresh)
    problems = [f"{cell} ran only forked" for cell in sorted(set(forked) - set(fresh))]
    problems += [f"{cell} ran only fresh" for cell in sorted(set(fresh) - set(forked))]
    for cell in sorted(set(forked) & set(fresh)):
        a, b = forked[cell], fresh[cell]
        if a.process_start not in (ProcessStart.FORKED, None):
            problems.append(f"{cell}: its ranks did not all fork ({a.process_start.value})")
        if b.process_start not in (ProcessStart.FRESH, None):
            problems.append(f"{cell}: its ranks did not all start fresh ({b.process_start.value})")
        if a.status != b.status:
            problems.append(f"{cell}: {a.status.value} forked, {b.status.value} fresh")
    if not any(r.process_start == ProcessStart.FORKED and r.status == Status.OK for r in forked.values()):
        problems.append("no cell trained ok forked")
    return problems


def check(hardware: str, runs: ForkValidation) -> list[str]:
    """The parity of a profile's two runs under results/<hardware>/; a missing run is a problem too."""
    sides = []
    for run_id in (runs.forked, runs.fresh):
        folder = RESULTS_DIR / hardware / run_id
        if not (folder / "results.jsonl").is_file():
            return [f"no run {run_id} under {RESULTS_DIR / hardware}"]
        sides.append(load_results(folder).latest_by_cell())
    return parity(*sides)


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hw", required=True, help="the profile both runs are under (results/<hw>/)")
    parser.add_argument("forked", help="run id of the --start forked run")
    parser.add_argument("fresh", help="run id of the --start fresh run")


def run(args: argparse.Namespace) -> int:
    """0 when every cell ended alike forked and fresh; else 1, the differences printed."""
    runs = ForkValidation(forked=args.forked, fresh=args.fresh)
    problems = check(args.hw, runs)
    if not problems:
        cells = len(ran(load_results(RESULTS_DIR / args.hw / args.forked).latest_by_cell()))
        print(f"{cells} cells ended alike forked and fresh: the profile may name them in fork_validated_by")
        return 0
    print("\n".join(problems))
    return 1
