"""Hostile input and a broken file system against real runners (`python -m bench` processes, real cells, real
read-only mounts and immutable files): one line each, nothing lost, and runs that share the machine are marked.
The cheap cases of docs/reliability.md; the docker and Slurm leftovers of a killed runner are in
test_docker_leftovers.py (make test-docker) and test_slurm.py.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.results.store import load_results
from tests.integration.test_faults import bench_run, leftovers, rank_pids, wait_until

pytestmark = pytest.mark.integration

CELL = "one_adapter-none-single"


def bench(results: Path, *args: str, scenarios: Path | None = None, timeout: float = 300):
    argv = [sys.executable, "-m", "bench", "--results", str(results)]
    argv += ["--scenarios", str(scenarios)] if scenarios else []
    return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=timeout)


def one_line(done: subprocess.CompletedProcess) -> str:
    """The run was refused: exit 2, one line on stderr, no traceback, no cell started."""
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    assert "Traceback" not in done.stdout + done.stderr and "[  0/" not in done.stdout, done.stdout
    return done.stderr.strip()


def mount_read_only(path: Path) -> None:
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(path)], capture_output=True)
    assert done.returncode == 0, f"mount a read-only tmpfs at {path}: {done.stderr!r}"


def chattr(flag: str, path: Path) -> None:
    subprocess.run(["chattr", flag, str(path)], check=True)


def test_rejected_input_and_unwritable_results_are_one_line_and_leave_no_folder(tmp_path):
    results = tmp_path / "results"
    run = ("run", "--executor", "local")
    started = time.monotonic()
    assert "--filter '' names no cell pattern" in one_line(bench(results, *run, "--filter", ""))
    assert "matches no cell" in one_line(bench(results, *run, "--filter", "no-such-cell*"))
    missing = tmp_path / "no-scenarios"
    assert f"--scenarios {missing}: no such folder" in one_line(bench(results, *run, scenarios=missing))
    assert not results.exists()  # no run folder, no empty results folder

    as_file = tmp_path / "a-file"
    as_file.write_text("x")
    assert f"--results {as_file}: not a folder" in one_line(bench(as_file, *run, "--filter", CELL))
    assert as_file.read_text() == "x"

    read_only = tmp_path / "read-only"
    mount_read_only(read_only)
    try:
        line = one_line(bench(read_only, *run, "--filter", CELL, "--run-id", "new"))
    finally:
        subprocess.run(["umount", "--lazy", str(read_only)], check=False)
    assert line == (
        f"error: cannot create the run folder {read_only}/cpu/new: Read-only file system; choose a writable results "
        "folder with --results"
    )
    print(f"five refusals in {time.monotonic() - started:.1f} s")


def test_an_immutable_run_folder_is_refused_before_any_process_starts(tmp_path):
    run_dir = tmp_path / "cpu" / "r"
    run_dir.mkdir(parents=True)
    (run_dir / "run.lock").touch()
    chattr("+i", run_dir)
    try:
        line = one_line(bench(tmp_path, "run", "--executor", "local", "--filter", CELL, "--run-id", "r"))
    finally:
        chattr("-i", run_dir)
    assert line.startswith(f"error: cannot write in the run folder {run_dir}: Operation not permitted; make it")
    assert sorted(p.name for p in run_dir.iterdir()) == ["run.lock"]


def test_env_json_cases_are_one_line_and_force_rerecords_a_run_without_one(tmp_path):
    """A run that lost its env.json is not resumed (its versions cannot be checked) but re-run with --force; binary
    garbage and `{}` are one line in run, compare and matrix."""
    done = bench_run(tmp_path, CELL, {}, run_id="r")
    assert done.returncode == 0, done.stderr[-2000:]
    run_dir = tmp_path / "cpu" / "r"
    env = run_dir / "env.json"
    good = env.read_bytes()
    env.unlink()
    line = one_line(bench(tmp_path, "run", "--executor", "local", "--filter", CELL, "--run-id", "r"))
    assert line == (
        f"error: {run_dir}: 1 record(s) but no env.json: the software they were measured with is unknown, so "
        "resuming cannot check it; start a new run, or re-run the cells with --force (env.json then describes this "
        "environment)"
    )
    forced = bench(tmp_path, "run", "--executor", "local", "--filter", CELL, "--run-id", "r", "--force")
    assert forced.returncode == 0, forced.stderr[-2000:]
    assert env.is_file() and [r.status for r in load_results(run_dir).records] == ["ok", "ok"]

    for garbage in (os.urandom(256), b"{}"):
        env.write_bytes(garbage)
        for args in (
            ("run", "--executor", "local", "--filter", CELL, "--run-id", "r"),
            ("compare", str(run_dir), str(run_dir)),
            ("matrix", "--hw", "cpu", "--run-id", "r"),
        ):
            assert one_line(bench(tmp_path, *args)).startswith(f"error: {env}: "), args
    env.write_bytes(good)


def test_a_resume_keeps_its_settings_writes_through_no_link_and_matrix_refuses_an_unknown_run(
    tmp_path, tmp_path_factory
):
    """Against real runners: a run made with the defaults, then resumed with --force and another precision or
    workload (refused, nothing appended), with its config and log linked to a user's files (replaced, the files
    untouched), and `matrix` asked for a run id that does not exist (refused, MATRIX.md as it was)."""
    done = bench_run(tmp_path, CELL, {}, run_id="base1")
    assert done.returncode == 0, done.stderr[-2000:]
    run_dir = tmp_path / "cpu" / "base1"
    records = (run_dir / "results.jsonl").read_bytes()
    run = ("run", "--executor", "local", "--filter", CELL, "--run-id", "base1", "--force")
    for flags, differs in (
        (("--precision", "bf16"), "--precision fp32"),
        (("--workload", "tiny-synthetic"), "workload tiny"),
    ):
        line = one_line(bench(tmp_path, *run, *flags))
        assert line.startswith(f"error: {run_dir}: this run trained with {differs}; this command asks for "), line
    assert (run_dir / "results.jsonl").read_bytes() == records

    user = tmp_path_factory.mktemp("user")
    for name, linked in (
        ("spec.json", run_dir / "configs" / CELL / "spec.json"),
        ("log", run_dir / "logs" / f"{CELL}.log"),
    ):
        (user / name).write_text("the user's own")
        linked.unlink()
        linked.symlink_to(user / name)
    forced = bench(tmp_path, *run)
    assert forced.returncode == 0, forced.stderr[-2000:]
    assert [(user / name).read_text() for name in ("spec.json", "log")] == ["the user's own"] * 2
    assert not any(p.is_symlink() for p in run_dir.rglob("*") if "dataset" not in p.parts)

    (tmp_path / "cpu" / "MATRIX.md").write_text("the committed matrix")
    line = one_line(bench(tmp_path, "matrix", "--hw", "cpu", "--run-id", "typo-in-run-id"))
    assert line.startswith("error: --run-id typo-in-run-id: no run of cpu by that name"), line
    assert (tmp_path / "cpu" / "MATRIX.md").read_text() == "the committed matrix"
    assert not (tmp_path / "cpu" / "matrix.csv").exists() and not (tmp_path / "cpu" / "typo-in-run-id").exists()


def test_a_corrupt_line_is_named_by_every_reader_and_the_others_are_read(tmp_path, scenario_copy):
    done = bench_run(tmp_path, f"{CELL},two_models-none-single", {}, run_id="r")
    assert done.returncode == 0, done.stderr[-2000:]
    run_dir = tmp_path / "cpu" / "r"
    path = run_dir / "results.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    number = next(n for n, line in enumerate(lines, start=1) if json.loads(line)["cell_id"] == CELL)
    lines[number - 1] = json.dumps(json.loads(lines[number - 1]) | {"status": "great"}) + "\n"
    path.write_text("".join(lines))
    (scenario_copy / "decide.yaml").unlink()  # publish without the decision page's predicted grid
    (scenario_copy / "data").symlink_to(Path("scenarios/data").resolve())
    warning = f"warning: {path}:{number}: unreadable result line (status: Input should be 'ok', "
    readers = {
        "run": ("run", "--executor", "local", "--filter", "two_models-none-single", "--run-id", "r"),
        "compare": ("compare", str(run_dir), str(run_dir)),
        "matrix": ("matrix", "--hw", "cpu", "--run-id", "r"),
        "publish": ("publish", "--jobs", "1"),
    }
    said = {}
    for name, args in readers.items():
        done = bench(tmp_path, *args, scenarios=scenario_copy)
        assert done.returncode == 0, name + done.stderr[-2000:]
        said[name] = done.stdout + done.stderr
        warnings = [line for line in said[name].splitlines() if line.startswith("warning: ")]
        assert len(warnings) == 1 and warnings[0].startswith(warning), (name, warnings)
    assert "0 cell(s) to run, 1 already recorded" in said["run"]  # the corrupt line's cell is the one not recorded
    assert "two_models-none-single" in (tmp_path / "cpu" / "matrix.csv").read_text()
    assert "`two_models-none-single`" in said["compare"]


def test_runs_that_overlap_on_one_machine_mark_each_others_records(tmp_path):
    """Runner A trains a 2-rank cell; runner B of another run starts meanwhile, names A, and trains a cell: both
    records say the machine was shared, and compare leaves them out of its verdicts unless asked. A's steps are
    slowed (slow_step, 1 s each) so that they outlast B's start: a forked cell trains 30 steps in about 2 s."""
    first = "one_adapter-none-ddp"
    argv = [sys.executable, "-m", "bench", "--results", str(tmp_path), "run", "--hw", "cpu", "--executor", "local"]
    output = tmp_path / "a.out"
    slow = {**os.environ, "BENCH_FAULT": "slow_step", "BENCH_FAULT_DELAY_MS": "1000"}
    with output.open("w") as out:
        runner = subprocess.Popen(
            [*argv, "--filter", first, "--run-id", "a"], stdout=out, stderr=subprocess.STDOUT, env=slow
        )
    try:
        wait_until(lambda: len(rank_pids(str(tmp_path), first)) == 2, f"two live ranks of {first}", runner, 300)
        second = bench_run(tmp_path, CELL, {}, run_id="b")
        assert runner.wait(timeout=300) == 0, output.read_text()[-3000:]
    finally:
        if runner.poll() is None:
            runner.kill()
    assert second.returncode == 0, second.stderr[-2000:]
    assert f"notice: run a (runner {runner.pid}, {tmp_path / 'cpu' / 'a'}) is running on this machine too" in (
        second.stdout
    )
    (a,) = load_results(tmp_path / "cpu" / "a").records
    (b,) = load_results(tmp_path / "cpu" / "b").records
    assert (a.status, a.overlapped_by, b.status, b.overlapped_by) == ("ok", ["b"], "ok", ["a"])
    compared = bench(tmp_path, "compare", str(tmp_path / "cpu" / "a"), str(tmp_path / "cpu" / "b"))
    assert f"> - base: {first} trial 1 (overlapped by b)" in compared.stdout, compared.stdout[-2000:]
    assert leftovers(str(tmp_path)) == []


def test_a_record_that_cannot_be_appended_is_kept_with_a_resume_hint(tmp_path):
    """results.jsonl turns immutable while the cell trains: the run stops in one line naming where the measurement
    is kept; once the file is writable again that line records it and the resume has nothing left to run."""
    run_dir = tmp_path / "cpu" / "r"
    run_dir.mkdir(parents=True)
    results = run_dir / "results.jsonl"
    results.touch()
    kept_dir = tmp_path / "tmp"
    kept_dir.mkdir()
    argv = [sys.executable, "-m", "bench", "--results", str(tmp_path), "run", "--hw", "cpu", "--executor", "local"]
    argv += ["--filter", CELL, "--run-id", "r"]
    output = tmp_path / "runner.out"
    with output.open("w") as out:
        runner = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=os.environ | {"TMPDIR": str(kept_dir)}
        )
    try:
        wait_until(lambda: len(rank_pids(str(tmp_path), CELL)) == 1, f"the rank of {CELL}", runner, 300)
        chattr("+i", results)
        assert runner.wait(timeout=300) == 2, output.read_text()[-3000:]
    finally:
        if runner.poll() is None:
            runner.kill()
        chattr("-i", results)
    text = output.read_text()
    (kept,) = (kept_dir / "dpo-bench-unrecorded").iterdir()
    errors = [line for line in text.splitlines() if line.startswith("error: ")]
    assert errors == [
        f"error: could not append the result of {CELL} to {results}: Operation not permitted; its record is kept in "
        f"{kept} (to record it once results.jsonl can be written: cat {kept} >> {results}): the run stops; 0 record(s)"
        f" kept, {CELL} not recorded; make {run_dir} writable, then resume with --run-id r"
    ], text[-3000:]
    assert "Traceback" not in text and results.read_text() == ""
    with results.open("a") as handle:
        shutil.copyfileobj(kept.open(), handle)
    done = bench_run(tmp_path, CELL, {}, run_id="r")
    assert "0 cell(s) to run, 1 already recorded" in done.stdout, done.stdout[-2000:]
    assert [r.status for r in load_results(run_dir).records] == ["ok"]


def test_a_timeout_names_its_limit(tmp_path, scenario_copy):
    profile = scenario_copy / "hardware" / "cpu.yaml"
    profile.write_text(profile.read_text().replace("timeout_s: 120", "timeout_s: 10"))
    (scenario_copy / "data").symlink_to(Path("scenarios/data").resolve())
    done = bench_run(tmp_path, CELL, {"BENCH_FAULT": "hang:step2"}, scenarios=scenario_copy)
    assert done.returncode == 0, done.stderr[-2000:]
    (record,) = load_results(next((tmp_path / "cpu").iterdir())).records
    assert record.status == "timeout" and record.message.startswith("cell exceeded its time limit of 10 s")
    assert leftovers(str(tmp_path)) == []


def test_values_that_cannot_work_are_refused_before_preparation(tmp_path, scenario_copy):
    """Flags and profile values that cannot work and a broken scenario file of `--scenarios`: one line from run,
    predict (and list), before anything is prepared, and no run folder."""
    results = tmp_path / "results"
    run = ("run", "--executor", "local", "--filter", CELL)
    predict = ("predict", "--hw", "cpu", "--filter", CELL)
    assert one_line(bench(results, *run, "--steps", "3")).startswith("error: --steps 3: must be at least 7 (")
    line = one_line(bench(results, *run, "--run-id", ""))
    assert line == "error: --run-id '' names no run: leave --run-id out to start a new one"
    profile = scenario_copy / "hardware" / "cpu.yaml"
    shipped = profile.read_text()
    for value, why in (
        ("1.0e+30", "less than or equal to 65536"),
        ("1.0e-10", "greater than or equal to 0.25"),
        (".inf", "a finite number"),
    ):
        profile.write_text(shipped + f"memory_budget_gb: {value}\n")
        for args in (run, predict):
            line = one_line(bench(results, *args, scenarios=scenario_copy))
            assert line == f"error: {profile}: key 'memory_budget_gb': Input should be {why}", (args, line)
    profile.write_text(shipped)
    broken = scenario_copy / "known_issues.yaml"
    broken.write_text("issues: [\n")
    for args in (run, predict, ("list",)):
        assert one_line(bench(results, *args, scenarios=scenario_copy)).startswith(f"error: {broken}: malformed YAML")
    assert not results.exists()


def test_ctrl_c_while_the_workload_is_prepared_is_one_line(tmp_path):
    """A real SIGINT once the runner says it prepares the workload (about 2 s of work follow, measured): one line,
    exit 130, and the new run's folder is gone."""
    import signal

    argv = [sys.executable, "-m", "bench", "--results", str(tmp_path), "run", "--executor", "local", "--filter", CELL]
    runner = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert runner.stdout is not None
    for line in runner.stdout:
        if line.startswith("preparing workload"):
            runner.send_signal(signal.SIGINT)
            break
    _, err = runner.communicate(timeout=120)
    assert (runner.returncode, err) == (130, "interrupted while preparing the run: no cell ran\n"), err
    assert not (tmp_path / "cpu").exists() or list((tmp_path / "cpu").rglob("*")) == []
