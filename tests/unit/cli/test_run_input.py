"""`run` with input it refuses: one line, exit 2, before any process starts, and no run folder left behind."""

import subprocess
from pathlib import Path

import pytest

from bench.cli import main
from bench.results.store import load_results
from tests.unit.report.test_compare import rec, write_run


class Started(AssertionError):
    """A refused run got as far as preflight, preparing the workload or running cells."""


@pytest.fixture(autouse=True)
def nothing_starts(monkeypatch):
    """A run these tests expect refused must never get as far as the machine check, the workload or the cells (a
    run that is not refused would otherwise run the whole matrix in the test)."""

    def started(*args, **kwargs):
        raise Started("the run was not refused: it got to preflight, the workload or the cells")

    monkeypatch.setattr("bench.run.preflight.preflight", started)
    monkeypatch.setattr("bench.assets.prepare.prepare", started)
    monkeypatch.setattr("bench.run.runner.execute", started)


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
