"""The progress watchdog's files and verdict (bench/isolation/step_marks.py); the executor's loop is shown with real
processes in tests/integration/test_faults.py."""

import os
from pathlib import Path

from bench.isolation.step_marks import (
    Mark,
    StepMarks,
    end_steps,
    last_marks,
    mark,
    process_state,
    stall_reason,
    stalled,
)


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


def test_a_rank_inside_a_step_is_behind_one_that_ended_it():
    # rank 1 ended step 5 and waits for rank 0, which began step 5 and stopped inside it
    marks = {0: Mark(100.0, "began", 5), 1: Mark(90.0, "ended", 5)}
    assert stall_reason(marks, now=120.0, stall_s=8.0) == (
        "rank 0 made no progress for 20 s inside step 5 (progress watchdog limit 8 s); rank 1 waits after step 5"
    )
    assert (Mark(0.0, "began", 5).position, Mark(0.0, "ended", 5).position) == (9, 10)


def test_every_other_rank_is_listed_with_where_it_waits():
    marks = {2: Mark(95.0, "began", 7), 0: Mark(96.0, "began", 7), 1: Mark(90.0, "ended", 6)}
    assert stall_reason(marks, now=110.0, stall_s=8.0) == (
        "rank 1 made no progress for 20 s after step 6 (progress watchdog limit 8 s); rank 0 waits inside step 7; "
        "rank 2 waits inside step 7"
    )


def test_a_rank_that_progressed_exactly_the_limit_ago_has_not_stalled():
    marks = {0: Mark(100.0, "ended", 5), 1: Mark(92.0, "began", 6)}
    assert stall_reason(marks, now=108.0, stall_s=8.0) is None
    assert stall_reason(marks, now=108.5, stall_s=8.0) is not None


def test_the_executor_s_look_reads_the_files_age(tmp_path):
    mark(tmp_path, 0, "began", 3)
    os.utime(tmp_path / "progress.rank0", (1000.0, 1000.0))
    assert stalled(tmp_path, 8.0, now=1005.0) is None
    assert stalled(tmp_path, 8.0, now=1012.0) == (
        "rank 0 made no progress for 12 s inside step 3 (progress watchdog limit 8 s)"
    )
    assert stalled(tmp_path, 8.0).startswith("rank 0 made no progress for ")  # now: the file is decades old


def test_a_rank_keeps_one_line_overwritten_at_each_mark_until_training_ends(tmp_path):
    marks = StepMarks(tmp_path, 0)
    marks.mark("began", 9)
    marks.mark("ended", 9)
    marks.mark("began", 10)
    assert (tmp_path / "progress.rank0").read_text() == f"began {10:>12} {os.getpid():>10}\n"
    assert last_marks(tmp_path)[0].describe() == "inside step 10"
    marks.end()
    marks.end()  # twice is harmless
    assert last_marks(tmp_path) == {}


def test_only_a_ranks_file_with_a_well_formed_mark_counts(tmp_path):
    (tmp_path / "progress.rankx").write_text("began 1\n")  # not a rank's file, whatever it holds
    (tmp_path / "progress.rank1").write_text("began x\n")
    (tmp_path / "progress.rank2").write_text("paused 3\n")
    (tmp_path / "progress.rank3").write_text("began 4\n")
    assert list(last_marks(tmp_path)) == [3]


def test_a_stopped_rank_is_named_before_any_other_and_says_so():
    # level inside step 3, rank 0's mark older: only rank 1's state (T: stopped) tells the stalled rank apart
    marks = {0: Mark(90.0, "began", 3, pid=10), 1: Mark(95.0, "began", 3, pid=11)}
    assert stall_reason(marks, now=120.0, stall_s=8.0).startswith("rank 0 made no progress for 30 s inside step 3 (")
    assert stall_reason(marks, now=120.0, stall_s=8.0, states={0: "S", 1: "S"}).startswith("rank 0 made no")
    assert stall_reason(marks, now=120.0, stall_s=8.0, states={0: "S", 1: "T"}) == (
        "rank 1 made no progress for 25 s inside step 3, its process stopped (state T) (progress watchdog limit 8 s); "
        "rank 0 waits inside step 3"
    )
    # a stopped rank is named even where a peer is further behind, and a traced stop counts too
    behind = {0: Mark(90.0, "ended", 2), 1: Mark(95.0, "began", 3)}
    assert stall_reason(behind, now=120.0, stall_s=8.0, states={1: "t", 0: None}).startswith(
        "rank 1 made no progress for 25 s inside step 3, its process stopped (state t)"
    )
    assert stall_reason(behind, now=120.0, stall_s=8.0, states={1: "D"}).startswith("rank 0 made no progress")


def test_each_mark_names_its_ranks_process_and_older_files_without_one_are_read(tmp_path):
    import os

    mark(tmp_path, 0, "began", 7)
    (tmp_path / "progress.rank1").write_text("ended 3\n")
    (tmp_path / "progress.rank2").write_text("ended 3 12 13\n")  # not a mark
    (tmp_path / "progress.rank3").write_text("ended 3 x\n")
    found = last_marks(tmp_path)
    assert sorted(found) == [0, 1]
    assert (found[0].step, found[0].pid, found[1].pid) == (7, os.getpid(), None)


def test_a_rank_sigstopped_inside_a_step_is_named_not_its_peer_that_waits_there(tmp_path):
    """Real processes and a real SIGSTOP: two ranks began step 3, rank 0 first; rank 1 is stopped inside it. The
    watchdog used to name rank 0 (the older mark) while rank 1 was the one that could not go on."""
    import signal
    import subprocess
    import sys
    import time

    def process_state(pid: int) -> str | None:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        return stat[stat.rfind(")") + 2 :].split()[0]

    code = (
        "import sys, time; from pathlib import Path; from bench.isolation.step_marks import StepMarks\n"
        "StepMarks(Path(sys.argv[1]), int(sys.argv[2])).mark('began', 3); print('marked', flush=True)\n"
        "time.sleep(300)\n"
    )
    ranks = []
    try:
        for r in (0, 1):
            ranks.append(subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(r)], stdout=subprocess.PIPE))
            assert ranks[-1].stdout.readline() == b"marked\n"
            time.sleep(0.05)  # rank 1's mark is the newer
        ranks[1].send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while process_state(ranks[1].pid) != "T":
            assert time.monotonic() < deadline, process_state(ranks[1].pid)
            time.sleep(0.01)
        reason = stalled(tmp_path, 5.0, now=time.time() + 10)
        assert (
            reason.startswith("rank 1 made no progress for ")
            and "inside step 3, its process stopped (state T)" in reason
        )
        assert reason.endswith("rank 0 waits inside step 3")
    finally:
        for process in ranks:
            process.kill()
            process.wait()
    assert process_state(ranks[0].pid) is None


def test_a_process_named_with_a_parenthesis_has_its_state_read(tmp_path):
    """/proc/<pid>/stat puts the process's name in parentheses, and a name may hold one itself."""
    import subprocess
    import sys

    code = "import time; open('/proc/self/comm', 'w').write('rank) 1'); print('named', flush=True); time.sleep(60)"
    rank = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert rank.stdout.readline() == b"named\n"
        assert Path(f"/proc/{rank.pid}/comm").read_text() == "rank) 1\n"
        assert process_state(rank.pid) in ("S", "R")
    finally:
        rank.kill()
        rank.wait()
    assert process_state(rank.pid) is None and process_state(None) is None
