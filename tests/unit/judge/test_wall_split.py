"""A cell's wall split by the launcher's start and end and the phases of the rank that finished last."""

import pytest

from bench.executors.base import Outcome
from bench.judge.wall_split import critical, start_up_s, wall_split
from bench.worker.rank_report import RankReport

RANK0 = {
    "process_start": 100.5,
    "main_start": 100.6,
    "torch_imported": 101.0,
    "imported": 103.0,
    "model_loaded": 104.0,
    "trainer_built": 105.0,
    "train_begun": 105.5,
    "first_step": 105.6,
    "last_step": 110.0,
    "finished": 110.2,
}


def report(rank: int, phases: dict[str, float]) -> RankReport:
    return RankReport(rank=rank, pid=1, hostname="h", phases=phases)


def outcome(wall: float = 11.0, launched: float | None = 100.0, ended: float | None = 110.9) -> Outcome:
    return Outcome(exit_code=0, timed_out=False, wall_s=wall, log_tail="", launched_at=launched, ended_at=ended)


def test_the_wall_splits_into_the_launch_each_phase_and_the_exit_leaving_what_is_outside_unaccounted():
    split = wall_split(outcome(), [report(0, RANK0)])
    assert split == pytest.approx(
        {
            "launch": 0.5,
            "interpreter": 0.1,
            "torch": 0.4,
            "imports": 2.0,
            "model": 1.0,
            "trainer": 1.0,
            "prepare": 0.5,
            "first_batch": 0.1,
            "steps": 4.4,
            "finish": 0.2,
            "exit": 0.7,
            "unaccounted": 0.1,  # the executor's own 0.1 s beyond the launcher's life
        }
    )
    assert "cuda" not in split  # no CUDA on this rank: no segment for it
    assert sum(split.values()) == pytest.approx(11.0)
    assert start_up_s(split) == pytest.approx(5.6)


def test_a_rank_with_cuda_has_a_segment_for_its_initialisation():
    split = wall_split(outcome(), [report(0, RANK0 | {"cuda_init": 101.75})])
    assert (split["torch"], split["cuda"], split["imports"]) == pytest.approx((0.4, 0.75, 1.25))


def test_the_rank_that_finished_last_splits_the_wall():
    late = {k: v + 0.3 for k, v in RANK0.items()}
    reports = [report(0, RANK0), report(1, late), report(2, {})]
    assert critical(reports).rank == 1
    split = wall_split(outcome(), reports)
    assert (split["launch"], split["exit"]) == pytest.approx((0.8, 0.4))


def test_a_missing_event_or_launcher_time_is_left_unaccounted_not_guessed():
    without_model = {k: v for k, v in RANK0.items() if k != "model_loaded"}
    split = wall_split(outcome(launched=None, ended=None), [report(0, without_model)])
    assert "launch" not in split and "exit" not in split and "model" not in split
    assert split["trainer"] == pytest.approx(2.0)  # from the libraries imported to the trainer built
    assert split["unaccounted"] == pytest.approx(11.0 - 9.7)


def test_no_timeline_no_split():
    assert wall_split(outcome(), [report(0, {})]) == {} and critical([]) is None
