"""Carried text assets (bench/assets/carried.py): built and packed on one machine, unpacked by prepare on another
when they are this workload's, made by this code, and whole; anything else is refused with a line and the assets
are built here, so a stale carried asset is never used."""

import json
import tarfile

import pytest

from bench.assets import carried
from bench.assets.carried import ARCHIVE, MANIFEST, carry, carry_all, take
from bench.assets.prepare import prepare
from bench.matrix.profiles import load_workload


@pytest.fixture(scope="module")
def carry_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("carry")
    carry_all([load_workload("tiny")], folder, note=lambda line: None)
    return folder


def _files(root, names):
    return {name: (root / name).read_bytes() for name in names}


def test_carried_assets_are_unpacked_by_prepare_and_are_what_it_would_build(tmp_path, carry_dir):
    workload = load_workload("tiny")
    lines: list[str] = []
    assets = prepare(workload, tmp_path / "a", carried=carry_dir, note=lines.append)
    assert any("text carried" in line for line in lines), lines
    (folder,) = carry_dir.iterdir()
    listed = json.loads((folder / MANIFEST).read_text())["files"]
    root = tmp_path / "a" / "assets" / folder.name
    assert assets.tokenizer == str(root / "tokenizer") and assets.dataset == str(root / "dataset")
    built = prepare(workload, tmp_path / "b", carried=tmp_path / "none", note=lines.append)
    assert any("text built" in line for line in lines), lines
    data = [n for n in listed if n.endswith((".arrow", "tokenizer.json", "vocab.json", "merges.txt"))]
    assert len(data) == 5 and _files(root, data) == _files(tmp_path / "b" / "assets" / folder.name, data)
    assert set(assets.derived) == set(built.derived)


def test_the_archive_is_small(carry_dir):
    (folder,) = carry_dir.iterdir()
    assert sorted(p.name for p in folder.iterdir()) == [ARCHIVE, MANIFEST]
    assert (folder / ARCHIVE).stat().st_size < 200_000  # tiny: 0.1 MiB; the 1B-7B workloads: 2-4 MiB


def _refused(workload, tmp_path, folder) -> list[str]:
    lines: list[str] = []
    assert not take(workload, tmp_path / "root", folder, note=lines.append)
    return lines


def test_assets_carried_for_another_definition_are_not_used(tmp_path, carry_dir):
    workload = load_workload("tiny")
    changed = workload.model_copy(update={"train": workload.train.model_copy(update={"max_length": 96})})
    (line,) = _refused(changed, tmp_path, carry_dir)
    assert "are not tiny-" in line and "not used" in line
    assert not _refused(load_workload("small"), tmp_path, carry_dir)  # none carried: nothing to say


def test_assets_made_by_other_code_are_not_used(tmp_path, carry_dir, monkeypatch):
    monkeypatch.setattr(carried, "code_fingerprint", lambda: "0123456789ab")
    (line,) = _refused(load_workload("tiny"), tmp_path, carry_dir)
    assert "made by other code" in line and "preparing them here" in line


def _copy(carry_dir, tmp_path):
    import shutil

    shutil.copytree(carry_dir, tmp_path / "carry")
    (folder,) = (tmp_path / "carry").iterdir()
    return tmp_path / "carry", folder


def test_an_archive_that_is_not_the_one_listed_is_not_used(tmp_path, carry_dir):
    copy, folder = _copy(carry_dir, tmp_path)
    with (folder / ARCHIVE).open("ab") as archive:
        archive.write(b"\0")
    (line,) = _refused(load_workload("tiny"), tmp_path, copy)
    assert f"{ARCHIVE} is not the archive" in line


def test_an_unpacked_file_other_than_listed_is_not_used_and_is_removed(tmp_path, carry_dir):
    copy, folder = _copy(carry_dir, tmp_path)
    manifest = json.loads((folder / MANIFEST).read_text())
    name = next(n for n in manifest["files"] if n.startswith("tokenizer/"))
    manifest["files"][name] = "0" * 64
    (folder / MANIFEST).write_text(json.dumps(manifest))
    (line,) = _refused(load_workload("tiny"), tmp_path, copy)
    assert f"unpacked with {name} other than" in line
    assert not (tmp_path / "root" / "tokenizer").exists() and not (tmp_path / "root" / "dataset").exists()


def test_an_unreadable_carried_json_is_not_used(tmp_path, carry_dir):
    copy, folder = _copy(carry_dir, tmp_path)
    (folder / MANIFEST).write_text("{")
    (line,) = _refused(load_workload("tiny"), tmp_path, copy)
    assert "does not read" in line


def test_carrying_again_replaces_the_folder(tmp_path):
    first = carry(load_workload("tiny"), tmp_path)
    (first / "stray").write_text("x")
    again = carry(load_workload("tiny"), tmp_path)
    assert again == first and sorted(p.name for p in again.iterdir()) == [ARCHIVE, MANIFEST]
    with tarfile.open(again / ARCHIVE) as tar:
        assert {m.name.split("/")[0] for m in tar.getmembers()} >= {"dataset", "tokenizer", "dataset-prompts"}


def test_the_command_carries_the_named_workloads_and_refuses_an_unknown_one_first(tmp_path, capsys):
    import argparse

    from bench.cli.machine import cmd_carry_assets
    from bench.errors import BenchError

    with pytest.raises(BenchError, match="unknown workload 'nope'"):
        cmd_carry_assets(argparse.Namespace(workloads=["tiny", "nope"], out=str(tmp_path)))
    assert not any(tmp_path.iterdir())  # nothing built before every name is known
    assert cmd_carry_assets(argparse.Namespace(workloads=["tiny"], out=str(tmp_path))) == 0
    assert [p.name.split("-")[0] for p in tmp_path.iterdir()] == ["tiny"]
    assert "1 workload(s) carried in" in capsys.readouterr().out
