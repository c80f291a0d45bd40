"""The window's bundle (bench/run/window_bundle.py): a window folder packed into a few flat files within a device
tool's limits, packed again as it changes, and unpacked back into a results folder."""

import json
import os
import re
import tarfile
import time
from pathlib import Path

import pytest

from bench.cli import main
from bench.errors import BenchError
from bench.run import window_bundle as wb
from bench.units import KiB

RUN = "1xH200/R"
LIMIT = 256 * KiB


def window_folder(root: Path) -> Path:
    """A window's folder as a GPU window leaves it: its plan, log and summary, one run's records (the last line
    being written), two cells with allocator histories (gzip: incompressible) and a large incompressible log."""
    out = root / "out"
    run = out / "results" / RUN
    for cell in ("a", "b"):
        (run / "cells" / cell).mkdir(parents=True)
        (run / "cells" / cell / "allocator_history.rank0.json.gz").write_bytes(os.urandom(150 * KiB))
    (run / "logs").mkdir()
    (run / "logs" / "big.log").write_bytes(os.urandom(4 * LIMIT))
    (run / "env.json").write_text(json.dumps({"gpu": "H200"}))
    (run / "results.jsonl").write_text('{"cell_id": "a"}\n{"cell_id": "b"}\n{"cell_id": "c", "sta')
    (out / "plan.json").write_text(json.dumps({"phases": []}))
    (out / "window.log").write_text("window: started\n" * 1000)
    (run / "cells" / "a" / "allocator_history.rank1.json.gz.tmp").write_bytes(b"being written")
    return out


def test_the_bundle_is_a_few_flat_files_within_the_limit_and_unpacks_to_the_runs(tmp_path):
    out, bundle = window_folder(tmp_path), tmp_path / "bundle"
    packed = wb.pack(out, bundle, "R", limit=LIMIT, parts=2)
    files = sorted(p.name for p in bundle.iterdir())
    assert files == sorted(packed.files) == ["allocator-histories-1.tar", "allocator-histories-2.tar",
                                             "window.tar.gz"]  # fmt: skip
    assert all(p.is_file() and p.stat().st_size <= LIMIT and re.fullmatch(r"[\w.-]+", p.name) for p in bundle.iterdir())
    assert list(packed.left_out) == [f"{RUN}/logs/big.log"]  # more than the archive can take
    results = tmp_path / "results"
    runs, left = wb.unpack(bundle, results)
    assert runs == [RUN] and list(left) == [f"{RUN}/logs/big.log"]
    run = results / RUN
    assert (run / "results.jsonl").read_text() == '{"cell_id": "a"}\n{"cell_id": "b"}\n'  # whole lines only
    for cell in ("a", "b"):
        name = f"cells/{cell}/allocator_history.rank0.json.gz"
        assert (run / name).read_bytes() == (out / "results" / RUN / name).read_bytes()
    assert (results / "window" / "R" / "plan.json").read_text() == (out / "plan.json").read_text()
    assert (results / "window" / "R" / "window.log").read_text() == (out / "window.log").read_text()
    assert not (run / "logs" / "big.log").exists()
    assert not (run / "cells" / "a" / "allocator_history.rank1.json.gz.tmp").exists()  # a file being written


def test_histories_beyond_the_parts_are_left_out_and_a_part_holds_what_fits():
    parts, left = wb.history_parts([("a", 100 * KiB), ("b", 100 * KiB), ("c", 100 * KiB), ("d", 400 * KiB)],
                                   limit=LIMIT, parts=1)  # fmt: skip
    assert parts == [["a", "b"]]
    assert set(left) == {"c", "d"} and "more than one file" in left["d"]
    assert wb.tar_bytes([100 * KiB, 100 * KiB]) <= LIMIT < wb.tar_bytes([100 * KiB] * 3)


def test_an_archive_over_its_limit_is_packed_again_without_trusting_compression(tmp_path):
    out, bundle = window_folder(tmp_path), tmp_path / "bundle"
    big = out / "results" / RUN / "logs" / "big.log"
    big.write_bytes(os.urandom(LIMIT * 3 // 2))  # taken as 3 times smaller it fits, and it overflows the archive
    packed = wb.pack(out, bundle, "R", limit=LIMIT, parts=2)
    assert (bundle / wb.ARCHIVE).stat().st_size <= LIMIT
    assert f"{RUN}/logs/big.log" in packed.left_out


def test_a_stopped_pack_leaves_one_partial_file_and_the_next_pack_replaces_every_file(tmp_path):
    out, bundle = window_folder(tmp_path), tmp_path / "bundle"
    wb.pack(out, bundle, "R", limit=LIMIT, parts=2)
    (bundle / f"{wb.ARCHIVE}.tmp123-456").write_bytes(b"half")  # as bench/files.py names it
    for cell in ("a", "b"):
        (out / "results" / RUN / "cells" / cell / "allocator_history.rank0.json.gz").unlink()
    packed = wb.pack(out, bundle, "R", limit=LIMIT, parts=2)
    assert sorted(p.name for p in bundle.iterdir()) == sorted(packed.files) == ["window.tar.gz"]


def test_the_keeper_packs_as_the_folder_changes_and_once_more_at_the_end(tmp_path):
    out, bundle = window_folder(tmp_path), tmp_path / "bundle"
    with open(os.devnull, "w") as log, wb.kept(out, bundle, "R", log, every=0.05):
        assert (bundle / wb.ARCHIVE).is_file()  # packed as it starts
        (out / "results" / RUN / "budget.json").write_text("{}")
        deadline = time.monotonic() + 10
        while f"{RUN}/budget.json" not in names(bundle) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert f"{RUN}/budget.json" in names(bundle)
        (out / "summary.json").write_text("{}")  # written as the window ends, no time for a look
    assert "window/R/summary.json" in names(bundle)


def names(bundle: Path) -> list[str]:
    with tarfile.open(bundle / wb.ARCHIVE) as tar:
        return tar.getnames()


def test_the_bundle_and_the_window_folder_may_not_hold_each_other(tmp_path):
    for out, bundle in ((tmp_path, tmp_path), (tmp_path, tmp_path / "b"), (tmp_path / "o", tmp_path)):
        with pytest.raises(BenchError, match="must be outside"):
            wb.check_folders(out, bundle)
    wb.check_folders(tmp_path / "o", tmp_path / "b")


def test_unpack_names_a_folder_that_is_no_bundle_in_one_line(tmp_path, capsys):
    assert main(["--results", str(tmp_path / "r"), "window", "--unpack", str(tmp_path)]) != 0
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no window.tar.gz there" in err


def test_unpack_puts_the_runs_under_results(tmp_path, capsys):
    out, bundle = window_folder(tmp_path), tmp_path / "bundle"
    wb.pack(out, bundle, "R", limit=LIMIT, parts=2)
    assert main(["--results", str(tmp_path / "r"), "window", "--unpack", str(bundle)]) == 0
    printed = capsys.readouterr().out
    assert f"unpacked under {tmp_path / 'r'}: {RUN}" in printed and "1 files were left out" in printed
    assert (tmp_path / "r" / RUN / "env.json").is_file()
