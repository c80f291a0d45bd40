"""Real processes: timeouts kill the whole cell, escaped descendants included."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bench.executors import local
from bench.executors.base import LaunchPlan
from bench.executors.local import LocalExecutor, marked_pids, run_local
from bench.isolation.cgroups import CellCgroups, CgroupFs, locate

SPAWNER = """
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
open(sys.argv[1], "w").write("ready")
time.sleep(300)
"""


def _proc_read(pid: str, name: str) -> bytes:
    try:
        return (Path("/proc") / pid / name).read_bytes()
    except OSError:
        return b""


def _alive_with(marker: str) -> list[int]:
    """Live processes whose command line contains `marker`."""
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and marker.encode() in _proc_read(p, "cmdline")]


def test_timeout_kills_group_and_escaped_children(tmp_path):
    ready = tmp_path / "ready"
    script = tmp_path / "spawner_unique_marker.py"
    script.write_text(SPAWNER)
    launch = LaunchPlan(argv=[sys.executable, str(script), str(ready)])
    started = time.monotonic()
    outcome = run_local(launch, tmp_path / "log", timeout_s=3, cwd=tmp_path)
    assert outcome.timed_out and time.monotonic() - started < 15
    assert ready.read_text() == "ready"
    # the spawner, its child, and the child that escaped into its own session are all gone
    assert _alive_with("spawner_unique_marker") == []
    sleepers = _alive_with("time.sleep(300)")
    assert [p for p in sleepers if b"BENCH_CELL_TOKEN=" in _proc_read(str(p), "environ")] == []


def test_exit_code_and_log_tail(tmp_path):
    launch = LaunchPlan(argv=[sys.executable, "-c", "import sys; print('hello'); sys.exit(3)"])
    outcome = run_local(launch, tmp_path / "log", timeout_s=30, cwd=tmp_path)
    assert outcome.exit_code == 3 and not outcome.timed_out and "hello" in outcome.log_tail


def test_missing_launcher_is_exit_127_with_a_message(tmp_path):
    outcome = run_local(LaunchPlan(argv=["no-such-launcher-xyz"]), tmp_path / "log", timeout_s=5, cwd=tmp_path)
    assert outcome.exit_code == 127 and "no-such-launcher-xyz" in outcome.log_tail


def test_marked_pids_finds_nothing_for_an_unknown_token():
    assert marked_pids("0" * 32) == []


# --- per-rank memory budget (real cgroups; this machine kind: root, cgroup v1) ---------------------------------

MIB = 1 << 20
ROOT = Path(__file__).resolve().parents[3]
WORKER = """
import os, sys
from bench.isolation.cgroups import join_rank
rank = int(os.environ.get("RANK", "0"))
assert join_rank(rank, os.environ)
chunks = [b"\\x01" * (1 << 20) for _ in range(int(sys.argv[1 + rank]))]
print(f"rank {rank} survived", flush=True)
"""
LAUNCHER = """
import os, subprocess, sys
workers = [subprocess.Popen([sys.executable, sys.argv[1], *sys.argv[2:]], env=os.environ | {"RANK": str(r)})
           for r in range(2)]
codes = [w.wait() for w in workers]
print("worker exit codes", codes, flush=True)
sys.exit(1 if any(codes) else 0)
"""


@pytest.fixture
def own_cgroup():
    """The real own memory cgroup (fails, never skips, where there is none); no new cell cgroup is left."""
    path = locate().path
    before = set(path.glob("dpo-bench-*"))
    yield path
    assert set(path.glob("dpo-bench-*")) - before == set()


def _scripts(tmp_path: Path) -> tuple[Path, Path]:
    worker, launcher = tmp_path / "worker.py", tmp_path / "launcher.py"
    worker.write_text(WORKER)
    launcher.write_text(LAUNCHER)
    return worker, launcher


def test_budget_oom_kills_the_rank_and_reports_it(tmp_path, own_cgroup, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    worker, _ = _scripts(tmp_path)
    launch = LaunchPlan(argv=[sys.executable, str(worker), "256"], ranks=1)
    outcome = run_local(launch, tmp_path / "log", timeout_s=60, cwd=tmp_path, memory_budget_bytes=64 * MIB)
    assert outcome.exit_code == -signal.SIGKILL and outcome.oom_killed and not outcome.timed_out
    [rank] = outcome.rank_memory
    assert rank.rank == 0 and rank.limit_bytes == 64 * MIB and rank.oom_kills >= 1
    assert 0.9 * 64 * MIB <= rank.peak_bytes <= 64 * MIB


def test_budget_is_per_rank_behind_a_launcher(tmp_path, own_cgroup, monkeypatch):
    """The launcher (in the cell cgroup, no limit) starts two workers; only rank 1 goes past the budget."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    worker, launcher = _scripts(tmp_path)
    launch = LaunchPlan(argv=[sys.executable, str(launcher), str(worker), "16", "256"], ranks=2)
    outcome = LocalExecutor(tmp_path, memory_budget_bytes=64 * MIB).run(launch, tmp_path / "log", 60, {})
    assert outcome.exit_code == 1 and outcome.oom_killed
    assert "rank 0 survived" in outcome.log_tail and "worker exit codes [0, -9]" in outcome.log_tail
    rank0, rank1 = outcome.rank_memory
    assert (rank0.rank, rank0.oom_kills, rank1.rank) == (0, 0, 1) and rank1.oom_kills >= 1
    assert 16 * MIB < rank0.peak_bytes < 64 * MIB and rank1.peak_bytes > 0.9 * 64 * MIB


def test_without_a_budget_there_are_no_cgroups(tmp_path, monkeypatch):
    launch = LaunchPlan(argv=[sys.executable, "-c", "import os; print(os.environ.get('BENCH_CGROUP_DIR'))"])
    outcome = run_local(launch, tmp_path / "log", timeout_s=30, cwd=tmp_path)
    assert outcome.exit_code == 0 and outcome.rank_memory == [] and not outcome.oom_killed
    assert "None" in outcome.log_tail


def test_budget_timeout_kills_the_cell_and_removes_its_cgroups(tmp_path, own_cgroup):
    ready = tmp_path / "ready"
    script = tmp_path / "spawner_budget_marker.py"
    script.write_text(SPAWNER)
    launch = LaunchPlan(argv=[sys.executable, str(script), str(ready)], ranks=2)
    outcome = run_local(launch, tmp_path / "log", timeout_s=3, cwd=tmp_path, memory_budget_bytes=256 * MIB)
    assert outcome.timed_out and ready.read_text() == "ready"
    assert [r.oom_kills for r in outcome.rank_memory] == [0, 0]
    assert _alive_with("spawner_budget_marker") == []


def _interrupt_self() -> None:
    os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C: Python raises KeyboardInterrupt unless it is deferred


SETUP_INTERRUPTS = ["sigint_in_setup", "keyboard_interrupt_half_way_in_setup"]
WAIT_INTERRUPTS = ["sigint_after_popen", "sigint_in_wait", "sigint_in_cleanup"]
INTERRUPTS = [
    *[pytest.param(where, 64 * MIB, id=f"{where}-budget") for where in SETUP_INTERRUPTS + WAIT_INTERRUPTS],
    *[pytest.param(where, None, id=f"{where}-no_budget") for where in WAIT_INTERRUPTS],
]


@pytest.mark.parametrize(("where", "budget"), INTERRUPTS)
def test_ctrl_c_anywhere_leaves_no_process_and_no_cgroup(tmp_path, own_cgroup, monkeypatch, where, budget):
    marker = f"spawner_{where}_marker"
    ready = tmp_path / "ready"
    script = tmp_path / f"{marker}.py"
    script.write_text(SPAWNER)
    if where == "sigint_in_setup":
        create = CellCgroups.create
        monkeypatch.setattr(CellCgroups, "create", lambda self: (create(self), _interrupt_self()))
    elif where == "keyboard_interrupt_half_way_in_setup":
        write, calls = CgroupFs.write, []

        def write_then_interrupt(self, path, text):
            calls.append(path)
            if len(calls) == 3:  # rank0 has its limit and memsw limit, rank1 is made without its limit
                raise KeyboardInterrupt
            write(self, path, text)

        monkeypatch.setattr(CgroupFs, "write", write_then_interrupt)
    elif where == "sigint_after_popen":

        class InterruptedPopen(subprocess.Popen):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                _interrupt_self()

        monkeypatch.setattr(local.subprocess, "Popen", InterruptedPopen)
    elif where == "sigint_in_wait":

        def when_ready():
            deadline = time.monotonic() + 30
            while not ready.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            _interrupt_self()

        threading.Thread(target=when_ready, daemon=True).start()
    elif where == "sigint_in_cleanup":
        remove = local.remove_group_segments
        monkeypatch.setattr(local, "remove_group_segments", lambda env: (_interrupt_self(), remove(env))[1])
    launch = LaunchPlan(argv=[sys.executable, str(script), str(ready)], ranks=2)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_local(launch, tmp_path / "log", timeout_s=4, cwd=tmp_path, memory_budget_bytes=budget)
    assert time.monotonic() - started < 15
    assert _alive_with(marker) == []
    sleepers = _alive_with("time.sleep(300)")
    assert [p for p in sleepers if b"BENCH_CELL_TOKEN=" in _proc_read(str(p), "environ")] == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_cell_killed_mid_build_leaves_no_build_lock_but_older_locks_stay(tmp_path, monkeypatch):
    # torch's FileBaton: a JIT build holds <extensions>/<op>/lock and unlinks it when done; a killed rank cannot.
    extensions = tmp_path / "ext"
    (extensions / "other_op").mkdir(parents=True)
    older = extensions / "other_op" / "lock"
    older.write_text("")
    os.utime(older, (time.time() - 3600, time.time() - 3600))  # another run's build, started before this cell
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(extensions))
    building = (
        "import os, pathlib, time; d = pathlib.Path(os.environ['TORCH_EXTENSIONS_DIR'], 'cpu_adam'); "
        "d.mkdir(); (d / 'lock').write_text(''); print('building', flush=True); time.sleep(60)"
    )
    outcome = run_local(LaunchPlan(argv=[sys.executable, "-c", building]), tmp_path / "log", timeout_s=3, cwd=tmp_path)
    assert outcome.timed_out and "building" in outcome.log_tail
    assert not (extensions / "cpu_adam" / "lock").exists()
    assert older.exists()


def test_a_build_lock_another_runner_holds_open_stays(tmp_path):
    """A build in progress (torch's FileBaton keeps its lock open until the build is done) is not a dead cell's."""
    (tmp_path / "cpu_adam").mkdir()
    lock = tmp_path / "cpu_adam" / "lock"
    code = f"import os, time; fd = os.open({str(lock)!r}, os.O_CREAT | os.O_EXCL); print('held', flush=True); "
    code += "time.sleep(60)"
    builder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert builder.stdout.readline() == "held\n"
        assert local.remove_stale_build_locks(tmp_path, since=0) == [] and lock.exists()
    finally:
        builder.kill()
        builder.wait()
    assert local.remove_stale_build_locks(tmp_path, since=0) == [lock] and not lock.exists()


def test_a_plans_own_memory_budget_is_the_one_its_ranks_run_under(tmp_path, monkeypatch):
    """A cell in a slot of the host's memory carries its cap in its plan: that, else the executor's budget."""
    import bench.executors.local as local
    from bench.executors.base import LaunchPlan

    budgets = []
    monkeypatch.setattr(local, "run_local", lambda launch, log, timeout, cwd, budget, *rest: budgets.append(budget))
    executor = local.LocalExecutor(tmp_path, memory_budget_bytes=3 << 30)
    executor.run(LaunchPlan(argv=["true"], memory_budget_bytes=1 << 28), tmp_path / "a.log", 10.0, {})
    executor.run(LaunchPlan(argv=["true"]), tmp_path / "b.log", 10.0, {})
    assert budgets == [1 << 28, 3 << 30]
