"""A fresh clone as the README has it: `make bench`, then the tests. The run the user just made sits in results/
beside the committed ones; the tests that hold the committed PREDICTED files, spread.json and calibration.json to
the code read the committed runs only (bench/results/tracked.py), so they pass in that clone, and with another CPU's
BLAS kernels (the last digits of a fit are the CPU's)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.paths import PROJECT_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.long]

CELL = "one_adapter-int8-single"
"""A DPO cell that trains in seconds and lands in every validation figure (quantized: on a CPU with AVX-512 BF16 or
AMX its model memory is twice the EPYC runs')."""
TESTS = ("tests/unit/estimate", "tests/unit/matrix/test_recipes.py", "tests/unit/report/test_verdict_reference.py")
"""Every test that reads results/ as a whole."""
OTHER_CPU_BLAS = {"OPENBLAS_CORETYPE": "Haswell"}
"""The clone's tests run with another x86 CPU's BLAS kernels: OpenBLAS (numpy's and scipy's) picks its kernels per CPU
at load time. The committed calibrations were fitted with SkylakeX's (an AMD EPYC Zen 4); with Haswell's the fit
gives, digit for digit, what an AMD EPYC Zen 5 reported (layer_pass_s 0.001230972484601539 -> ...391). The tests hold
a fit within a stated tolerance (tests/unit/estimate/fit_tolerance.py), never to its last digit."""


def git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return done.stdout


def clone_of_this_checkout(dest: Path) -> Path:
    """A repository holding this checkout's tracked files as they are now (uncommitted edits included): the clone a
    newcomer gets of this code."""
    for name in git(PROJECT_ROOT, "ls-files", "-z").split("\0"):
        source = PROJECT_ROOT / name
        if name and source.is_file() and not source.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    git(dest, "init", "-q")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "clone")
    return dest


def in_clone(
    clone: Path, *args: str, timeout: int = 900, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`python <args>` run in the clone (its own bench package, its own results/), `env` added to the environment."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=clone,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> tuple[Path, Path]:
    """The clone, and the run `make bench` made in it."""
    clone = clone_of_this_checkout(tmp_path_factory.mktemp("fresh") / "dpo-bench")
    committed = {p.parent for p in (clone / "results").glob("*/*/results.jsonl")}
    # make bench's writer, as `make bench FILTER=...` runs it (results/ of the checkout it runs in)
    done = in_clone(clone, "-m", "bench", "run", "--hw", "cpu", "--executor", "local", "--filter", CELL)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (mine,) = {p.parent for p in (clone / "results").glob("*/*/results.jsonl")} - committed
    assert mine.parent == clone / "results" / "cpu"
    return clone, mine


def test_the_user_run_is_in_results_and_not_in_the_committed_runs(clone):
    clone, mine = clone
    (record,) = [json.loads(line) for line in (mine / "results.jsonl").read_text().splitlines()]
    assert (record["cell_id"], record["status"]) == (CELL, "ok")
    env = json.loads((mine / "env.json").read_text())
    assert env["cpu_features"]["flags"] is not None and env["cpu_features"]["probe_error"] is None
    # validate-estimate over every run in results/ holds its record (the newest of its cell on this CPU model); what
    # the committed files derive from does not
    sources = (
        "import json; from bench.estimate.validate import validate; from bench.paths import RESULTS_DIR; "
        f"print(json.dumps([sorted({{r.source for r in validate(results)[0] if r.cell_id == {CELL!r}}}) "
        "for results in (RESULTS_DIR, None)]))"
    )
    done = in_clone(clone, "-c", sources)
    assert done.returncode == 0, done.stderr[-3000:]
    every, committed = json.loads(done.stdout)
    assert f"results/cpu/{mine.name}" in every  # in place of the committed record of this CPU model, if any
    assert f"results/cpu/{mine.name}" not in committed and any(s.startswith("results/cpu/") for s in committed)


def test_the_tests_that_read_results_pass_in_the_clone(clone):
    clone, _ = clone
    done = in_clone(clone, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *TESTS, env=OTHER_CPU_BLAS)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
