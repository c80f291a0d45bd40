"""Resuming after a torn results file, and a run whose disk fills up (a real tmpfs): no record is lost, none is
glued to another, and the run stops with one line."""

import io

import pytest

from bench.matrix.cell import Cell
from bench.results.schema import Engagement
from bench.results.store import RESULTS_FILE, DiskFull, load_results
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
    assert [plan.argv[-1].split("/")[-2] for plan in ctx.executor.plans] == rerun
    loaded = load_results(tmp_path)
    assert [r.cell_id for r in loaded.records] == [*kept, *rerun] and loaded.problems == []
    assert ("moved to results.jsonl." in out.getvalue()) == (tear != "empty_file")

    out = io.StringIO()  # a further resume: nothing to run, nothing to warn about
    execute(ctx, [DDP, TWO], out=out)
    assert "0 cell(s) to run, 2 already recorded" in out.getvalue() and "warning" not in out.getvalue()


def test_a_full_disk_stops_the_run_with_one_line_and_it_resumes_once_space_is_free(small_disk, cpu_profile):
    ctx = context(small_disk, cpu_profile, FakeExecutor(RAN))
    execute(ctx, [DDP], out=io.StringIO())
    whole = (small_disk / RESULTS_FILE).read_bytes()
    filler = fill_up(small_disk)

    ctx.executor = FakeExecutor(RAN)
    with pytest.raises(DiskFull) as stopped:
        execute(ctx, [DDP, TWO], out=io.StringIO())
    message = str(stopped.value)
    assert "\n" not in message and message.startswith("disk full (")
    assert "No space left on device" in message
    assert message.endswith(f"1 record(s) kept, {TWO.id} not recorded; free space, then resume with --run-id r1")
    assert (small_disk / RESULTS_FILE).read_bytes() == whole  # nothing torn, nothing half-written

    filler.unlink()
    execute(ctx, [DDP, TWO], out=io.StringIO())
    loaded = load_results(small_disk)
    assert [r.cell_id for r in loaded.records] == [DDP.id, TWO.id] and loaded.problems == []
    assert list(small_disk.glob("*.torn")) == []


def test_a_cell_that_failed_on_a_full_disk_is_not_recorded_as_its_failure(tmp_path, cpu_profile):
    executor = FakeExecutor(RAN, exit_code=1, error="OSError: [Errno 28] No space left on device")
    with pytest.raises(DiskFull) as stopped:
        execute(context(tmp_path, cpu_profile, executor), [DDP], out=io.StringIO())
    assert str(stopped.value) == (
        f"disk full ({DDP.id} failed: OSError: [Errno 28] No space left on device): the run stops; 0 record(s) kept, "
        f"{DDP.id} not recorded; free space, then resume with --run-id r1"
    )
    assert load_results(tmp_path).records == []
