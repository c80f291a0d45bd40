"""The window's plan (bench/run/window_plan.py): the simulation of the policy its runs follow on the slots they
share, on made-up phases whose answers follow from the rules by hand."""

import pytest

from bench.run.window_plan import PlanCell, PlanPhase, predicted_counts, simulate


def cell(name: str, slots: int = 1, start_up: float = 10.0, steps: float = 10.0, budget: float | None = None):
    """A cell whose budget predicts what it takes (`budget`: its steps as the budget sees them)."""
    return PlanCell(name, slots, start_up, steps, start_up, steps if budget is None else budget)


def phase(name: str, priority: int, *cells: PlanCell, ready: float = 0.0, after: tuple[str, ...] = ()) -> PlanPhase:
    return PlanPhase(name, priority, ready, tuple(cells), after)


def test_cells_fill_the_slots_and_end_when_their_start_up_and_steps_have_run():
    outcome = simulate([phase("a", 1, *(cell(f"c{i}") for i in range(4)))], slots=2, seconds=100, shared=False,
                       run_start_s=5)  # fmt: skip
    assert outcome["a"].ended == ["c0", "c1", "c2", "c3"]
    assert outcome["a"].started_s == 5 and outcome["a"].ended_s == pytest.approx(45)  # two rounds of 20 s


def test_a_run_of_a_higher_priority_gets_the_slots_first_and_holds_the_lower_off_while_it_waits():
    high = phase("high", 1, *(cell(f"h{i}") for i in range(3)))
    low = phase("low", 2, cell("l0"))
    outcome = simulate([low, high], slots=2, seconds=100, shared=False, run_start_s=0)
    assert outcome["high"].ended == ["h0", "h1", "h2"]
    # h2 waits for a slot at 0 s, so l0 does not take the one h0 or h1 leaves at 20 s: h2 does
    assert outcome["low"].started_s == 0 and outcome["high"].ended_s == pytest.approx(40)
    assert outcome["low"].ended == ["l0"] and outcome["low"].ended_s == pytest.approx(40)


def test_a_phase_opens_when_its_assets_are_ready_and_the_phase_it_resumes_has_ended():
    first = phase("first", 1, cell("a"), cell("b"))
    later = phase("later", 1, cell("c"), ready=50.0)
    resumes = phase("resumes", 1, cell("d"), after=("first",))
    outcome = simulate([first, later, resumes], slots=4, seconds=200, shared=False, run_start_s=5)
    assert outcome["later"].started_s == 55  # ready, plus its run's own start
    assert outcome["first"].ended_s == pytest.approx(25)
    assert outcome["resumes"].started_s == pytest.approx(30) and outcome["resumes"].ended == ["d"]


def test_a_cell_alone_waits_for_the_device_to_empty_and_holds_lower_priorities_off():
    above = phase("above", 1, cell("a", steps=30.0))
    alone = phase("alone", 2, cell("x", slots=4))
    below = phase("below", 3, cell("b"))
    outcome = simulate([above, alone, below], slots=4, seconds=200, shared=False, run_start_s=0)
    assert outcome["above"].ended_s == pytest.approx(40)
    assert outcome["alone"].ended_s == pytest.approx(60)  # from 40 s, when the device emptied
    assert outcome["below"].ended_s == pytest.approx(80)  # held off until it ran


def test_the_budget_leaves_out_a_cell_predicted_to_end_after_the_window_and_a_cell_beside_others_is_slower():
    outcome = simulate([phase("a", 1, cell("long", steps=200.0), cell("short"))], slots=2, seconds=100, shared=False,
                       run_start_s=0)  # fmt: skip
    assert outcome["a"].ended == ["short"] and outcome["a"].planned == 2
    # the budget predicts the second cell's steps twice as long beside the first (the slow end): 10 + 2 x 50 > 100
    outcome = simulate([phase("a", 1, cell("one", steps=50.0), cell("two", steps=50.0))], slots=2, seconds=100,
                       shared=False, run_start_s=0)  # fmt: skip
    assert outcome["a"].ended == ["one"]


def test_cells_training_at_once_split_the_device_where_it_is_shared():
    cells = [cell("a", steps=20.0, budget=1.0), cell("b", steps=20.0, budget=1.0)]
    alone = simulate([phase("p", 1, *cells)], slots=2, seconds=100, shared=False, run_start_s=0)
    split = simulate([phase("p", 1, *cells)], slots=2, seconds=100, shared=True, run_start_s=0)
    assert alone["p"].ended_s == pytest.approx(30) and split["p"].ended_s == pytest.approx(50)


def test_cells_that_would_end_after_the_window_are_not_counted():
    outcome = simulate([phase("p", 1, cell("a", steps=40.0, budget=1.0))], slots=1, seconds=30, shared=False,
                       run_start_s=0)  # fmt: skip
    assert predicted_counts(outcome) == {"p": 0} and outcome["p"].ended_s is None
