"""The memory-phase probe's pure parts: /proc parsing and the profiler-trace reading behind the CPU terms."""

from bench.selfbench import memory_phases
from bench.units import MiB


def test_status_fields():
    text = "Name:\tpython\nRssAnon:\t  2048 kB\nRssFile:\t  1024 kB\n"
    assert memory_phases._status_mib(text, "RssAnon") == 2.0
    assert memory_phases._status_mib(text, "RssShmem") == 0.0


def test_mallinfo_reads_glibc():
    info = memory_phases.mallinfo()
    assert info is None or info["uordblks"] > 0


def memory(ts: float, total: float, size: float) -> dict:
    return {
        "name": "[memory]",
        "ph": "i",
        "ts": ts,
        "args": {"Device Type": 0, "Total Allocated": total, "Bytes": size},
    }


def test_tensor_peak_and_the_phase_holding_it():
    trace = {
        "traceEvents": [
            {"name": "phase:head_forward", "ph": "X", "ts": 0, "dur": 10},
            {"name": "phase:backward", "ph": "X", "ts": 20, "dur": 50},
            {"name": "phase:head_backward", "ph": "X", "ts": 25, "dur": 10},
            memory(1, 4 * MiB, 4 * MiB),
            memory(21, 5 * MiB, 5 * MiB),
            memory(26, 13 * MiB, 8 * MiB),
            memory(40, 6 * MiB, -7 * MiB),
            {"name": "[memory]", "ph": "i", "ts": 27, "args": {"Device Type": 1, "Total Allocated": 99 * MiB}},
        ]
    }
    result = memory_phases.tensor_timeline(trace)
    assert result["tensor_peak"] == 13.0 and result["tensor_peak_phase"] == "head_backward"
    assert result["tensor_at_peak_phase_start"] == 5.0
    assert result["tensor_peak_by_phase"] == {"head_forward": 4.0, "backward": 13.0, "head_backward": 13.0}
    assert memory_phases.tensor_timeline({"traceEvents": []})["tensor_peak"] is None
