import signal
from pathlib import Path

import pytest

# A shell that starts a command in the background (`cmd &`, as a CI wrapper or `nohup … &` may) hands it SIGINT
# *ignored*, and an ignored signal stays ignored across exec: the Ctrl-C tests (real SIGINTs, in this process and
# in the runners it starts) would then test nothing. Take the disposition a terminal user has; children started
# from here get SIGINT's default back at exec.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

from bench.matrix.profiles import HardwareProfile


@pytest.fixture(autouse=True)
def own_runners_dir(tmp_path_factory, monkeypatch) -> Path:
    """Runners register machine-wide (bench/run/runner_registry.py) and mark cells measured while another runner
    ran: each test gets a folder of its own (its runner subprocesses inherit it), so tests and other work on the
    machine never mark each other's records."""
    folder = tmp_path_factory.mktemp("runners")
    monkeypatch.setenv("BENCH_RUNNERS_DIR", str(folder))
    return folder


@pytest.fixture
def cpu_profile() -> HardwareProfile:
    return HardwareProfile(
        name="cpu",
        device="cpu",
        device_count=1,
        processes=2,
        precision="fp32",
        image_flavor="cpu",
        workload="tiny",
        timeout_s=120,
    )


@pytest.fixture
def scenario_copy(tmp_path: Path) -> Path:
    """A writable copy of scenarios/ for tests that plant bad files."""
    import shutil

    from bench.paths import SCENARIOS_DIR

    target = tmp_path / "scenarios"
    shutil.copytree(SCENARIOS_DIR, target, ignore=shutil.ignore_patterns("data"))
    return target


@pytest.fixture
def small_disk(tmp_path: Path):
    """A real file system of its own (a 32 MiB tmpfs) that a test can fill up; unmounted afterwards. Mounting needs
    root (CAP_SYS_ADMIN), which this machine kind and CI have."""
    import subprocess

    mount = tmp_path / "small_disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    assert done.returncode == 0, f"could not mount a tmpfs at {mount}: {done.stderr.strip()}"
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=False)


def fill_up(disk: Path) -> Path:
    """Write a file until the disk has no room left; returns it (unlink it to free the space)."""
    import errno
    import os

    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (1 << 20, 4096, 1):
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
    finally:
        os.close(fd)
    return filler
