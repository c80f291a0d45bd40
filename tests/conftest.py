from pathlib import Path

import pytest

from bench.profiles import HardwareProfile


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
