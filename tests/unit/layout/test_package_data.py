"""An installed dpo-bench has every file of bench/: a wheel built from the checkout (setuptools, as `pip install .`
builds it) holds each module and each file read beside them (the site's templates, the estimator's calibration,
the Slurm job template and scripts)."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from bench.paths import PROJECT_ROOT


def package_files(root: Path) -> set[str]:
    return {
        p.relative_to(root).as_posix()
        for p in (root / "bench").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def test_a_wheel_holds_every_file_of_the_package(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(PROJECT_ROOT / name, source / name)
    shutil.copytree(PROJECT_ROOT / "bench", source / "bench", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"]
    done = subprocess.run([*argv, "-w", str(tmp_path / "out"), str(source)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (wheel,) = (tmp_path / "out").glob("dpo_bench-*.whl")
    shipped = {name for name in zipfile.ZipFile(wheel).namelist() if name.startswith("bench/")}
    expected = package_files(source)
    assert any(name.startswith("bench/report/templates/") for name in expected)
    assert expected - shipped == set()
