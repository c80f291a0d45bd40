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
