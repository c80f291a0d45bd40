"""Per-rank memory cgroups: v1 and v2 logic on a fake tree, then the real kernel (this machine kind: root, v1).

The real-kernel tests do not skip: where the kernel refuses, they fail with CgroupUnavailable's one line.
"""

import errno
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bench.isolation.cgroups import (
    CELL_ENV,
    CgroupFs,
    CgroupUnavailable,
    RankMemory,
    cell_cgroups,
    check_available,
    join_rank,
    locate,
    own_peak_bytes,
    own_usage_bytes,
    remove_stale,
)

MIB = 1 << 20
ROOT = Path(__file__).resolve().parents[3]

# --- a fake cgroup tree ----------------------------------------------------------------------------------------

CONTROL_FILES = {
    "v1": {
        "cgroup.procs": "",
        "memory.limit_in_bytes": "9223372036854771712\n",
        "memory.memsw.limit_in_bytes": "9223372036854771712\n",
        "memory.max_usage_in_bytes": "0\n",
        "memory.usage_in_bytes": "0\n",
        "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
    },
    "v2": {
        "cgroup.procs": "",
        "cgroup.controllers": "memory pids\n",
        "cgroup.subtree_control": "",
        "memory.max": "max\n",
        "memory.swap.max": "max\n",
        "memory.peak": "0\n",
        "memory.current": "0\n",
        "memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
    },
}


@dataclass(frozen=True)
class FakeFs(CgroupFs):
    """Behaves like cgroupfs where it matters: mkdir makes the control files, rmdir refuses a cgroup that holds
    processes or children, kill takes a pid out of the tree, and a v2 subtree_control write can be refused."""

    version: str = "v1"
    refuse_subtree: bool = False
    fail_on_write: int | None = None
    """Raise KeyboardInterrupt on this write (1-based): setup cut half-way."""
    writes: list = field(default_factory=list)
    killed: list = field(default_factory=list)

    def mkdir(self, path: Path) -> None:
        path.mkdir()
        for name, text in CONTROL_FILES[self.version].items():
            if name != "cgroup.controllers":
                (path / name).write_text(text)

    def rmdir(self, path: Path) -> None:
        if (path / "cgroup.procs").read_text().split() or any(p.is_dir() for p in path.iterdir()):
            raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(path))
        shutil.rmtree(path)

    def write(self, path: Path, text: str) -> None:
        self.writes.append((path, text))
        if self.fail_on_write == len(self.writes):
            raise KeyboardInterrupt
        if path.name == "cgroup.subtree_control" and self.refuse_subtree:
            raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(path))
        super().write(path, text)

    def kill(self, pid: int) -> None:
        self.killed.append(pid)
        for procs in self.root.rglob("cgroup.procs"):
            procs.write_text("".join(f"{p}\n" for p in procs.read_text().split() if int(p) != pid))


def fake_tree(tmp_path: Path, version: str, controllers: str = "memory pids", **kwargs) -> tuple[FakeFs, Path]:
    """/proc/self/{cgroup,mountinfo} and the own memory cgroup of a v1 machine (like this one) or a v2-only one."""
    proc = tmp_path / "proc" / "self"
    proc.mkdir(parents=True)
    if version == "v1":
        proc.joinpath("cgroup").write_text("5:devices:/\n4:memory:/process_api/abc\n1:cpu,cpuacct:/\n0::/\n")
        proc.joinpath("mountinfo").write_text(
            "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
            "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
            "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
        )
        own = tmp_path / "sys/fs/cgroup/memory/process_api/abc"
        (tmp_path / "sys/fs/cgroup/unified").mkdir(parents=True)
        (tmp_path / "sys/fs/cgroup/unified/cgroup.controllers").write_text("hugetlb\n")
    else:
        proc.joinpath("cgroup").write_text("0::/user.slice/bench.scope\n")
        proc.joinpath("mountinfo").write_text("25 20 0:23 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n")
        own = tmp_path / "sys/fs/cgroup/user.slice/bench.scope"
    own.mkdir(parents=True)
    for name, text in CONTROL_FILES[version].items():
        (own / name).write_text(text)
    if version == "v2":
        (own / "cgroup.controllers").write_text(controllers + "\n")
    return FakeFs(proc=tmp_path / "proc", root=tmp_path, version=version, **kwargs), own


def cells_in(own: Path) -> list[Path]:
    return sorted(own.glob("dpo-bench-*"))


# --- detection -------------------------------------------------------------------------------------------------


def test_v1_is_found_through_mountinfo_and_preferred(tmp_path):
    fs, own = fake_tree(tmp_path, "v1")
    group = locate(fs)
    assert (group.version, group.path) == ("v1", own)
    check_available(fs)


def test_v2_is_found_and_gives_its_children_the_memory_controller(tmp_path):
    fs, own = fake_tree(tmp_path, "v2")
    group = locate(fs)
    assert (group.version, group.path) == ("v2", own)
    assert (own / "cgroup.subtree_control", "+memory") in fs.writes


def test_a_subtree_mount_is_joined_without_its_root(tmp_path):
    fs, _ = fake_tree(tmp_path, "v1")
    (fs.proc / "self/mountinfo").write_text(
        "35 31 0:32 /process_api /sys/fs/cgroup/mem\\040ory rw - cgroup cgroup rw,memory\n"
    )
    target = tmp_path / "sys/fs/cgroup/mem ory/abc"
    target.mkdir(parents=True)
    assert locate(fs).path == target


def test_no_memory_controller_is_one_line_naming_both_versions(tmp_path):
    fs, own = fake_tree(tmp_path, "v2", controllers="cpu pids")
    (fs.proc / "self/cgroup").write_text("4:cpu:/\n0::/user.slice/bench.scope\n")
    with pytest.raises(CgroupUnavailable) as info:
        check_available(fs)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("per-rank memory budget: no writable memory cgroup (")
    assert "cgroup v1: memory controller not mounted" in message
    assert f"cgroup v2: memory controller not delegated to {own}" in message
    assert "run as root" in message


def test_v2_subtree_control_refused_is_one_line_naming_the_file(tmp_path):
    fs, own = fake_tree(tmp_path, "v2", refuse_subtree=True)
    with pytest.raises(CgroupUnavailable) as info:
        check_available(fs)
    message = str(info.value)
    assert "\n" not in message
    assert f"{own / 'cgroup.subtree_control'} refused +memory (Device or resource busy" in message
    assert "holds processes" in message


# --- a cell's cgroups on the fake tree -------------------------------------------------------------------------


def test_v1_cell_gets_a_limit_per_rank_and_no_swap_and_is_removed(tmp_path):
    fs, own = fake_tree(tmp_path, "v1")
    with cell_cgroups("tok", 2, 64 * MIB, fs) as cell:
        assert cell.path == own / "dpo-bench-tok" and cell.env == {CELL_ENV: str(cell.path)}
        for rank in (0, 1):
            assert (cell.path / f"rank{rank}/memory.limit_in_bytes").read_text() == str(64 * MIB)
            assert (cell.path / f"rank{rank}/memory.memsw.limit_in_bytes").read_text() == str(64 * MIB)
        assert not (cell.path / "rank2").exists()
        assert (cell.path / "memory.limit_in_bytes").read_text().strip() == "9223372036854771712"
    assert cells_in(own) == []


def test_v2_cell_gets_memory_max_and_swap_max_zero(tmp_path):
    fs, own = fake_tree(tmp_path, "v2")
    with cell_cgroups("tok", 1, 64 * MIB, fs) as cell:
        assert (cell.path / "rank0/memory.max").read_text() == str(64 * MIB)
        assert (cell.path / "rank0/memory.swap.max").read_text() == "0"
    assert cells_in(own) == []


def test_read_parses_v1_peak_and_oom_kill(tmp_path):
    fs, _ = fake_tree(tmp_path, "v1")
    with cell_cgroups("tok", 2, 64 * MIB, fs) as cell:
        (cell.path / "rank1/memory.max_usage_in_bytes").write_text(f"{64 * MIB}\n")
        (cell.path / "rank1/memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
        assert cell.read() == [
            RankMemory(rank=0, limit_bytes=64 * MIB, peak_bytes=0, oom_kills=0, version="v1"),
            RankMemory(rank=1, limit_bytes=64 * MIB, peak_bytes=64 * MIB, oom_kills=2, version="v1"),
        ]


def test_read_parses_v2_events_and_an_absent_peak_is_none(tmp_path):
    fs, _ = fake_tree(tmp_path, "v2")
    with cell_cgroups("tok", 1, 64 * MIB, fs) as cell:
        (cell.path / "rank0/memory.peak").unlink()  # kernels before 5.19
        (cell.path / "rank0/memory.events").write_text("low 0\nhigh 0\nmax 40\noom 1\noom_kill 1\n")
        assert cell.read() == [RankMemory(rank=0, limit_bytes=64 * MIB, peak_bytes=None, oom_kills=1, version="v2")]
        (cell.path / "rank0/memory.max").write_text("max\n")
        assert cell.read()[0].limit_bytes is None


def test_cleanup_kills_what_is_left_in_any_of_the_cgroups(tmp_path):
    fs, own = fake_tree(tmp_path, "v1")
    with cell_cgroups("tok", 2, 64 * MIB, fs) as cell:
        (cell.path / "cgroup.procs").write_text("999001\n")
        (cell.path / "rank1/cgroup.procs").write_text("999002\n999003\n")
    assert sorted(fs.killed) == [999001, 999002, 999003]
    assert cells_in(own) == []


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("fail_on_write", [1, 2, 3])
def test_setup_cut_half_way_leaves_nothing(tmp_path, version, fail_on_write):
    fs, own = fake_tree(tmp_path, version, fail_on_write=fail_on_write + (1 if version == "v2" else 0))
    with pytest.raises(KeyboardInterrupt), cell_cgroups("tok", 3, 64 * MIB, fs):
        pytest.fail("the body must not run")
    assert cells_in(own) == []


def test_an_exception_in_the_body_still_cleans_and_propagates(tmp_path):
    fs, own = fake_tree(tmp_path, "v1")
    with pytest.raises(KeyboardInterrupt), cell_cgroups("tok", 2, 64 * MIB, fs) as cell:
        (cell.path / "rank0/cgroup.procs").write_text("999004\n")
        raise KeyboardInterrupt
    assert fs.killed == [999004] and cells_in(own) == []


def test_a_cell_cgroup_that_exists_already_is_refused_and_left_alone(tmp_path):
    fs, own = fake_tree(tmp_path, "v1")
    fs.mkdir(own / "dpo-bench-tok")
    (own / "dpo-bench-tok/cgroup.procs").write_text("999005\n")
    with pytest.raises(CgroupUnavailable, match="could not set up"), cell_cgroups("tok", 1, MIB, fs):
        pass
    assert fs.killed == [] and cells_in(own) == [own / "dpo-bench-tok"]


def test_join_rank_writes_the_own_pid_into_the_rank_cgroup(tmp_path):
    fs, _ = fake_tree(tmp_path, "v1")
    assert join_rank(0, {}) is False
    with cell_cgroups("tok", 2, MIB, fs) as cell:
        assert join_rank(1, cell.env) is True
        assert (cell.path / "rank1/cgroup.procs").read_text() == str(os.getpid())
        (cell.path / "rank1/cgroup.procs").write_text("")
        with pytest.raises(RuntimeError, match=r"rank 2 cannot join its memory cgroup: .*rank2 does not exist"):
            join_rank(2, cell.env)


def test_own_usage_and_peak(tmp_path):
    fs, own = fake_tree(tmp_path, "v1")
    (own / "memory.usage_in_bytes").write_text("123\n")
    (own / "memory.max_usage_in_bytes").write_text("456\n")
    assert (own_usage_bytes(fs), own_peak_bytes(fs)) == (123, 456)
    fs2, own2 = fake_tree(tmp_path / "b", "v2")
    (own2 / "memory.current").write_text("7\n")
    (own2 / "memory.peak").unlink()
    assert (own_usage_bytes(fs2), own_peak_bytes(fs2)) == (7, None)
    (fs2.proc / "self/cgroup").write_text("0::/nowhere\n")
    assert own_usage_bytes(fs2) is None


def test_remove_stale_takes_only_old_empty_cells(tmp_path):
    fs, own = fake_tree(tmp_path, "v1")
    for name in ("dpo-bench-dead", "dpo-bench-busy", "other"):
        fs.mkdir(own / name)
    fs.mkdir(own / "dpo-bench-dead/rank0")
    (own / "dpo-bench-busy/cgroup.procs").write_text(f"{os.getpid()}\n")
    assert remove_stale(fs) == []  # too young: may be a runner beside this one, between setup and launch
    assert remove_stale(fs, min_age_s=0) == [own / "dpo-bench-dead"]
    assert sorted(p.name for p in own.iterdir() if p.is_dir()) == ["dpo-bench-busy", "other"]
    assert fs.killed == []


# --- the real kernel (this machine kind: root, cgroup v1) ------------------------------------------------------

ALLOCATE = """
import os, sys, time
from bench.isolation.cgroups import join_rank
assert join_rank(int(sys.argv[1]), os.environ)
chunks = [b"\\x01" * (1 << 20) for _ in range(int(sys.argv[2]))]
print("survived", flush=True)
"""
SLEEP = """
import os, sys, time
from bench.isolation.cgroups import join_rank
join_rank(int(sys.argv[1]), os.environ)
print("joined", flush=True)
time.sleep(600)
"""


@pytest.fixture
def own():
    """The real own memory cgroup; the test fails (never skips) where none is usable, and leaves no new cell."""
    path = locate().path
    before = set(path.glob("dpo-bench-*"))
    yield path
    assert set(path.glob("dpo-bench-*")) - before == set()


def start(code: str, cell, *args: object) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code, *map(str, args)],
        env=os.environ | cell.env | {"PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )


def wait_joined(process: subprocess.Popen) -> None:
    assert process.stdout.readline().strip() == "joined"


def test_real_rank_past_its_limit_is_oom_killed_and_counted(own):
    token = uuid.uuid4().hex
    with cell_cgroups(token, 1, 64 * MIB) as cell:
        assert cell.version == "v1"
        started = time.monotonic()
        process = start(ALLOCATE, cell, 0, 256)
        out, _ = process.communicate(timeout=60)
        elapsed = time.monotonic() - started
        assert process.returncode == -signal.SIGKILL and "survived" not in out
        [rank] = cell.read()
        assert rank.limit_bytes == 64 * MIB and rank.oom_kills >= 1
        assert 0.9 * 64 * MIB <= rank.peak_bytes <= 64 * MIB
        assert elapsed < 30
    assert not cell.path.exists()


def test_real_rank_under_its_limit_survives(own):
    with cell_cgroups(uuid.uuid4().hex, 2, 128 * MIB) as cell:
        process = start(ALLOCATE, cell, 1, 16)
        out, _ = process.communicate(timeout=60)
        assert process.returncode == 0 and "survived" in out
        ranks = cell.read()
        assert [r.oom_kills for r in ranks] == [0, 0]
        assert ranks[1].peak_bytes > 16 * MIB and ranks[0].peak_bytes == 0


def test_real_cleanup_kills_processes_left_in_rank_and_cell_cgroups(own):
    with cell_cgroups(uuid.uuid4().hex, 2, 64 * MIB) as cell:
        worker = start(SLEEP, cell, 1)
        wait_joined(worker)
        launcher = subprocess.Popen(["sleep", "600"], preexec_fn=cell.add_self)
        assert {worker.pid, launcher.pid} <= cell.pids()
        assert str(worker.pid) in (cell.path / "rank1/cgroup.procs").read_text().split()
    assert worker.wait(timeout=5) == -signal.SIGKILL and launcher.wait(timeout=5) == -signal.SIGKILL
    assert not cell.path.exists()


def test_real_keyboard_interrupt_in_the_body_cleans_up(own):
    with pytest.raises(KeyboardInterrupt), cell_cgroups(uuid.uuid4().hex, 1, 64 * MIB) as cell:
        worker = start(SLEEP, cell, 0)
        wait_joined(worker)
        os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C: the body is not deferred, it raises here
        time.sleep(5)
        pytest.fail("SIGINT did not interrupt the body")
    assert worker.wait(timeout=5) == -signal.SIGKILL and not cell.path.exists()


def test_real_remove_stale_removes_an_empty_leftover(own):
    leftover = own / f"dpo-bench-x{uuid.uuid4().hex[:8]}"
    leftover.mkdir()
    (leftover / "rank0").mkdir()
    removed = remove_stale(min_age_s=0)
    assert leftover in removed and not leftover.exists()


def test_real_own_usage_and_peak_are_read():
    usage, peak = own_usage_bytes(), own_peak_bytes()
    assert usage is not None and peak is not None and 0 < usage <= peak
