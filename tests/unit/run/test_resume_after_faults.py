"""Resuming after a torn results file, and a run whose disk fills up (a real tmpfs): no record is lost, none is
glued to another, and the run stops with one line."""

import io

import pytest

from bench.matrix.cell import Cell
from bench.results.schema import Engagement
from bench.results.store import RESULTS_FILE, DiskFull, load_results
from bench.run import one_cell as cell_module
from bench.run.runner import execute
from tests.conftest import fill_up
from tests.unit.run.test_runner import DDP, FakeExecutor, context

TWO = Cell(init="two_models", quant="none", backend="ddp", launcher="torchrun")
RAN = Engagement(world_size=2, distributed_type="MULTI_CPU", wrapper="DistributedDataParallel", adapters=["default"])


def crlf(data: bytes) -> bytes:
    return data.replace(b"\n", b"\r\n")


TEARS = {  # what results.jsonl holds when the run resumes, from its two whole lines: which cells stay recorded
    "torn_tail": (lambda first, second: first + second[: len(second) // 2], [DDP.id]),
    "empty_file": (lambda first, second: b"", []),
    "only_a_torn_line": (lambda first, second: second[: len(second) // 2], []),
    "crlf_endings": (lambda first, second: crlf(first) + crlf(second)[: len(second) // 2], [DDP.id]),
}


@pytest.mark.parametrize("tear", TEARS)
def test_a_resume_after_a_torn_results_file_keeps_every_whole_record_and_records_the_rerun(tmp_path, cpu_profile, tear):
    ctx = context(tmp_path, cpu_profile, FakeExecutor(RAN))
    execute(ctx, [DDP, TWO], out=io.StringIO())
    path = tmp_path / RESULTS_FILE
    first, second = path.read_bytes().splitlines(keepends=True)
    make, kept = TEARS[tear]
    path.write_bytes(make(first, second))

    out = io.StringIO()
    ctx.executor = FakeExecutor(RAN)
    execute(ctx, [DDP, TWO], out=out)
    rerun = [c.id for c in (DDP, TWO) if c.id not in kept]
    assert [launch.argv[-1].split("/")[-2] for launch in ctx.executor.plans] == rerun
    loaded = load_results(tmp_path)
    assert [r.cell_id for r in loaded.records] == [*kept, *rerun] and loaded.problems == []
    assert ("moved to results.jsonl." in out.getvalue()) == (tear != "empty_file")

    out = io.StringIO()  # a further resume: nothing to run, nothing to warn about
    execute(ctx, [DDP, TWO], out=out)
    assert "0 cell(s) to run, 2 already recorded" in out.getvalue() and "warning" not in out.getvalue()


class FillingExecutor(FakeExecutor):
    """A cell that fills the disk while it runs, and fails."""

    def run(self, launch, log_path, timeout_s, labels):
        outcome = super().run(launch, log_path, timeout_s, labels)
        fill_up(log_path.parents[1])
        return outcome


def stopped_by_full_disk(ctx, cells) -> str:
    with pytest.raises(DiskFull) as stopped:
        execute(ctx, cells, out=io.StringIO())
    message = str(stopped.value)
    assert "\n" not in message and message.startswith("disk full (")
    assert message.endswith(f"1 record(s) kept, {TWO.id} not recorded; free space, then resume with --run-id r1")
    return message


@pytest.mark.parametrize("when", ["before_the_cell", "at_a_write", "during_the_cell"])
def test_a_full_disk_stops_the_run_with_one_line_and_it_resumes_once_space_is_free(
    small_disk, cpu_profile, monkeypatch, when
):
    ctx = context(small_disk, cpu_profile, FakeExecutor(RAN))
    execute(ctx, [DDP], out=io.StringIO())
    whole = (small_disk / RESULTS_FILE).read_bytes()
    if when == "during_the_cell":
        ctx.executor = FillingExecutor(RAN, exit_code=1, error="RuntimeError: rank 1 could not write its report")
    else:
        fill_up(small_disk)
    if when == "at_a_write":
        monkeypatch.setattr(cell_module, "MIN_FREE_BYTES", 0)  # no room check: the first write meets the full disk

    message = stopped_by_full_disk(ctx, [DDP, TWO])
    expected = {
        "before_the_cell": f"disk full (0 KiB free in {small_disk}; a cell needs 16 MiB)",
        "at_a_write": "No space left on device",
        "during_the_cell": f"disk full ({TWO.id} failed with 0 KiB left free in the results folder)",
    }[when]
    assert expected in message, message
    assert (small_disk / RESULTS_FILE).read_bytes() == whole  # nothing torn, nothing half-written, nothing new

    (small_disk / "filler").unlink()
    ctx.executor = FakeExecutor(RAN)
    execute(ctx, [DDP, TWO], out=io.StringIO())
    loaded = load_results(small_disk)
    assert [r.cell_id for r in loaded.records] == [DDP.id, TWO.id]
    assert loaded.problems == [] and list(small_disk.glob("*.torn")) == []


def test_a_cell_that_failed_on_a_full_disk_is_not_recorded_as_its_failure(tmp_path, cpu_profile):
    executor = FakeExecutor(RAN, exit_code=1, error="OSError: [Errno 28] No space left on device")
    with pytest.raises(DiskFull) as stopped:
        execute(context(tmp_path, cpu_profile, executor), [DDP], out=io.StringIO())
    assert str(stopped.value) == (
        f"disk full ({DDP.id} failed: OSError: [Errno 28] No space left on device): the run stops; 0 record(s) kept, "
        f"{DDP.id} not recorded; free space, then resume with --run-id r1"
    )
    assert load_results(tmp_path).records == []
