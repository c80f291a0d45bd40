"""The progress watchdog's files and verdict (bench/isolation/progress.py); the executor's loop is shown with real
processes in tests/integration/test_faults.py."""

from bench.isolation.progress import Mark, end_steps, last_marks, mark, stall_reason, stalled


def test_no_step_file_no_verdict(tmp_path):
    assert stalled(tmp_path, 10.0) is None
    assert stalled(None, 10.0) is None and stalled(tmp_path, None) is None


def test_the_rank_that_stopped_between_steps_is_named_not_its_peer_waiting_inside_the_next():
    # rank 1 hung after ending step 5; rank 0 began step 6 and waits in its all-reduce (its mark is even older)
    marks = {0: Mark(90.0, "began", 6), 1: Mark(100.0, "ended", 5)}
    assert stall_reason(marks, now=105.0, stall_s=8.0) is None  # rank 1 progressed 5 s ago
    reason = stall_reason(marks, now=112.0, stall_s=8.0)
    assert reason == (
        "rank 1 made no progress for 12 s after step 5 (progress watchdog limit 8 s); rank 0 waits inside step 6"
    )


def test_among_equals_the_oldest_mark_is_named():
    marks = {0: Mark(100.0, "ended", 5), 1: Mark(90.0, "ended", 5)}
    assert stall_reason(marks, now=120.0, stall_s=8.0).startswith("rank 1 made no progress for 30 s after step 5")
    assert stall_reason({0: Mark(1.0, "began", 1)}, now=20.0, stall_s=8.0) == (
        "rank 0 made no progress for 19 s inside step 1 (progress watchdog limit 8 s)"
    )


def test_a_rank_marks_each_step_and_removes_its_file_when_training_ends(tmp_path):
    mark(tmp_path, 3, "began", 1)
    mark(tmp_path, 3, "ended", 1)
    (tmp_path / "progress.rankx").write_text("not a rank")
    (tmp_path / "progress.rank4").write_text("half")  # caught mid-write: no mark
    found = last_marks(tmp_path)
    assert list(found) == [3] and (found[3].phase, found[3].step) == ("ended", 1)
    end_steps(tmp_path, 3)
    end_steps(tmp_path, 3)  # twice is harmless
    assert 3 not in last_marks(tmp_path)
