import json

import pytest

from bench.errors import BenchError
from bench.paths import PROJECT_ROOT
from bench.results.env import check_resumable, environment_fingerprint, read_env, write_env
from bench.results.env_schema import EnvFingerprint
from bench.results.schema import Metrics, ResultRecord, Status
from bench.results.store import append_result, load_results, mend_results
from tests.conftest import fill_up


def record(cell_id: str = "one_adapter-none-single", status: Status = Status.OK) -> ResultRecord:
    metrics = Metrics(
        tokens_per_s=1000.0,
        pairs_per_s=10.0,
        step_time_median_s=0.05,
        step_time_p90_s=0.06,
        steps=30,
        warmup_steps=5,
        tokens_total=7000,
        memory_kind="rss",
        load_peak_bytes=1,
        train_peak_bytes=2,
        mem_growth_per_step_bytes=0.0,
        load_s=1.0,
    )
    return ResultRecord(
        run_id="r1",
        cell_id=cell_id,
        init="one_adapter",
        quant="none",
        backend="single",
        launcher="python",
        hardware="cpu",
        workload="tiny",
        status=status,
        metrics=metrics if status == Status.OK else None,
    )


def test_record_round_trips_through_json():
    original = record()
    assert ResultRecord.model_validate_json(original.model_dump_json()) == original


def test_append_then_load_keeps_order_and_latest(tmp_path):
    append_result(tmp_path, record("a", Status.ERROR))
    append_result(tmp_path, record("b"))
    append_result(tmp_path, record("a"))
    loaded = load_results(tmp_path)
    assert [r.cell_id for r in loaded.records] == ["a", "b", "a"]
    assert loaded.latest_by_cell()["a"].status == Status.OK
    assert loaded.problems == []


def test_corrupt_line_is_reported_with_file_and_line_and_others_load(tmp_path):
    append_result(tmp_path, record("a"))
    with (tmp_path / "results.jsonl").open("a") as handle:
        handle.write('{"cell_id": "half a line\n')
    append_result(tmp_path, record("b"))
    loaded = load_results(tmp_path)
    assert [r.cell_id for r in loaded.records] == ["a", "b"]
    assert len(loaded.problems) == 1 and "results.jsonl:2: unreadable result line" in loaded.problems[0]


def test_append_into_missing_folder_is_one_clear_error(tmp_path):
    with pytest.raises(BenchError, match="could not append the result of one_adapter-none-single"):
        append_result(tmp_path / "missing", record())


def test_env_fingerprint_has_versions_and_no_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_abcdefghijklmnopqrstuvwxyz123456")
    monkeypatch.setattr("sys.argv", ["bench", "run", "--token", "hf_abcdefghijklmnopqrstuvwxyz123456"])
    lock = tmp_path / "requirements.lock"
    lock.write_text("torch==2.13.0\n")
    env = environment_fingerprint("cpu", "tiny", "local", lock, None)
    write_env(tmp_path, env)
    text = (tmp_path / "env.json").read_text()
    assert "hf_abcdefghijklmnopqrstuvwxyz123456" not in text
    data = json.loads(text)
    assert data["packages"]["trl"] and data["lock_hash"] and data["hardware"]["cpu_count"] >= 1
    assert data["hardware"]["cpu_matmul_gflops"] > 0 and data["hardware"]["cpu_memory_gbps"] > 0


def test_resuming_with_other_packages_is_refused(tmp_path):
    write_env(tmp_path, EnvFingerprint(lock_hash="aaa", packages={"trl": "1"}))
    write_env(tmp_path, EnvFingerprint(lock_hash="aaa", packages={"trl": "1"}, created_at="later"))
    with pytest.raises(BenchError, match="other package versions"):
        write_env(tmp_path, EnvFingerprint(lock_hash="bbb", packages={"trl": "2"}))
    with pytest.raises(BenchError, match="other package versions"):
        write_env(tmp_path, EnvFingerprint(lock_hash="aaa", packages={"trl": "2"}))


def test_fingerprint_round_trips_through_env_json(tmp_path):
    env = environment_fingerprint("cpu", "tiny", "local", tmp_path / "missing.lock", None)
    write_env(tmp_path, env)
    assert read_env(tmp_path) == env
    assert read_env(tmp_path / "no-run") is None


COMMITTED_ENVS = sorted(PROJECT_ROOT.glob("results/*/*/env.json"))


def test_there_are_committed_env_files_to_check():
    assert COMMITTED_ENVS


@pytest.mark.parametrize("path", COMMITTED_ENVS, ids=lambda p: str(p.relative_to(PROJECT_ROOT)))
def test_every_committed_env_json_loads_and_keeps_every_key(path):
    raw = json.loads(path.read_text(encoding="utf-8"))
    env = read_env(path.parent)
    assert env is not None and env.hardware_profile == path.parent.parent.name
    assert env.hardware.cpu_count and env.packages and env.created_at
    assert set(env.model_dump(exclude_unset=True)) == set(raw)


def test_unknown_keys_load_and_are_written_back(tmp_path):
    future = {"workload": "tiny", "hardware": {"cpu_count": 4, "numa_nodes": 2}, "container_runtime": "podman"}
    (tmp_path / "env.json").write_text(json.dumps(future))
    env = read_env(tmp_path)
    assert env is not None and env.workload == "tiny" and env.hardware.cpu_count == 4
    assert json.loads(env.model_dump_json(exclude_unset=True)) == future


def test_a_malformed_env_json_is_one_line_naming_file_and_key(tmp_path):
    (tmp_path / "env.json").write_text('{"hardware": {"cpu_count": "many"}}')
    with pytest.raises(BenchError, match=r"env.json: not a valid environment fingerprint \(hardware.cpu_count: "):
        read_env(tmp_path)
    (tmp_path / "env.json").write_text("{not json")
    with pytest.raises(BenchError, match=r"env\.json: not a valid environment fingerprint \(top level: Invalid JSON"):
        read_env(tmp_path)


@pytest.mark.parametrize("content", [bytes(range(256)), b"\x89PNG\r\n\x1a\n\0\0", b'{"workload": "\xff\xfe"}'])
def test_binary_garbage_in_env_json_is_one_line_not_a_decode_traceback(tmp_path, content):
    (tmp_path / "env.json").write_bytes(content)
    with pytest.raises(BenchError, match=r"env\.json: not a valid environment fingerprint \(top level: ") as err:
        read_env(tmp_path)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("text", ["{}", '{"someone_elses_key": 1}'])
def test_an_env_json_that_says_nothing_is_refused_not_read_as_other_versions(tmp_path, text):
    (tmp_path / "env.json").write_text(text)
    with pytest.raises(BenchError, match=r"env\.json: no environment fingerprint in it \(none of its keys"):
        read_env(tmp_path)
    with pytest.raises(BenchError, match="no environment fingerprint"):
        write_env(tmp_path, EnvFingerprint(lock_hash="aaa", packages={"trl": "1"}))


def test_a_run_with_records_but_no_env_json_is_resumed_only_with_force(tmp_path):
    check_resumable(tmp_path, force=False)  # a new run: nothing recorded, nothing to check
    append_result(tmp_path, record())
    with pytest.raises(BenchError) as err:
        check_resumable(tmp_path, force=False)
    assert str(err.value) == (
        f"{tmp_path}: 1 record(s) but no env.json: the software they were measured with is unknown, so resuming "
        "cannot check it; start a new run, or re-run the cells with --force (env.json then describes this "
        "environment)"
    )
    check_resumable(tmp_path, force=True)
    write_env(tmp_path, EnvFingerprint(lock_hash="aaa", packages={"trl": "1"}))
    check_resumable(tmp_path, force=False)  # its env.json is there: write_env compares the versions


def test_resuming_reads_env_json_first_a_garbled_one_is_one_line(tmp_path):
    (tmp_path / "env.json").write_bytes(b"\0\0\0")
    with pytest.raises(BenchError, match="not a valid environment fingerprint"):
        check_resumable(tmp_path, force=True)


def test_environment_labels():
    local = EnvFingerprint(packages={"torch": "2.13.0", "deepspeed": None})
    assert (local.image_label, local.versions) == ("none (local venv)", "torch 2.13.0")
    assert EnvFingerprint(image="sha256:abc").image_label == "sha256:abc"
    assert EnvFingerprint().versions == "unknown"
    assert EnvFingerprint().hardware.summary == "unknown CPU, ? cores, no GPU"


def test_merged_replaces_keys_and_validates():
    env = EnvFingerprint(python="3.11.7", packages={"trl": "1"})
    inside = env.merged({"python": "3.11.2", "packages": {"trl": "2"}, "image_tag": "dpo-bench/cpu:1"})
    assert (inside.python, inside.packages, inside.image_tag) == ("3.11.2", {"trl": "2"}, "dpo-bench/cpu:1")
    with pytest.raises(ValueError):
        env.merged({"packages": "trl 2"})


def test_disk_full_is_one_clear_error(small_disk):
    filler = fill_up(small_disk)
    with pytest.raises(BenchError, match="No space left on device"):
        append_result(small_disk, record())
    assert (small_disk / "results.jsonl").read_bytes() == b""
    filler.unlink()


def test_a_results_file_linked_elsewhere_is_refused_not_appended_through(tmp_path, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("user") / "log.jsonl"
    elsewhere.write_text("the user's own\n")
    (tmp_path / "results.jsonl").symlink_to(elsewhere)
    for write in (lambda: append_result(tmp_path, record()), lambda: mend_results(tmp_path)):
        with pytest.raises(BenchError) as refused:
            write()
        assert str(refused.value).endswith(f"{tmp_path / 'results.jsonl'}: a symbolic link; the suite writes through none")
    assert elsewhere.read_text() == "the user's own\n"


def test_short_write_keeps_earlier_lines_intact(tmp_path):
    """A real file-size limit cuts the third write short: the partial line is removed, earlier lines load."""
    import subprocess
    import sys

    code = f"""
import resource, signal
from pathlib import Path
from bench.errors import BenchError
from bench.results.store import append_result
from tests.unit.results.test_results import record
run = Path({str(tmp_path)!r})
append_result(run, record("a"))
append_result(run, record("b"))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
size = (run / "results.jsonl").stat().st_size
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 100, size + 100))
try:
    append_result(run, record("c"))
except BenchError as exc:
    print(exc)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=".")
    assert "could not append the result of c" in done.stdout, done.stderr
    loaded = load_results(tmp_path)
    assert [r.cell_id for r in loaded.records] == ["a", "b"] and loaded.problems == []


def test_git_dirty_counts_code_changes_only(tmp_path, monkeypatch):
    import subprocess

    from bench.results import env as results

    monkeypatch.setattr(results, "PROJECT_ROOT", tmp_path)
    assert results.git_dirty() is None  # not a git checkout
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "a.py").write_text("x = 1\n")
    subprocess.run([*git, "add", "."], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "c"], cwd=tmp_path, check=True)
    assert results.git_dirty() is False
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "r.jsonl").write_text("{}\n")
    assert results.git_dirty() is False  # results are not code
    (tmp_path / "bench" / "new.py").write_text("y = 2\n")
    assert results.git_dirty() is True
    env = EnvFingerprint(git_sha="abc", git_dirty=True)
    assert env.git_label == "abc + uncommitted changes" and EnvFingerprint(git_sha="abc").git_label == "abc"
