"""What the suite writes in a run folder never goes through a symbolic link, and a failed write leaves nothing behind
(a real full tmpfs)."""

import errno
import os

import pytest

from bench.files import open_own, own_folder, write_whole
from bench.results.env import write_env
from bench.results.env_schema import EnvFingerprint
from tests.conftest import fill_up


@pytest.fixture
def user_file(tmp_path_factory):
    """A file of the user's, outside every run folder."""
    path = tmp_path_factory.mktemp("user") / "precious.json"
    path.write_text("the user's own\n")
    return path


def test_a_link_where_a_file_is_written_whole_is_replaced_not_its_target(tmp_path, user_file):
    path = tmp_path / "deepspeed.json"
    path.symlink_to(user_file)
    write_whole(path, "generated\n")
    assert user_file.read_text() == "the user's own\n"
    assert not path.is_symlink() and path.read_text() == "generated\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deepspeed.json"]


def test_a_link_planted_at_the_temporary_name_is_not_followed(tmp_path, user_file):
    path = tmp_path / "env.json"
    for name in (f"env.json.tmp{os.getpid()}", f"env.json.tmp{os.getpid()}-{_thread()}"):
        (tmp_path / name).symlink_to(user_file)
    write_whole(path, "{}")
    assert user_file.read_text() == "the user's own\n" and path.read_text() == "{}"


def _thread() -> int:
    import threading

    return threading.get_native_id()


def test_a_write_that_fills_the_disk_leaves_no_temporary_file(small_disk):
    write_whole(small_disk / "running.json", "old")
    filler = fill_up(small_disk)
    with pytest.raises(OSError) as failed:
        write_whole(small_disk / "running.json", "x" * (1 << 20))
    assert (failed.value.errno, failed.value.filename) == (errno.ENOSPC, str(small_disk / "running.json"))
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "running.json"]
    assert (small_disk / "running.json").read_text() == "old"
    filler.unlink()


def test_env_json_on_a_full_disk_leaves_no_temporary_file(small_disk):
    run_dir = small_disk / "cpu" / "r"
    run_dir.mkdir(parents=True)
    filler = fill_up(small_disk)
    with pytest.raises(OSError) as failed:
        write_env(run_dir, EnvFingerprint(created_at="now", packages={"trl": "1"}, command="x" * 8192))
    assert failed.value.errno == errno.ENOSPC
    assert list(run_dir.iterdir()) == []
    filler.unlink()


def test_a_stream_is_never_opened_through_a_link(tmp_path, user_file):
    path = tmp_path / "results.jsonl"
    path.symlink_to(user_file)
    with pytest.raises(OSError) as refused:
        open_own(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    assert refused.value.errno == errno.ELOOP
    assert (refused.value.filename, refused.value.strerror) == (
        str(path),
        "a symbolic link; the suite writes through none",
    )
    assert user_file.read_text() == "the user's own\n"


def test_a_folder_link_below_the_run_folder_is_replaced_by_a_folder(tmp_path, user_file):
    run_dir = tmp_path / "run"
    (run_dir / "configs").mkdir(parents=True)
    (run_dir / "configs" / "cell").symlink_to(user_file.parent, target_is_directory=True)
    folder = own_folder(run_dir / "configs" / "cell", run_dir)
    write_whole(folder / user_file.name, "generated")
    assert user_file.read_text() == "the user's own\n"
    assert folder.is_dir() and not folder.is_symlink() and (folder / user_file.name).read_text() == "generated"


def test_the_run_folder_itself_may_be_a_link(tmp_path):
    """A run folder moved to another disk and linked back is the user's choice; below it the suite owns the folders."""
    elsewhere = tmp_path / "big-disk" / "r"
    elsewhere.mkdir(parents=True)
    run_dir = tmp_path / "r"
    run_dir.symlink_to(elsewhere, target_is_directory=True)
    own_folder(run_dir / "logs", run_dir)
    assert run_dir.is_symlink() and (elsewhere / "logs").is_dir()


def test_a_folder_outside_the_run_folder_is_refused(tmp_path):
    with pytest.raises(ValueError, match="not inside"):
        own_folder(tmp_path / "elsewhere", tmp_path / "run")
