"""The slot ledger (bench/run/slot_ledger.py): disjoint devices handed out in the runner, and one device's slots
handed out through a file every runner on the machine shares, under its lock. Real files, real flock, real pids."""

import json
import os
import subprocess
import sys
import time

import pytest

from bench.errors import BenchError
from bench.run.slot_ledger import DeviceLedger, Devices, Span, process_since

GB = 10**9


def ledger(run_id: str, slots: int = 4, memory: int = 100 * GB, pid: int | None = None) -> DeviceLedger:
    made = DeviceLedger.for_device("GPU-ab/12", slots, memory, run_id)
    return made if pid is None else DeviceLedger(made.path, slots, memory, run_id, pid)


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_devices_in_the_runner_are_handed_out_and_back_and_name_the_cells_beside():
    devices = Devices(2, "r")
    a_slots, a = devices.take(1, "a")
    b_slots, b = devices.take(1, "b")
    assert (a_slots, b_slots) == ([0], [1]) and devices.take(1, "c") is None
    assert devices.give(a_slots, a) == ["b"]
    c_slots, c = devices.take(1, "c")
    assert c_slots == [0]
    assert devices.give(b_slots, b) == ["a", "c"]
    assert devices.give(c_slots, c) == ["b"]


def test_runs_on_one_device_take_disjoint_slots_and_name_each_others_cells():
    first, second = ledger("run1"), ledger("run2")
    assert first.path.parent.name == "slots" and first.path.name == "GPU-ab_12.json"
    one, one_span = first.take(2, "a")
    two, two_span = second.take(2, "b")
    assert (one, two) == ([0, 1], [2, 3]) and first.take(1, "c") is None
    assert first.give(one, one_span) == ["run2/b"]
    assert second.give(two, two_span) == ["run1/a"]  # a ended while b ran: still beside it
    three, three_span = second.take(1, "c")
    assert second.give(three, three_span) == []  # a and b ended before c started; the file forgot them
    stored = json.loads(first.path.read_text())
    assert stored["holders"] == [] and stored["ended"] == [
        {"run_id": "run2", "cell": "c", "started": three_span.started, "ended": three_span.ended}
    ]


def test_a_run_waiting_for_the_whole_device_holds_the_other_runs_off_until_it_ran():
    first, second = ledger("run1"), ledger("run2", pid=os.getppid())  # another live process
    held, span = second.take(1, "b")
    assert first.take(4, "alone") is None  # waits, and says so
    assert second.take(1, "c") is None  # held off, though slots are free
    small = first.take(1, "small")  # the waiting run itself is not held off
    assert small is not None and small[0] == [1]
    second.give(held, span)
    assert first.take(4, "alone") is None  # its own small cell still holds a slot
    first.give(*small)
    alone = first.take(4, "alone")
    assert alone is not None and alone[0] == [0, 1, 2, 3]
    assert json.loads(first.path.read_text())["waiting"] == []  # it ran: the others may take slots again
    first.give(*alone)
    assert second.take(1, "c") is not None


def test_a_dead_runners_slots_and_wait_are_let_go_by_the_next_reader():
    other = os.getppid()
    ledger("gone", pid=other).take(3, "a")
    ledger("gone", pid=other).take(4, "alone")  # waits for the whole device
    stored = json.loads(ledger("gone").path.read_text())
    assert len(stored["holders"]) == 1 and len(stored["waiting"]) == 1
    for entry in stored["holders"] + stored["waiting"]:
        entry["pid"] = dead_pid()  # its runner died (SIGKILL): nothing of it cleaned up
    ledger("gone").path.write_text(json.dumps(stored))
    taken, _ = ledger("live").take(4, "alone")
    assert taken == [0, 1, 2, 3]
    stored = json.loads(ledger("live").path.read_text())
    assert stored["waiting"] == [] and [e["cell"] for e in stored["ended"]] == ["a"]


def test_a_pid_that_another_process_took_is_not_the_holder():
    record = ledger("old", pid=os.getpid())
    record.take(4, "a")
    stored = json.loads(record.path.read_text())
    stored["holders"][0]["since"] -= 1  # the same pid, started at another time: a reused pid
    record.path.write_text(json.dumps(stored))
    assert ledger("new").take(4, "b") is not None  # the reused pid's slots are let go
    stored = json.loads(record.path.read_text())
    assert [h["cell"] for h in stored["holders"]] == ["b"]
    stored["holders"][0]["since"] = None  # a start time that could not be read: a live pid is taken as the holder
    record.path.write_text(json.dumps(stored))
    assert ledger("newer").take(1, "c") is None


def test_a_run_asking_for_other_slots_than_the_runs_on_the_device_is_a_one_line_error():
    first = ledger("run1")
    held, span = first.take(1, "a")
    with pytest.raises(BenchError, match=r"--gpu-slots 5 .*run\(s\) run1 share this device in 4 slots.*--gpu-slots 4"):
        ledger("run2", slots=5).take(1, "b")
    first.give(held, span)
    assert ledger("run2", slots=5).take(1, "b") is not None  # nobody on it: the new cut stands


def test_leaving_lets_go_of_everything_the_run_held_or_waited_for():
    first, second = ledger("run1"), ledger("run2", pid=os.getppid())
    first.take(2, "a")
    second.take(1, "b")
    ledger("run1").take(4, "alone")
    first.leave()
    stored = json.loads(first.path.read_text())
    assert [h["cell"] for h in stored["holders"]] == ["b"] and stored["waiting"] == []


def test_an_unreadable_ledger_starts_afresh_and_a_span_is_named_by_its_run():
    made = ledger("r")
    made.path.write_text("{not json")
    assert made.take(1, "a") is not None
    assert process_since(os.getpid()) == process_since(os.getpid()) is not None
    assert process_since(dead_pid()) is None
    span = Span("r", "a", time.time())
    assert span.ended is None
