"""A torn last line (a crash or a full disk mid-write) is moved aside before the next append; a reader never reads
two records as one."""

import pytest

from bench.results.store import RESULTS_FILE, append_result, load_results, mend_results
from tests.unit.results.test_results import record


def line_of(cell_id: str) -> bytes:
    return (record(cell_id).model_dump_json() + "\n").encode()


def torn_files(run_dir):
    return sorted(p.name for p in run_dir.glob(f"{RESULTS_FILE}.*.torn"))


STATES = {
    "torn_tail": (line_of("a") + line_of("b")[:90], ["a"], 1),
    "empty_file": (b"", [], 0),
    "only_a_torn_line": (line_of("b")[:90], [], 1),
    "crlf_endings": (
        line_of("a").replace(b"\n", b"\r\n") + line_of("c").replace(b"\n", b"\r\n") + b'{"sche',
        ["a", "c"],
        1,
    ),
}


@pytest.mark.parametrize("state", STATES)
def test_append_after_any_state_keeps_every_whole_record(tmp_path, capsys, state):
    content, whole, torn = STATES[state]
    (tmp_path / RESULTS_FILE).write_bytes(content)
    append_result(tmp_path, record("new"))
    loaded = load_results(tmp_path)
    assert [r.cell_id for r in loaded.records] == [*whole, "new"] and loaded.problems == []
    assert len(torn_files(tmp_path)) == torn
    assert ("moved to results.jsonl." in capsys.readouterr().err) == bool(torn)
    append_result(tmp_path, record("next"))  # nothing more is set aside
    assert [r.cell_id for r in load_results(tmp_path).records] == [*whole, "new", "next"]
    assert len(torn_files(tmp_path)) == torn


def test_the_torn_bytes_are_kept_beside_the_file_named_by_their_offset(tmp_path):
    half = line_of("b")[:90]
    (tmp_path / RESULTS_FILE).write_bytes(line_of("a") + half)
    notice = mend_results(tmp_path)
    offset = len(line_of("a"))
    assert notice == (
        f"{tmp_path / RESULTS_FILE}: torn last line (90 bytes at byte {offset}, no newline) moved to "
        f"{RESULTS_FILE}.{offset}.torn"
    )
    assert (tmp_path / f"{RESULTS_FILE}.{offset}.torn").read_bytes() == half
    assert (tmp_path / RESULTS_FILE).read_bytes() == line_of("a")
    assert mend_results(tmp_path) is None  # whole now
    (tmp_path / RESULTS_FILE).write_bytes(line_of("a") + b"junk")  # torn again at the same place: a second file
    mend_results(tmp_path)
    assert torn_files(tmp_path) == [f"{RESULTS_FILE}.{offset}.2.torn", f"{RESULTS_FILE}.{offset}.torn"]


def test_a_whole_last_record_without_its_newline_is_kept(tmp_path):
    """A CRLF file cut between \\r and \\n, or a hand-edited one: the record is whole, only the newline is added."""
    (tmp_path / RESULTS_FILE).write_bytes(line_of("a").replace(b"\n", b"\r\n") + line_of("b")[:-1] + b"\r")
    assert mend_results(tmp_path) == f"{tmp_path / RESULTS_FILE}: the last record had no newline; added one"
    append_result(tmp_path, record("c"))
    assert [r.cell_id for r in load_results(tmp_path).records] == ["a", "b", "c"] and torn_files(tmp_path) == []


def test_a_missing_or_whole_file_needs_no_mending(tmp_path):
    assert mend_results(tmp_path) is None
    append_result(tmp_path, record("a"))
    assert mend_results(tmp_path) is None and torn_files(tmp_path) == []


def test_a_reader_cuts_a_torn_record_from_the_record_glued_to_it(tmp_path):
    """What resuming after a torn tail wrote before it was mended: half a record and a whole one on one line."""
    (tmp_path / RESULTS_FILE).write_bytes(line_of("a") + line_of("b")[:90] + line_of("b") + line_of("c"))
    loaded = load_results(tmp_path)
    assert [r.cell_id for r in loaded.records] == ["a", "b", "c"]
    assert loaded.problems == [f"{tmp_path / RESULTS_FILE}:2: torn record (90 bytes) before the next one"]


def test_a_line_of_two_torn_pieces_yields_no_record(tmp_path):
    (tmp_path / RESULTS_FILE).write_bytes(line_of("a")[:50] + line_of("b")[:60] + b"\n")
    loaded = load_results(tmp_path)
    assert loaded.records == [] and len(loaded.problems) == 2
