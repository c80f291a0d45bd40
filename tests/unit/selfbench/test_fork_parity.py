"""The evidence a profile names before `--start auto` forks its cells on an accelerator: the same cells, forked and
fresh, ended alike; and every profile that names such runs is held to them."""

import pytest

from bench.matrix.profiles import ForkValidation, available, load_profile
from bench.paths import RESULTS_DIR, SCENARIOS_DIR
from bench.results.schema import ProcessStart, ResultRecord, Status
from bench.selfbench.fork_parity import check, parity


def record(cell: str, status: Status, start: ProcessStart | None) -> ResultRecord:
    return ResultRecord(
        run_id="r",
        cell_id=cell,
        init="one_adapter",
        quant="none",
        backend="single",
        launcher="python",
        hardware="1xH200",
        workload="tiny",
        status=status,
        process_start=start,
    )


def side(start: ProcessStart, **statuses: Status) -> dict[str, ResultRecord]:
    return {cell: record(cell, status, start) for cell, status in statuses.items()}


def test_the_same_cells_with_the_same_statuses_forked_and_fresh_are_evidence():
    forked = side(ProcessStart.FORKED, a=Status.OK, b=Status.OOM)
    fresh = side(ProcessStart.FRESH, a=Status.OK, b=Status.OOM)
    na = {"c": record("c", Status.NOT_APPLICABLE, None)}
    assert parity(forked | na, fresh) == []


@pytest.mark.parametrize(
    ("forked", "fresh", "problem"),
    [
        ({"a": Status.OK}, {"a": Status.ERROR}, "a: ok forked, error fresh"),
        ({"a": Status.OK, "b": Status.OK}, {"a": Status.OK}, "b ran only forked"),
        ({"a": Status.ERROR}, {"a": Status.ERROR}, "no cell trained ok forked"),
    ],
)
def test_a_differing_status_a_one_sided_cell_or_nothing_trained_is_not_evidence(forked, fresh, problem):
    assert problem in parity(side(ProcessStart.FORKED, **forked), side(ProcessStart.FRESH, **fresh))


def test_ranks_that_did_not_start_as_their_side_asked_are_not_evidence():
    forked = side(ProcessStart.MIXED, a=Status.OK)  # some rank refused by the server started fresh
    problems = parity(forked, side(ProcessStart.FORKED, a=Status.OK))
    assert (
        "a: its ranks did not all fork (mixed)" in problems
        and "a: its ranks did not all start fresh (forked)" in problems
    )


def test_every_profile_that_names_fork_validation_runs_is_held_to_them():
    for name in available(SCENARIOS_DIR / "hardware"):
        runs = load_profile(name).fork_validated_by
        if runs is not None:
            assert check(name, runs) == [], name


def test_a_named_run_that_is_not_committed_is_no_evidence():
    runs = ForkValidation(forked="no-such-run", fresh="no-such-run-either")
    assert check("1xH200", runs) == [f"no run no-such-run under {RESULTS_DIR / '1xH200'}"]
