"""An installed dpo-bench is the whole tool. A wheel built from the checkout (setuptools, as `pip install .` builds it)
holds each module and each file read beside them, the scenario folder (as bench/_scenarios), the host-ops script and
the commit it was built from. Installed outside the checkout, it reads its own scenarios or the folder `--scenarios`
names, writes ./results of the current folder, and plans and reports with none of the training stack importable
(.ci/wheel.sh does the same in a fresh venv with the base dependencies from PyPI)."""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from bench.install import TRAINING_STACK, VERSION
from bench.paths import PROJECT_ROOT

SOURCES = ("pyproject.toml", "README.md", "setup.py", "bench", "scenarios", "docker/cpu/prebuild_deepspeed_ops.py")
"""What the wheel is built from."""

WITHOUT_TRAINING_STACK = """
import importlib.metadata, importlib.util, runpy, sys

STACK = set(sys.argv[1].split(","))
find_spec, version = importlib.util.find_spec, importlib.metadata.version


class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in STACK:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def spec_unless_stack(name, package=None):
    return None if name.split(".")[0] in STACK else find_spec(name, package)


def version_unless_stack(name):
    if name in STACK:
        raise importlib.metadata.PackageNotFoundError(name)
    return version(name)


sys.meta_path.insert(0, NotInstalled())
importlib.util.find_spec, importlib.metadata.version = spec_unless_stack, version_unless_stack
sys.argv = ["dpo-bench", *sys.argv[2:]]
runpy.run_module("bench", run_name="__main__", alter_sys=True)
"""
"""`dpo-bench ARGS` as a base install runs it: importing, finding or asking the version of a module of the training
stack answers as for a module that is not installed."""


def package_files(root: Path, folder: str) -> set[str]:
    return {
        p.relative_to(root / folder).as_posix()
        for p in (root / folder).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def git(folder: Path, *args: str) -> str:
    argv = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", *args]
    return subprocess.run(argv, cwd=folder, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path, str]:
    """(the source folder, the wheel, the commit it was built from): the checkout's files committed to a repository
    of their own, built there."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "src"
    for name in SOURCES:
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if (PROJECT_ROOT / name).is_dir():
            shutil.copytree(PROJECT_ROOT / name, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy(PROJECT_ROOT / name, target)
    git(source, "init", "-q")
    git(source, "add", ".")
    git(source, "commit", "-qm", "built")
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"]
    done = subprocess.run([*argv, "-w", str(tmp / "out"), str(source)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (wheel,) = (tmp / "out").glob("dpo_bench-*.whl")
    return source, wheel, git(source, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def installed(built, tmp_path_factory) -> Path:
    """The wheel installed (no dependencies: this venv's serve) into a folder of its own."""
    site = tmp_path_factory.mktemp("site")
    argv = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(site), str(built[1])]
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return site


def dpo_bench(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The installed package run from `cwd`, as a base install (no training stack)."""
    code = [sys.executable, "-c", WITHOUT_TRAINING_STACK, ",".join(TRAINING_STACK), *args]
    return subprocess.run(code, cwd=cwd, env=installed_env(site, cwd), capture_output=True, text=True, timeout=300)


def installed_env(site: Path, home: Path) -> dict[str, str]:
    """This environment with the installed package first on the path, a home of its own, the Hub offline."""
    env = {k: v for k, v in os.environ.items() if k not in ("BENCH_SCENARIOS", "PYTHONPATH")}
    return env | {
        "PYTHONPATH": str(site),
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / "cache"),
        "HF_HUB_OFFLINE": "1",
    }


def test_a_wheel_holds_every_file_of_the_package_the_scenarios_and_its_commit(built):
    source, wheel, commit = built
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {name for name in names if name.startswith("bench/")}
    assert {f"bench/{name}" for name in package_files(source, "bench")} - shipped == set()
    assert any(name.startswith("bench/report/templates/") for name in shipped)
    scenarios = {f"bench/_scenarios/{name}" for name in package_files(source, "scenarios")}
    assert "bench/_scenarios/gpus.yaml" in scenarios and scenarios - shipped == set()
    assert "bench/_host_ops/prebuild_deepspeed_ops.py" in shipped
    stamp = zipfile.ZipFile(wheel).read("bench/_build_info.py").decode()
    assert f"GIT_SHA = {commit!r}" in stamp and "GIT_DIRTY = False" in stamp


def test_installed_it_plans_from_any_folder_without_the_training_stack(installed, tmp_path):
    done = dpo_bench(installed, tmp_path, "--version")
    assert done.stdout.startswith(f"dpo-bench {VERSION} (git ") and "unknown" not in done.stdout, done.stderr
    where = dpo_bench(installed, tmp_path, "advise", "--model", "qwen2.5-7b", "--gpu", "A10:2")
    assert where.returncode == 0, where.stderr
    assert "\ndpo-bench run --gpu A10:2 --model qwen2.5-7b --filter " in where.stdout
    fsdp = dpo_bench(installed, tmp_path, "advise", "--model", "qwen2.5-7b", "--gpu", "A10:2", "--backend", "fsdp")
    assert fsdp.returncode == 0 and "`accelerate.yaml` (what `run` writes for the cell): not shown here" in fsdp.stdout
    exported = dpo_bench(installed, tmp_path, "advise", "--model", "qwen2.5-7b", "--gpu", "A10:2", "--export", "out")
    assert exported.returncode == 0 and (tmp_path / "out" / "dpo.yaml").is_file(), exported.stderr
    for args in (["predict", "--hw", "2xA10"], ["list", "--hw", "cpu"]):
        assert dpo_bench(installed, tmp_path, *args).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # nothing else written, no results/ by planning


RUNS = ("20261126-021505", "20261127-014330")
"""Two committed CPU runs, for matrix, compare and publish."""


def test_installed_it_reports_on_results_of_the_current_folder_without_the_training_stack(installed, tmp_path):
    matrix = dpo_bench(installed, tmp_path, "matrix", "--hw", "cpu")
    assert matrix.returncode == 2 and f"no complete run under {tmp_path / 'results' / 'cpu'};" in matrix.stderr
    for run in RUNS:
        shutil.copytree(PROJECT_ROOT / "results" / "cpu" / run, tmp_path / "results" / "cpu" / run)
    assert dpo_bench(installed, tmp_path, "matrix", "--hw", "cpu").returncode == 0
    assert (tmp_path / "results" / "cpu" / "MATRIX.md").is_file()
    compare = dpo_bench(installed, tmp_path, "compare", *(f"results/cpu/{run}" for run in RUNS))
    assert compare.returncode == 0 and "one_adapter-none-single" in compare.stdout, compare.stderr
    scenarios = tmp_path / "scenarios"
    shutil.copytree(installed / "bench" / "_scenarios", scenarios)
    grid = {"workloads": ["tiny"], "models": [], "gpus": ["A10"], "counts": [1], "max_lengths": [512]}
    (scenarios / "decide.yaml").write_text(json.dumps(grid | {"batch_sizes": [1]}))
    publish = dpo_bench(installed, tmp_path, "--scenarios", str(scenarios), "publish", "--jobs", "1")
    assert publish.returncode == 0, publish.stderr[-2000:]
    assert (tmp_path / "results" / "site" / "decide.html").is_file() and (tmp_path / "results" / "README.md").is_file()


def test_installed_it_says_in_one_line_that_run_needs_the_train_extra(installed, tmp_path):
    run = dpo_bench(installed, tmp_path, "run", "--hw", "cpu", "--filter", "one_adapter-none-single")
    assert run.returncode == 2, run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert last.endswith('is not installed: this needs the training stack (pip install "dpo-bench[train]")'), last
    assert not (tmp_path / "results").exists()  # the run folder it made is removed again, nothing recorded


def test_scenarios_names_the_folder_of_every_reader(installed, tmp_path):
    """With the packaged copy gone, every planning command reads the folder `--scenarios` names: the GPU catalog,
    the hardware profiles, the models, the shipped shapes, the published figures. What is derived from the runs
    (derived/: spreads, calibrations) is the package's own, read from the packaged folder whatever it names."""
    scenarios, packaged = tmp_path / "mine", installed / "bench" / "_scenarios"
    shutil.move(packaged, scenarios)
    packaged.mkdir()
    shutil.move(scenarios / "derived", packaged / "derived")
    try:
        for args in (
            ["advise", "--model", "qwen2.5-7b", "--gpu", "A10:2"],
            ["predict", "--hw", "2xA10"],
            ["predict", "--gpu", "H100:1", "--model", "llama-3.1-8b"],
            ["list"],
        ):
            done = dpo_bench(installed, tmp_path, "--scenarios", str(scenarios), *args)
            assert done.returncode == 0, f"{args}: {done.stderr[-1500:]}"
        shutil.move(packaged / "derived", scenarios / "derived")
        packaged.rmdir()
        gone = dpo_bench(installed, tmp_path, "advise", "--model", "qwen2.5-7b", "--gpu", "A10:2")
        assert gone.returncode == 2 and "_scenarios: no such folder" in gone.stderr
    finally:
        if (packaged / "derived").is_dir():
            shutil.move(packaged / "derived", scenarios / "derived")
        shutil.rmtree(packaged, ignore_errors=True)
        shutil.move(scenarios, packaged)


def test_paths_of_an_installed_wheel(installed, tmp_path):
    code = (
        "import json; from bench import paths; print(json.dumps({k: str(getattr(paths, k)) for k in "
        "('SCENARIOS_DIR', 'BUILD_DIR', 'IN_CHECKOUT')}))"
    )
    env = installed_env(installed, tmp_path)
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert json.loads(done.stdout) == {
        "SCENARIOS_DIR": str(installed / "bench" / "_scenarios"),
        "BUILD_DIR": str(tmp_path / "cache" / "dpo-bench"),
        "IN_CHECKOUT": "False",
    }, done.stderr
