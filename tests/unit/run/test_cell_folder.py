"""A fresh trial's cell folder (bench/run/one_cell.py): an earlier trial's files are gone, its CUDA allocator
histories stay, since the window's speed pass reruns a recorded cell unrecorded."""

from pathlib import Path

from bench.results.layout import RunFolder
from bench.run.one_cell import empty_cell_folder, run_cell
from bench.worker.allocator_history import HISTORY_FILE
from bench.worker.spec import WorkerSpec
from tests.unit.run.test_harness_faults import DDP_RAN
from tests.unit.run.test_runner import DDP, FakeExecutor, context


class RecordsOnce(FakeExecutor):
    """Its first launch leaves an allocator history and a stray file in the cell's folder, as a recorded CUDA cell
    would; later launches record nothing."""

    def run(self, launch, log_path, timeout_s, labels):
        outcome = super().run(launch, log_path, timeout_s, labels)
        if len(self.plans) == 1:
            out_dir = Path(WorkerSpec.read(launch.argv[-1]).out_dir)
            (out_dir / HISTORY_FILE.format(rank=0)).write_bytes(b"first trial's history")
            (out_dir / "stray.bin").write_bytes(b"x")
        return outcome


def test_a_later_fresh_trial_keeps_the_first_trial_s_allocator_history(tmp_path, cpu_profile):
    ctx = context(tmp_path, cpu_profile, RecordsOnce(DDP_RAN))
    run_cell(ctx, DDP, trial=0)
    run_cell(ctx, DDP, trial=1)  # the speed pass: fresh, unrecorded
    cell = RunFolder(tmp_path).cell(DDP.id)
    assert (cell / HISTORY_FILE.format(rank=0)).read_bytes() == b"first trial's history"
    assert not (cell / "stray.bin").exists()


def test_emptying_keeps_only_histories_and_leaves_link_targets_alone(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("x")
    cell = tmp_path / "cell"
    (cell / "dataset").mkdir(parents=True)
    (cell / "dataset" / "part.arrow").write_bytes(b"x")
    (cell / "rank0.json").write_text("{}")
    (cell / HISTORY_FILE.format(rank=1)).write_bytes(b"h")
    (cell / "linked").symlink_to(outside)
    (cell / "allocator_history.rank0.json.gz.tmp").write_bytes(b"partial")
    empty_cell_folder(cell)
    assert sorted(p.name for p in cell.iterdir()) == [HISTORY_FILE.format(rank=1)]
    assert (outside / "keep.txt").read_text() == "x"
    empty_cell_folder(tmp_path / "absent")  # nothing to empty
