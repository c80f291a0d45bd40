"""--time-budget: coverage order, the prediction each cell is held to, and what the runner skips (bench/run/budget.py,
bench/run/runner.py)."""

import json
from types import SimpleNamespace

import pytest

from bench.matrix.cell import Cell
from bench.matrix.on_profile import CellOnProfile
from bench.matrix.profiles import load_profile
from bench.matrix.scenario import expand, load_matrix, not_applicable_reason
from bench.results.schema import Metrics, ResultRecord
from bench.run.budget import AXES, TimeBudget, coverage_order, first_pass, values

NO_EXECUTOR = SimpleNamespace(name="none", concurrent=False, memory_budget_bytes=None)
"""Where `run_cell` is replaced: what the runner reads of an executor, and nothing that runs."""


def runnable(profile: str) -> list[Cell]:
    hw = load_profile(profile)
    return [c for c in expand(load_matrix()) if not_applicable_reason(CellOnProfile(c, hw)) is None]


def test_every_axis_value_shows_up_before_anything_repeats():
    cells = runnable("1xH200")
    ordered = coverage_order(cells)
    assert sorted(c.id for c in ordered) == sorted(c.id for c in cells)
    first = first_pass(cells)
    assert ordered[: len(first)] == first
    wanted = set().union(*(values(c) for c in cells))
    assert set().union(*(values(c) for c in first)) == wanted
    # each cell of the first pass shows something the ones before it did not
    seen: set = set()
    for cell in first:
        assert values(cell) - seen
        seen |= values(cell)
    assert {axis for axis, _ in wanted} == set(AXES)


def test_ties_go_to_the_cheaper_cell():
    cells = runnable("1xH200")
    cost = {c.id: (100.0 if c.init == "two_models" else 1.0) for c in cells}
    first = first_pass(cells, lambda c: cost[c.id])
    assert first[0].init != "two_models"
    assert first_pass(cells)[0].id == "two_models-none-single"  # matrix order without a cost


def record(cell_id: str, wall: float, step: float | None) -> ResultRecord:
    metrics = None
    if step is not None:
        metrics = Metrics(
            tokens_per_s=1.0, pairs_per_s=1.0, step_time_median_s=step, step_time_p90_s=step, steps=25,
            warmup_steps=5, tokens_total=1, memory_kind="cuda_allocated", load_peak_bytes=None, train_peak_bytes=None,
            mem_growth_per_step_bytes=None, load_s=None,
        )  # fmt: skip
    return ResultRecord(
        run_id="r", cell_id=cell_id, init="one_adapter", quant="none", backend="single", launcher="python",
        hardware="1xH200", workload="w", status="ok" if metrics else "error", wall_s=wall, metrics=metrics,
    )  # fmt: skip


def test_the_prediction_learns_start_up_and_slowdown_from_the_cells_that_ended():
    cell = runnable("1xH200")[0]
    budget = TimeBudget(300.0, steps=30, step_seconds=lambda c: 0.1, start_up_guess_s=45.0, started=0.0)
    assert budget.predicted_s(cell) == 45.0 + 3.0
    budget.learn(cell, record(cell.id, wall=40.0, step=0.4))  # 12 s of steps, 28 s start-up, 4x slower than predicted
    assert budget.start_ups == [28.0] and budget.slowdown == 4.0
    assert budget.predicted_s(cell) == 28.0 + 30 * 0.1 * 4.0
    budget.learn(cell, record(cell.id, wall=33.0, step=None))  # a failed cell: all of it was start-up
    assert budget.predicted_s(cell) == 33.0 + 12.0
    assert budget.fits(cell, now=300.0 - 45.0) and not budget.fits(cell, now=300.0 - 44.0)
    assert TimeBudget(300.0, 30, lambda c: None, 45.0, started=0.0).predicted_s(cell) == 45.0 + 60.0


def test_a_shared_speed_teaches_the_budget_its_start_up_only():
    cell = runnable("1xH200")[0]
    budget = TimeBudget(300.0, steps=30, step_seconds=lambda c: 0.1, start_up_guess_s=45.0, started=0.0)
    for shared in ({"gpu_shared": True, "shared_with": ["x"]}, {"shared_with": ["x"]}, {"overlapped_by": ["r2"]}):
        budget.learn(cell, record(cell.id, wall=40.0, step=0.4).model_copy(update=shared))
    assert budget.start_ups == [28.0, 28.0, 28.0] and budget.slowdowns == [] and budget.slowdown == 1.0
    budget.learn(cell, record(cell.id, wall=40.0, step=0.2))  # alone: its speed counts
    assert budget.slowdowns == [2.0]


def test_a_cell_beside_others_on_one_device_is_predicted_slower_and_the_speed_pass_is_kept_back():
    cell = runnable("1xH200")[0]
    budget = TimeBudget(100.0, steps=30, step_seconds=lambda c: 0.1, start_up_guess_s=45.0, started=0.0)
    assert budget.predicted_s(cell, beside=0) == 48.0 and budget.predicted_s(cell, beside=4) == 45.0 + 5 * 3.0
    assert budget.not_run(cell, beside=4).startswith("not run: predicted 60 s")
    assert budget.fits(cell, now=0.0, beside=4) and not budget.fits(cell, now=41.0, beside=4)
    budget.reserve([cell], 2)
    assert budget.reserved_s() == 96.0
    assert budget.fits(cell, now=0.0) and not budget.fits(cell, now=0.0, reserving=True)
    budget.reserve([], 0)
    assert budget.reserved_s() == 0.0 and budget.fits(cell, now=0.0, reserving=True)


def test_a_cell_timeout_is_cut_to_what_is_left(monkeypatch):
    import bench.run.budget as budget_module

    monkeypatch.setattr(budget_module.time, "monotonic", lambda: 250.0)
    budget = TimeBudget(300.0, 30, lambda c: 0.1, started=0.0, cell_timeout_s=900.0)
    assert budget.cell_timeout() == 50.0 + 60.0
    assert TimeBudget(300.0, 30, lambda c: 0.1, started=0.0, cell_timeout_s=100.0).cell_timeout() == 100.0


def test_the_runner_starts_no_cell_past_the_budget_and_says_how_to_resume(tmp_path, monkeypatch, cpu_profile):
    from bench.matrix.profiles import load_workload
    from bench.run import runner

    cells = [c for c in expand(load_matrix()) if c.id in ("one_adapter-none-single", "two_models-none-single")]
    ran = []
    clock = [0.0]

    def fake_run_cell(ctx, cell, trial=0, prediction=None, **kwargs):
        ran.append((cell.id, kwargs.get("timeout_s")))
        clock[0] += 15.0  # the cell took 15 s: 12 of start-up, 3 of steps
        return record(cell.id, wall=15.0, step=0.1)

    monkeypatch.setattr("bench.run.trial.run_cell", fake_run_cell)
    monkeypatch.setattr("bench.run.budget.time.monotonic", lambda: clock[0])
    ctx = runner.RunContext("r1", tmp_path, cpu_profile, load_workload("tiny"), assets=None, executor=NO_EXECUTOR)
    # the first cell is predicted 15 + 3 s of 20: it runs; then 5 s are left for a cell predicted 12 + 3 s
    budget = TimeBudget(20.0, 30, lambda c: 0.1, start_up_guess_s=15.0, started=0.0)
    out = tmp_path / "out.txt"
    with out.open("w") as handle:
        runner.execute(ctx, cells, budget=budget, out=handle)
    text = out.read_text()
    assert len(ran) == 1 and ran[0][1] is not None
    assert "not run: predicted" in text and "resume them with --run-id r1" in text
    written = json.loads((tmp_path / runner.BUDGET_FILE).read_text())
    assert len(written["not_run"]) == 1 and written["order"][0] == ran[0][0]


def test_a_run_faster_than_the_speed_model_does_not_speed_up_its_predictions():
    cell = runnable("1xH200")[0]
    budget = TimeBudget(300.0, steps=30, step_seconds=lambda c: 0.1, start_up_guess_s=45.0, started=0.0)
    budget.learn(cell, record(cell.id, wall=20.0, step=0.05))  # twice as fast as the model's slow end
    assert budget.slowdown == 1.0
    budget.learn(cell, record(cell.id, wall=20.0, step=0.15))
    budget.learn(cell, record(cell.id, wall=20.0, step=0.15))
    assert budget.slowdown == pytest.approx(1.5)  # the median of 0.5, 1.5, 1.5
    assert budget.predicted_s(cell) == pytest.approx(18.5 + 30 * 0.1 * 1.5)  # the largest start-up, 20 - 1.5


def test_what_a_cell_teaches_needs_its_wall_time_and_a_speed_figure():
    cell = runnable("1xH200")[0]
    budget = TimeBudget(300.0, steps=30, step_seconds=lambda c: 0.1, started=0.0)
    budget.learn(cell, record(cell.id, wall=40.0, step=0.4).model_copy(update={"wall_s": None}))
    assert budget.start_ups == [] and budget.slowdowns == []
    budget.learn(cell, record(cell.id, wall=10.0, step=0.4))  # 12 s of steps in 10 s of wall time: no start-up
    assert budget.start_ups == [0.0] and budget.slowdowns == [4.0]
    unknown = TimeBudget(300.0, steps=30, step_seconds=lambda c: None, started=0.0)
    unknown.learn(cell, record(cell.id, wall=40.0, step=0.4))  # no figure to be slower than
    assert unknown.start_ups == [28.0] and unknown.slowdowns == []


def test_a_cell_left_out_says_its_prediction_and_what_is_left(monkeypatch):
    cell = runnable("1xH200")[0]
    monkeypatch.setattr("bench.run.budget.time.monotonic", lambda: 280.0)
    budget = TimeBudget(300.0, steps=30, step_seconds=lambda c: 0.1, start_up_guess_s=45.0, started=0.0)
    assert budget.not_run(cell) == "not run: predicted 48 s, 20 s of the time budget left"
    assert budget.left() == 20.0 and budget.left(now=310.0) == -10.0
    monkeypatch.setattr("bench.run.budget.time.monotonic", lambda: 400.0)
    assert budget.not_run(cell) == "not run: predicted 48 s, 0 s of the time budget left"


def test_a_cell_started_past_the_budget_still_gets_ten_seconds(monkeypatch):
    monkeypatch.setattr("bench.run.budget.time.monotonic", lambda: 500.0)
    budget = TimeBudget(300.0, 30, lambda c: 0.1, started=0.0, cell_timeout_s=900.0)
    assert budget.cell_timeout() == 10.0
    assert budget.cell_timeout(grace_s=250.0) == 50.0


def test_each_cell_is_predicted_and_judged_by_its_own_speed_figure(monkeypatch):
    fast, slow = runnable("1xH200")[:2]
    figures = {fast.id: 0.1, slow.id: 1.0}
    monkeypatch.setattr("bench.run.budget.time.monotonic", lambda: 1000.0 + 20.0)
    budget = TimeBudget(60.0, steps=30, step_seconds=lambda c: figures[c.id], start_up_guess_s=10.0, started=1000.0)
    assert (budget.predicted_s(fast), budget.predicted_s(slow)) == (10.0 + 3.0, 10.0 + 30.0)
    assert budget.left() == 40.0 and budget.fits(slow) and not budget.fits(slow, now=1000.0 + 21.0)
    assert budget.not_run(slow) == "not run: predicted 40 s, 40 s of the time budget left"
    budget.learn(slow, record(slow.id, wall=50.0, step=2.0))  # twice its own figure
    assert budget.slowdowns == [2.0] and budget.start_ups == [0.0]


def test_the_first_pass_shows_every_value_of_every_axis_the_selection_holds():
    cells = runnable("1xH200")
    first = first_pass(cells)
    for axis in ("backend", "init", "quant", "method", "launcher"):
        assert {getattr(c, axis) for c in first} == {getattr(c, axis) for c in cells}, axis
    assert len(first) < len(cells) / 4


def test_the_time_kept_for_the_speed_pass_is_each_reserved_cells_own_prediction_per_trial():
    fast, slow = runnable("1xH200")[:2]
    figures = {fast.id: 0.1, slow.id: 1.0}
    budget = TimeBudget(600.0, steps=30, step_seconds=lambda c: figures[c.id], start_up_guess_s=10.0, started=0.0)
    budget.reserve([fast, slow], trials=2)
    assert budget.reserved_s() == 2 * (10.0 + 3.0) + 2 * (10.0 + 30.0)
    assert budget.fits(slow, now=600.0 - 146.0, reserving=True) and not budget.fits(slow, now=454.5, reserving=True)
