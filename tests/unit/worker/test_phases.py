"""A rank's timeline: its process's start read from the kernel, the events in the order a rank passes them."""

import os
import subprocess
import sys
import time

import pytest

from bench.worker import phases


@pytest.fixture(autouse=True)
def clean_timeline():
    phases.clear()
    yield
    phases.clear()


def test_the_process_start_is_the_kernels_start_time_set_against_the_clocks_now():
    # starttime (field 22) of 2500 ticks: 25 s after boot; booted 100 s ago by the boot clock, now is 1000.0 epoch
    fields = ["S", *["0"] * 18, "2500", *["0"] * 30]
    stat = f"123 (python (x) y) {' '.join(fields)}"
    assert phases.process_start(stat, now=1000.0, since_boot=100.0) == pytest.approx(
        1000.0 - (100.0 - 2500 / os.sysconf("SC_CLK_TCK"))
    )


def test_a_child_process_reads_its_own_start_between_its_spawn_and_its_first_line():
    before = time.time()
    code = "import time; from bench.worker import phases; print(phases.process_start(), time.time())"
    started, running = map(float, subprocess.check_output([sys.executable, "-c", code], text=True).split())
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert before - 2 * tick <= started <= running


def test_the_timeline_keeps_the_order_of_the_events_and_a_later_mark_replaces_an_earlier():
    phases.mark("imported", 3.0)
    phases.mark("main_start", 1.0)
    phases.mark("last_step", 5.0)
    phases.mark("last_step", 6.0)
    assert list(phases.timeline().items()) == [("main_start", 1.0), ("imported", 3.0), ("last_step", 6.0)]


def test_an_unknown_event_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown phase event 'loaded'.*process_start"):
        phases.mark("loaded")
