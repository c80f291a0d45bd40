"""A record the harness spoiled (status `harness`) in compare, the matrices' summaries and their marks: shown as the
harness's, never held against the cell."""

from bench.report.cells import BADGES, MARKS
from bench.report.compare import compare, to_markdown
from bench.report.site import STATUS_COLORS
from bench.report.summary import summarize
from bench.results.schema import Status
from tests.unit.report.test_compare import rec, run, trials

CELL = "one_adapter-none-ddp"
DIED = "the fork server (pid 7) ended (killed by SIGKILL) while the cell ran"


def harness(trial: int = 0):
    return rec(CELL, Status.HARNESS, message=DIED, trial=trial).model_copy(update={"metrics": None})


def test_ok_then_harness_is_no_regression_and_harness_then_ok_no_improvement():
    both = compare(run([rec(CELL)]), run([harness()]))
    assert [c.status_change for c in both.cells] == ["harness"] and both.of_kind("status") == []
    assert compare(run([harness()]), run([rec(CELL)])).cells[0].status_change == "harness"
    assert compare(run([harness()]), run([harness()])).cells[0].status_change is None
    assert compare(run([rec(CELL, Status.TIMEOUT)]), run([rec(CELL)])).cells[0].status_change == "improvement"
    markdown = to_markdown(both)
    assert "1 harness" in markdown and f"| `{CELL}` | 🛠️ harness failed, not the cell |" in markdown


def test_a_trial_the_harness_spoiled_does_not_make_a_cell_fail_or_flaky():
    summary = summarize([*trials(CELL, [1000, 1010]), harness(trial=2)])[CELL]
    assert (summary.status, summary.flaky, summary.trials, summary.tokens_per_s) == ("ok", False, 3, [1000, 1010])
    failing = summarize([rec(CELL, Status.TIMEOUT), harness(trial=1)])[CELL]
    assert (failing.status, failing.flaky) == ("timeout", False)
    alone = summarize([harness()])[CELL]
    assert (alone.status, alone.message) == ("harness", DIED)


def test_the_harness_status_has_its_marks_and_colour():
    assert (MARKS[Status.HARNESS], BADGES[Status.HARNESS]) == ("🛠️ harness", "HARNESS")
    assert Status.HARNESS in STATUS_COLORS
