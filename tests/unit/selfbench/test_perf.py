"""The perf harness's figures from records (pure)."""

import pytest

from bench.results.schema import Metrics, ProcessStart, ResultRecord, Status
from bench.selfbench.perf import (
    by_launcher,
    fixed_cost,
    launcher_row,
    matrix_walls,
    phase_groups,
    phase_row,
    phase_table,
)


def record(cell: str, trial: int, start: str, end: str, wall: float, launcher: str = "python") -> ResultRecord:
    metrics = Metrics(
        tokens_per_s=1.0,
        pairs_per_s=1.0,
        step_time_median_s=0.1,
        step_time_p90_s=0.1,
        steps=30,
        warmup_steps=5,
        tokens_total=1,
        memory_kind="rss",
        load_peak_bytes=None,
        train_peak_bytes=None,
        mem_growth_per_step_bytes=None,
        load_s=1.0,
    )
    return ResultRecord(
        run_id="r",
        cell_id=cell,
        trial=trial,
        init="one_adapter",
        quant="none",
        backend="single",
        launcher=launcher,
        hardware="cpu",
        workload="tiny",
        status=Status.OK,
        wall_s=wall,
        started_at=f"2026-11-26T10:{start}+00:00",
        finished_at=f"2026-11-26T10:{end}+00:00",
        metrics=metrics,
    )


def test_fixed_cost_is_the_wall_time_beyond_the_training_steps():
    assert fixed_cost(record("a", 0, "00:00", "00:05", 5.0)) == pytest.approx(2.0)  # 5 s - 30 x 0.1 s


def test_the_matrix_wall_time_is_per_trial_from_the_first_start_to_the_last_end():
    records = [
        record("a", 0, "00:00", "00:05", 5.0),
        record("b", 0, "00:05", "00:20", 15.0),
        record("a", 1, "01:00", "01:04", 4.0),
        record("b", 1, "01:04", "01:10", 6.0),
    ]
    assert matrix_walls(records) == [20.0, 10.0]


def test_launchers_are_grouped_with_their_world_size_and_summarised_by_medians():
    records = [record("a", 0, "00:00", "00:05", 5.0), record("b", 0, "00:05", "00:12", 7.0, "torchrun")]
    groups = by_launcher(records)
    assert sorted(groups) == ["python x1", "torchrun x1"]
    assert launcher_row(groups["python x1"]) == pytest.approx((5.0, 2.0, 1.0, 3.0))


def test_each_launcher_and_start_shows_where_its_wall_goes_and_the_unaccounted_share_of_its_start_up():
    split = {"launch": 0.5, "interpreter": 0.1, "imports": 2.0, "model": 1.0, "trainer": 0.4, "steps": 3.0}
    forked = record("a", 0, "00:00", "00:05", 7.5).model_copy(
        update={"process_start": ProcessStart.FORKED, "phases": split | {"exit": 0.3, "unaccounted": 0.2}}
    )
    fresh = forked.model_copy(update={"process_start": ProcessStart.FRESH, "phases": split | {"unaccounted": -0.4}})
    assert sorted(phase_groups([forked, fresh, record("b", 0, "00:05", "00:12", 7.0)])) == [
        "python x1 forked",
        "python x1 fresh",
    ]
    medians, start_up, share = phase_row([forked])
    assert (medians["imports"], medians["cuda"], start_up, share) == pytest.approx((2.0, 0.0, 4.0, 0.05))
    assert phase_row([fresh])[2] == pytest.approx(0.1)  # a negative remainder counts by its size
    table = phase_table([forked, fresh])
    assert table[1].startswith("## Where the wall goes")
    assert table[5].startswith("| python x1 forked | 1 | 0.50 | 0.10 |") and table[5].endswith("| 4.00 | 5.0% |")
