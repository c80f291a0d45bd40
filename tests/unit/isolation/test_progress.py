"""The progress watchdog's files and verdict (bench/isolation/progress.py); the executor's loop is shown with real
processes in tests/integration/test_faults.py."""

from bench.isolation.progress import end_steps, last_steps, mark_step, stall_reason, stalled


def test_no_step_file_no_verdict(tmp_path):
    assert stalled(tmp_path, 10.0) is None
    assert stalled(None, 10.0) is None and stalled(tmp_path, None) is None


def test_the_rank_whose_last_step_is_oldest_is_named(tmp_path):
    marks = {0: (100.0, "7"), 1: (90.0, "5")}
    assert stall_reason(marks, now=105.0, stall_s=20.0) is None
    reason = stall_reason(marks, now=112.0, stall_s=20.0)
    assert reason == "rank 1 made no training step for 22 s after step 5 (progress watchdog limit 20 s)"
    both = stall_reason(marks, now=125.0, stall_s=20.0)
    assert both.startswith("rank 1 ") and both.endswith("; rank(s) 0 stalled too")


def test_a_rank_marks_each_step_and_removes_its_file_when_training_ends(tmp_path):
    mark_step(tmp_path, 3, 1)
    mark_step(tmp_path, 3, 2)
    (tmp_path / "progress.rankx").write_text("not a rank")
    found = last_steps(tmp_path)
    assert list(found) == [3] and found[3][1] == "2"
    end_steps(tmp_path, 3)
    end_steps(tmp_path, 3)  # twice is harmless
    assert last_steps(tmp_path) == {}
