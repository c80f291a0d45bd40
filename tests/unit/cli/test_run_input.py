"""`run` with input it refuses: one line, exit 2, before any process starts, and no run folder left behind."""

import json
import subprocess
from pathlib import Path

import pytest

from bench.cli import main
from bench.matrix.profiles import load_profile, load_workload
from bench.matrix.settings import training_of
from bench.results.store import load_results
from tests.unit.report.test_compare import ENV, rec, write_run


class Started(AssertionError):
    """A refused run got as far as preflight, preparing the workload or running cells."""


@pytest.fixture(autouse=True)
def nothing_starts(monkeypatch):
    """A run these tests expect refused must never get as far as the machine check, the workload or the cells (a
    run that is not refused would otherwise run the whole matrix in the test)."""

    def started(*args, **kwargs):
        raise Started("the run was not refused: it got to preflight, the workload or the cells")

    # where they are defined and where the session holds them (a module imported earlier keeps its own names)
    for name in ("bench.run.preflight.preflight", "bench.run.session.preflight"):
        monkeypatch.setattr(name, started)
    for name in ("bench.assets.prepare.prepare", "bench.run.session.prepare"):
        monkeypatch.setattr(name, started)
    for name in ("bench.run.runner.execute", "bench.run.session.execute"):
        monkeypatch.setattr(name, started)


def refused(capsys, results: Path, *args: str, scenarios: Path | None = None) -> str:
    """Run `python -m bench run` in-process with `args`; it must exit 2 with one line on stderr, no traceback and
    nothing started (no workload prepared, no cell launched). Returns the line."""
    argv = ["--results", str(results)] + (["--scenarios", str(scenarios)] if scenarios else [])
    assert main([*argv, "run", "--executor", "local", *args]) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    assert "preparing workload" not in out and "[  0/" not in out, out
    return err.strip()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--filter", ""], "--filter '' names no cell pattern: leave --filter out to take every cell"),
        (["--filter", " , "], "--filter ' , ' names no cell pattern"),
        (["--filter", "nothing*"], "--filter 'nothing*' matches no cell"),
        (["--method", "dpo2"], "dpo2"),
        (["--gpu", "A10:8", "--nodes", "2", "--filter", "one_adapter-none-single"], "use --executor slurm"),
        (["--hw", "1xH200", "--gpu-slots", "4", "--exclusive"], "--gpu-slots 4: --exclusive runs one cell at a time"),
        (["--hw", "cpu", "--gpu-slots", "2"], "--gpu-slots 2: profile cpu has no memory_budget_gb"),
        (["--hw", "2xA10", "--gpu-slots", "2"], "--gpu-slots 2: profile 2xA10 spans 2 GPUs"),
    ],
)
def test_rejected_input_is_one_line_and_leaves_no_run_folder(capsys, tmp_path, args, message):
    results = tmp_path / "results"
    assert message in refused(capsys, results, *args)
    assert not results.exists() or list(results.rglob("*")) == [], list(results.rglob("*"))


def test_rejected_input_to_an_existing_run_keeps_the_run(capsys, tmp_path):
    results = tmp_path / "results"
    run_dir = write_run(results / "cpu" / "r", [rec("one_adapter-none-single")])
    before = sorted(p.name for p in run_dir.iterdir())
    refused(capsys, results, "--run-id", "r", "--filter", "")
    assert sorted(p.name for p in run_dir.iterdir()) == before
    assert [r.cell_id for r in load_results(run_dir).records] == ["one_adapter-none-single"]


def test_results_pointing_at_a_file_is_one_line(capsys, tmp_path):
    results = tmp_path / "results"
    results.write_text("not a folder")
    line = refused(capsys, results, "--filter", "one_adapter-none-single")
    assert line.startswith(f"error: --results {results}: not a folder"), line
    assert results.read_text() == "not a folder"


@pytest.fixture
def read_only_folder(tmp_path: Path):
    """A real read-only file system (a tmpfs mounted ro): root ignores permission bits, not a read-only mount."""
    mount = tmp_path / "read_only"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mount)], capture_output=True)
    assert done.returncode == 0, f"could not mount a read-only tmpfs at {mount}: {done.stderr!r}"
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=False)


def test_a_read_only_results_folder_with_a_new_run_id_is_one_line(capsys, read_only_folder):
    line = refused(capsys, read_only_folder, "--filter", "one_adapter-none-single", "--run-id", "new")
    assert line == (
        f"error: cannot create the run folder {read_only_folder / 'cpu' / 'new'}: Read-only file system; "
        "choose a writable results folder with --results"
    )


@pytest.fixture
def immutable(tmp_path: Path):
    """Folders made immutable with chattr +i (ext4 supports it; root cannot write into them either)."""
    made: list[Path] = []

    def make(path: Path) -> Path:
        done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
        assert done.returncode == 0, f"chattr +i {path}: {done.stderr.strip()}"
        made.append(path)
        return path

    yield make
    for path in made:
        subprocess.run(["chattr", "-i", str(path)], check=False)


def test_an_immutable_run_folder_is_one_line_before_any_process_starts(capsys, tmp_path, immutable):
    results = tmp_path / "results"
    run_dir = write_run(results / "cpu" / "r", [rec("one_adapter-none-single")])
    (run_dir / "run.lock").touch()
    immutable(run_dir)
    line = refused(capsys, results, "--run-id", "r", "--filter", "two_models-none-single")
    assert line == (
        f"error: cannot write in the run folder {run_dir}: Operation not permitted; make it writable (chmod u+w, "
        "chattr -i), or choose another results folder with --results"
    )


def test_a_scenarios_folder_that_does_not_exist_is_named(capsys, tmp_path):
    missing = tmp_path / "no-such-scenarios"
    line = refused(capsys, tmp_path / "results", "--filter", "one_adapter-none-single", scenarios=missing)
    assert line == f"error: --scenarios {missing}: no such folder (it holds hardware/, workloads/ and matrix.yaml)"


def test_any_file_system_error_that_reaches_the_cli_is_one_line(capsys, monkeypatch):
    """A folder made immutable while a run runs fails wherever it is written next: still one line, no traceback."""
    import errno

    def fails(args):
        raise PermissionError(errno.EPERM, "Operation not permitted", "/results/cpu/r/running.json")

    monkeypatch.setattr("bench.cli.run.cmd_list", fails)  # bound when main builds the parser
    assert main(["list"]) == 2
    assert capsys.readouterr().err == "error: /results/cpu/r/running.json: Operation not permitted\n"


def test_a_run_with_records_but_no_env_json_is_not_resumed_without_force(capsys, tmp_path):
    results = tmp_path / "results"
    run_dir = write_run(results / "cpu" / "r", [rec("one_adapter-none-single")], env=None)
    line = refused(capsys, results, "--run-id", "r", "--filter", "one_adapter-none-single")
    assert line.startswith(f"error: {run_dir}: 1 record(s) but no env.json: "), line
    assert not (run_dir / "env.json").exists() and len(load_results(run_dir).records) == 1


@pytest.mark.parametrize("content", [b"\x00\xff garbage \xfe", b"{}"])
def test_a_bad_env_json_stops_run_compare_and_matrix_in_one_line(capsys, tmp_path, content):
    results = tmp_path / "results"
    run_dir = write_run(results / "cpu" / "r", [rec("one_adapter-none-single")])
    other = write_run(results / "cpu" / "other", [rec("one_adapter-none-single")])
    (run_dir / "env.json").write_bytes(content)
    line = refused(capsys, results, "--run-id", "r", "--filter", "one_adapter-none-single")
    assert line.startswith(f"error: {run_dir / 'env.json'}: "), line
    for argv in (["compare", str(other), str(run_dir)], ["matrix", "--hw", "cpu", "--run-id", "r"]):
        assert main(["--results", str(results), *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {run_dir / 'env.json'}: ") and err.count("\n") == 1, err


CELL = "one_adapter-none-single"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--steps", "3"],  # every cell used to end `error` (warm-up 5 must be below steps), exit 0
            "error: --steps 3: must be at least 7 (workload tiny warms up for 5 steps, its warmup_steps, and tokens/s "
            "are timed over 2 steps after them)",
        ),
        (["--steps", "6"], "error: --steps 6: must be at least 7 (workload tiny warms up for 5 steps"),
        (["--steps", "0"], "error: --steps 0: must be greater than or equal to 2"),
        (["--max-length", "4"], "error: --max-length 4: must be greater than or equal to 8"),
        (["--batch-size", "0"], "error: --batch-size 0: must be greater than or equal to 1"),
        (["--lora-r", "100000000"], "error: --lora-r 100000000: must be less than or equal to 65536"),
        (["--lora-targets", ","], "error: --lora-targets ',': names none"),
        (["--gpu", "A10:100000"], "error: --gpu A10:100000: the profile's 'device_count': "),
        (["--run-id", ""], "error: --run-id '' names no run: leave --run-id out to start a new one"),
    ],
)
def test_flag_values_that_cannot_work_are_refused_naming_the_flag(capsys, tmp_path, args, line):
    results = tmp_path / "results"
    assert refused(capsys, results, *args, "--filter", CELL).startswith(line)
    assert not results.exists() or list(results.rglob("*")) == [], list(results.rglob("*"))


@pytest.mark.parametrize(
    ("key", "value"),
    [("memory_budget_gb", "1.0e+30"), ("memory_budget_gb", "1.0e-10"), ("memory_budget_gb", ".inf")],
)
def test_a_profile_value_that_cannot_work_is_refused_before_preparation(capsys, tmp_path, scenario_copy, key, value):
    """1e30 used to end every cell as a false `oom` (limit_bytes 0), 1e-10 in a ValueError traceback after the
    workload was prepared, .inf in an OverflowError traceback."""
    path = scenario_copy / "hardware" / "cpu.yaml"
    path.write_text(path.read_text() + f"{key}: {value}\n")
    results = tmp_path / "results"
    line = refused(capsys, results, "--filter", CELL, scenarios=scenario_copy)
    assert line.startswith(f"error: {path}: key '{key}': "), line
    assert not results.exists() or list(results.rglob("*")) == []
    assert main(["--scenarios", str(scenario_copy), "predict", "--hw", "cpu", "--filter", CELL]) == 2
    assert capsys.readouterr().err.startswith(f"error: {path}: key '{key}': ")


BROKEN = "issues: [\n"


@pytest.mark.parametrize("name", ["matrix.yaml", "known_issues.yaml", "recipes.yaml", "gpus.yaml"])
def test_a_broken_scenario_file_is_reported_by_list_predict_and_run(capsys, tmp_path, scenario_copy, name):
    """`--scenarios X` is every reader's folder: predict used to read the shipped matrix.yaml, and no command read
    X's known_issues.yaml."""
    broken = scenario_copy / name
    broken.write_text(BROKEN)
    expected = f"error: {broken}: malformed YAML"
    for argv in (["list"], ["predict", "--hw", "cpu"]):
        assert main(["--scenarios", str(scenario_copy), *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith(expected) and err.count("\n") == 1, (argv, err)
    assert refused(capsys, tmp_path / "results", "--filter", CELL, scenarios=scenario_copy).startswith(expected)


def test_a_partial_run_names_the_matrix_file_of_its_own_results_folder(capsys, tmp_path, monkeypatch):
    """It used to print results/cpu/MATRIX.md whatever --results was."""
    monkeypatch.setattr("bench.run.session.run_session", lambda request: [])
    results = tmp_path / "elsewhere"
    assert main(["--results", str(results), "run", "--executor", "local", "--filter", CELL]) == 0
    out = capsys.readouterr().out
    assert f"covers part of the matrix; {results / 'cpu' / 'MATRIX.md'} left as it was" in out, out


def test_ctrl_c_while_the_run_is_prepared_is_one_line_and_exit_130(capsys, tmp_path, monkeypatch):
    """A real SIGINT while the workload is prepared: it used to end with no line at all."""
    import os
    import signal
    import time

    from bench.run.preflight import Preflight

    def interrupted(workload):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # the signal arrives before this ends

    monkeypatch.setattr("bench.run.session.preflight", lambda *a, **kw: Preflight())
    monkeypatch.setattr("bench.run.session.prepare", interrupted)
    results = tmp_path / "results"
    assert main(["--results", str(results), "run", "--executor", "local", "--filter", CELL]) == 130
    err = capsys.readouterr().err
    assert err == "interrupted while preparing the run: no cell ran\n", err
    assert not results.exists() or list(results.rglob("*")) == []


def test_a_cell_timeout_past_the_profiles_bound_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as done:
        main(["run", "--cell-timeout", "100000000000000000000"])
    assert done.value.code == 2
    assert "argument --cell-timeout: --cell-timeout must be <= 604800 (a week)" in capsys.readouterr().err


def defaults_env(**settings) -> dict:
    """The env.json of a run made with the cpu profile's defaults (tiny), `settings` changed."""
    return ENV | {"training": training_of(load_profile("cpu"), load_workload("tiny")) | settings}


@pytest.mark.parametrize(
    ("args", "differs"),
    [
        (["--precision", "bf16"], "--precision fp32; this command asks for --precision bf16"),
        (["--workload", "tiny-synthetic"], "workload tiny; this command asks for workload tiny-synthetic"),
        (
            ["--steps", "8", "--gradient-checkpointing", "off", "--lora-targets", "q_proj"],
            "--steps 30, --lora-targets q_proj,k_proj,v_proj,o_proj, --gradient-checkpointing on; this command asks "
            "for --steps 8, --lora-targets q_proj, --gradient-checkpointing off",
        ),
    ],
)
def test_a_resumed_run_refuses_other_training_settings_naming_them(capsys, tmp_path, args, differs):
    """A resume (with --force too) that would mix records of other settings into the run: one line naming what
    differs and how to go on; nothing is written."""
    results = tmp_path / "results"
    run_dir = write_run(results / "cpu" / "r", [rec("two_models-none-single")], env=defaults_env())
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    line = refused(capsys, results, "--run-id", "r", "--filter", "two_models-none-single", "--force", *args)
    assert line == (
        f"error: {run_dir}: this run trained with {differs}: a resumed run keeps its training settings; start a new "
        "run (another --run-id) for these"
    )
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.name != "run.lock"} == before


def test_a_resumed_run_with_its_own_settings_is_not_refused(capsys, tmp_path):
    """The same settings, given or not (fp32 is the cpu profile's own precision), go on to run the cells."""
    results = tmp_path / "results"
    write_run(results / "cpu" / "r", [rec("two_models-none-single")], env=defaults_env())
    for args in ([], ["--precision", "fp32", "--workload", "tiny", "--steps", "30"]):
        with pytest.raises(Started):
            main(["--results", str(results), "run", "--run-id", "r", "--filter", "two_models-none-single", *args])


def test_a_run_whose_env_json_predates_the_settings_is_resumed_with_the_defaults_only(capsys, tmp_path):
    results = tmp_path / "results"
    run_dir = write_run(results / "cpu" / "r", [rec("two_models-none-single")])  # env.json without `training`
    line = refused(capsys, results, "--run-id", "r", "--filter", "two_models-none-single", "--precision", "bf16")
    assert line == (
        f"error: {run_dir}: this run trained with --precision fp32 (the defaults: its env.json predates recorded "
        "training settings); this command asks for --precision bf16: a resumed run keeps its training settings; "
        "start a new run (another --run-id) for these"
    )
    with pytest.raises(Started):
        main(["--results", str(results), "run", "--run-id", "r", "--filter", "two_models-none-single"])


@pytest.mark.parametrize("what", ["no_folder", "no_results_file"])
def test_matrix_of_an_unknown_run_is_refused_and_writes_nothing(capsys, tmp_path, what):
    """A typo'd --run-id used to rewrite MATRIX.md and matrix.csv from other runs under "Run `<typo>` · workload
    `None`"."""
    results = tmp_path / "results"
    write_run(results / "cpu" / "20260101-000000", [rec("one_adapter-none-single")])
    (results / "cpu" / "MATRIX.md").write_text("the committed matrix")
    typo = results / "cpu" / "typo-in-run-id"
    if what == "no_results_file":
        typo.mkdir()
        (typo / "env.json").write_text(json.dumps(ENV))
    before = sorted(p.relative_to(results) for p in results.rglob("*"))
    assert main(["--results", str(results), "matrix", "--hw", "cpu", "--run-id", "typo-in-run-id"]) == 2
    out, err = capsys.readouterr()
    assert err == (
        f"error: --run-id typo-in-run-id: no run of cpu by that name ({typo / 'results.jsonl'} does not exist); the "
        "newest is 20260101-000000; leave --run-id out for the newest complete run\n"
    )
    assert out == "" and sorted(p.relative_to(results) for p in results.rglob("*")) == before
    assert (results / "cpu" / "MATRIX.md").read_text() == "the committed matrix"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpu-slots", "0"], "argument --gpu-slots: must be 1 to 64, got 0"),
        (["--gpu-slots", "65"], "argument --gpu-slots: must be 1 to 64, got 65"),
        (["--gpu-slots", "many"], "argument --gpu-slots: invalid slot_count value: 'many'"),
        (["--speed-pass", "-1"], "argument --speed-pass: must be >= 0, got -1"),
    ],
)
def test_slot_flags_out_of_range_are_one_line(capsys, args, message):
    from bench.cli import parser

    with pytest.raises(SystemExit) as exited:
        parser().parse_args(["run", *args])
    assert exited.value.code == 2 and message in capsys.readouterr().err
    parsed = parser().parse_args(["run"])
    assert (parsed.gpu_slots, parsed.speed_pass) == (None, 5)
