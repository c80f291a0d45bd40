"""What the runner does with a fault of the harness (bench/executors/harness_watch.py), a fake executor standing in
for the launcher: the trial is re-run once where that is safe, resumed where it is not, and a prepared folder that
went away stops the run in one line or is prepared again. The real faults are in tests/integration/test_faults.py
and tests/unit/isolation/test_fork_server.py."""

import io
from pathlib import Path

import pytest

from bench.assets.prepare import PreparedAssets, prepare
from bench.errors import BenchError
from bench.executors.base import HarnessFault, LaunchPlan, Outcome
from bench.matrix.cell import Cell
from bench.matrix.profiles import load_workload
from bench.results.schema import Engagement, Status
from bench.results.store import load_results
from bench.run.one_cell import absent_assets
from bench.run.runner import execute
from bench.run.session import present_assets
from tests.unit.run.test_runner import DDP, FakeExecutor, context

DDP_RAN = Engagement(
    world_size=2, distributed_type="MULTI_CPU", wrapper="DistributedDataParallel", adapters=["default"]
)
DDP_RAN = DDP_RAN.model_copy(update={"trainer": "DPOTrainer"})
DIED = "the fork server (pid 7) ended (killed by SIGKILL) while the cell ran, and the cell's forked processes with it"


class HarnessFails(FakeExecutor):
    """Its first `failing` launches end with a fault of the harness (the ranks' reports are written as a killed
    cell's would not be: the record must ignore them), then it runs cells as FakeExecutor does."""

    def __init__(self, fault: HarnessFault, failing: int = 1, then: HarnessFault | None = None) -> None:
        super().__init__(DDP_RAN)
        self.fault, self.failing, self.then = fault, failing, then

    def run(self, launch: LaunchPlan, log_path: Path, timeout_s: float, labels: dict[str, str]) -> Outcome:
        outcome = super().run(launch, log_path, timeout_s, labels)
        if len(self.plans) <= self.failing:
            log_path.write_text(f"try {len(self.plans)}: killed\n")
            return Outcome(exit_code=-9, timed_out=False, wall_s=1.0, log_tail="killed", harness_fault=self.fault)
        outcome.harness_fault = self.then
        return outcome


def test_a_trial_the_harness_spoiled_is_re_run_once_where_that_is_safe(tmp_path, cpu_profile):
    restarted = HarnessFault("the fork server (pid 7) had ended before this cell: started again", spoiled=False)
    executor = HarnessFails(HarnessFault(DIED, retry=True), then=restarted)
    (record,) = execute(context(tmp_path, cpu_profile, executor), [DDP], out=io.StringIO())
    assert len(executor.plans) == 2
    assert (record.status, record.error_class) == (Status.OK, None) and record.metrics is not None
    assert record.harness_fault == f"first try: {DIED}; re-run once; then: {restarted.what}"
    assert load_results(tmp_path).records == [record]  # one record: the first try is not one
    logs = tmp_path / "logs"
    assert (logs / f"{DDP.id}.first-try.log").read_text() == "try 1: killed\n"
    assert (logs / f"{DDP.id}.log").read_text() == "fake launch\n"


def test_a_second_spoiled_try_is_recorded_as_the_harness_s_and_a_resume_runs_it_again(tmp_path, cpu_profile):
    executor = HarnessFails(HarnessFault(DIED, retry=True), failing=2)
    (record,) = execute(context(tmp_path, cpu_profile, executor), [DDP], out=io.StringIO())
    assert len(executor.plans) == 2  # once more, not forever
    assert (record.status, record.error_class, record.metrics) == (Status.HARNESS, None, None)
    assert record.message == DIED and record.harness_fault == f"first try: {DIED}; re-run once; then: {DIED}"
    resumed = FakeExecutor(DDP_RAN)
    (again,) = execute(context(tmp_path, cpu_profile, resumed), [DDP], out=io.StringIO())
    assert len(resumed.plans) == 1 and again.status == Status.OK
    assert [r.status for r in load_results(tmp_path).records] == [Status.HARNESS, Status.OK]
    done = FakeExecutor(DDP_RAN)
    execute(context(tmp_path, cpu_profile, done), [DDP], out=io.StringIO())
    assert done.plans == []  # an ok record is done


def test_a_fault_that_would_come_again_is_recorded_without_a_re_run(tmp_path, cpu_profile):
    shm = HarnessFault("/dev/shm is not writable or full: DeepSpeed's CPU allreduce could not make its buffer")
    executor = HarnessFails(shm)
    (record,) = execute(context(tmp_path, cpu_profile, executor), [DDP], out=io.StringIO())
    assert len(executor.plans) == 1
    assert (record.status, record.message, record.harness_fault) == (Status.HARNESS, shm.what, shm.what)
    assert not (tmp_path / "logs" / f"{DDP.id}.first-try.log").exists()


def test_a_prepared_folder_gone_mid_run_stops_the_run_in_one_line_before_the_next_cell(tmp_path, cpu_profile):
    single = Cell(init="one_adapter", quant="none", backend="single", launcher="python")
    model = tmp_path / "assets" / "model"
    model.mkdir(parents=True)

    class ModelMovesAway(FakeExecutor):
        def run(self, launch: LaunchPlan, log_path: Path, timeout_s: float, labels: dict[str, str]) -> Outcome:
            model.rename(tmp_path / "elsewhere")  # moved while the first cell ran
            return super().run(launch, log_path, timeout_s, labels)

    executor = ModelMovesAway(DDP_RAN)
    ctx = context(tmp_path, cpu_profile, executor)
    ctx.assets = ctx.assets.model_copy(update={"model": str(model)})
    with pytest.raises(BenchError) as err:
        execute(ctx, [DDP, single], out=io.StringIO())
    assert str(err.value) == (
        f"the workload's prepared model {model} is gone (moved or deleted during the run): {single.id} and the cells "
        "after it would take it for a Hub id; resume with --run-id r1 to prepare it again"
    )
    assert len(executor.plans) == 1 and [r.cell_id for r in load_results(tmp_path).records] == [DDP.id]


def test_absent_assets_are_the_named_folders_that_are_not_there(tmp_path):
    there = tmp_path / "there"
    there.mkdir()
    gone = str(tmp_path / "gone")
    assets = PreparedAssets(model=gone, tokenizer="org/hub-id", dataset=str(there), derived={"rows": gone})
    assert absent_assets(assets) == [("model", gone), ("rows dataset", gone)]
    assert absent_assets(PreparedAssets(model="org/m", tokenizer=str(there), dataset=str(there))) == []


def test_a_prepared_model_folder_moved_away_is_prepared_again(tmp_path, capsys):
    """The workload's manifest still names the model folder that was moved away: every cell used to fail with
    "Repo id must be in the form ..."; the folder is prepared again instead, once."""
    tiny = load_workload("tiny")
    assets = prepare(tiny, tmp_path)
    model = Path(assets.model)
    config = (model / "config.json").read_bytes()
    model.rename(tmp_path / "moved-away")
    assert absent_assets(prepare(tiny, tmp_path)) == [("model", str(model))]  # the manifest alone decides
    again = present_assets(tiny, prepare(tiny, tmp_path), tmp_path)
    assert again == assets and (model / "config.json").read_bytes() == config
    notices = [line for line in capsys.readouterr().out.splitlines() if line.startswith("notice: ")]
    assert notices == [f"notice: the prepared model {model} is gone (moved or deleted): preparing again"]
    assert present_assets(tiny, again, tmp_path) is again


def test_a_folder_the_suite_did_not_make_is_one_line(tmp_path):
    tiny = load_workload("tiny")
    local = tmp_path / "my-checkpoint"
    assets = PreparedAssets(model=str(local), tokenizer=str(local), dataset=str(tmp_path))
    with pytest.raises(BenchError) as err:
        present_assets(tiny, assets, tmp_path / "build")
    assert str(err.value) == (
        f"workload tiny: its model {local} is gone (moved or deleted after it was prepared); put it back, or point "
        "the workload at where it is now"
    )


def test_an_unwritable_shm_refuses_the_deepspeed_cells_in_one_line_before_any_starts(tmp_path, cpu_profile):
    """A real read-only tmpfs where /dev/shm would be: a DeepSpeed cell on CPU used to wait for its allreduce buffer
    until its 120 s limit (`timeout`, the log alone saying `shared_create ... failed`)."""
    import subprocess

    from bench.matrix.plan import plan_for
    from bench.matrix.profiles import load_workload
    from bench.matrix.scenario import expand, load_matrix
    from bench.run.preflight import shm_check, unwritable

    def planned(cells):
        return [plan_for(c, cpu_profile, load_workload("tiny")) for c in cells]

    cells = [c for c in expand(load_matrix()) if c.id.startswith("one_adapter-none-")]
    zero = [c for c in cells if c.launcher == "deepspeed"]
    one_rank = [c for c in zero if c.id.endswith("+1rank")]  # one rank: no buffer to share
    others = [c for c in cells if c.launcher != "deepspeed"] + one_rank
    assert len(one_rank) == 3 and len(others) > len(one_rank)
    shm = tmp_path / "shm"
    shm.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(shm)], check=True)
    try:
        assert unwritable(shm) == "Read-only file system"
        refusal = shm_check(planned(cells), shm)
        assert shm_check(planned(others), shm) is None  # nothing here needs it
    finally:
        subprocess.run(["umount", "--lazy", str(shm)], check=False)
    assert str(refusal) == (
        f"{shm} is not writable (Read-only file system): DeepSpeed's CPU allreduce makes its buffers there, so 5 "
        "cell(s) (one_adapter-none-zero2, one_adapter-none-zero2_offload, one_adapter-none-zero3 and 2 more) would "
        f"wait for them until their time limit; make {shm} writable (mount -o remount,rw {shm}) or leave those cells "
        "out with --filter"
    )
    assert unwritable(shm) is None and shm_check(planned(cells), shm) is None and list(shm.iterdir()) == []
    one = shm_check(planned(zero[:1]), tmp_path / "no-such-folder")
    assert f"1 cell(s) ({zero[0].id}) would wait" in str(one) and "(No such file or directory)" in str(one)
