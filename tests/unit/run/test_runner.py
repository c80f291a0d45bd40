"""A cell runs as plan -> write files -> execute -> record; a fake executor stands in for the launcher."""

import errno
import io
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from datasets import Dataset

from bench.assets.prepare import PreparedAssets
from bench.errors import BenchError
from bench.executors.base import LaunchPlan, Outcome
from bench.matrix.cell import Cell
from bench.matrix.plan import plan_for
from bench.matrix.profiles import load_workload
from bench.results.schema import Engagement, ResultRecord, Status
from bench.results.store import load_results
from bench.run.one_cell import RunContext, plan_cells
from bench.run.runner import execute
from bench.worker.rank_report import RankReport
from bench.worker.spec import WorkerSpec

DDP = Cell(init="one_adapter", quant="none", backend="ddp", launcher="torchrun")
RAN_DDP = Engagement(
    world_size=2,
    distributed_type="MULTI_CPU",
    wrapper="DistributedDataParallel",
    adapters=["default"],
    trainer="DPOTrainer",
)


class FakeExecutor:
    """Writes what the planned ranks would report, from the spec file the plan names."""

    name, image, python = "fake", None, sys.executable
    concurrent, memory_budget_bytes = False, None

    def __init__(
        self, engagement: Engagement, exit_code: int = 0, error: str | None = None, timed_out: bool = False
    ) -> None:
        self.engagement, self.exit_code, self.error, self.timed_out = engagement, exit_code, error, timed_out
        self.plans: list[LaunchPlan] = []
        self.labels: list[dict[str, str]] = []
        self.datasets: list[Path] = []
        self.losses = lambda steps: [0.6931472 - 0.05 * s for s in range(steps)]

    def run(self, plan: LaunchPlan, log_path: Path, timeout_s: float, labels: dict[str, str]) -> Outcome:
        self.plans.append(plan)
        self.labels.append(labels)
        spec = WorkerSpec.read(plan.argv[-1])  # written before the launch
        self.datasets.append(Path(spec.assets.dataset))
        assert (Path(spec.assets.dataset) / "state.json").is_file()
        steps = spec.workload.train.steps
        for rank in range(2):
            RankReport(
                rank=rank,
                pid=100 + rank,
                hostname="h",
                step_ends=[float(s) for s in range(steps)],
                tokens=[100 * s for s in range(steps)],
                train_peak_bytes=2**20,
                losses=self.losses(steps),
                engagement=self.engagement,
                error=self.error if rank == 1 else None,
            ).write(spec.rank_file(rank))
        log_path.write_text("fake launch\n")
        return Outcome(exit_code=self.exit_code, timed_out=self.timed_out, wall_s=1.5, log_tail="fake launch")


def context(tmp_path: Path, cpu_profile, executor) -> RunContext:
    dataset = tmp_path / "assets" / "dataset"
    if not dataset.exists():
        Dataset.from_list([{"prompt": "p", "chosen": "a", "rejected": "b"}]).save_to_disk(str(dataset))
    assets = PreparedAssets(model="no-such-model", tokenizer="t", dataset=str(dataset))
    return RunContext("r1", tmp_path, cpu_profile, load_workload("tiny"), assets, executor)


def test_a_cell_is_planned_written_executed_and_recorded(tmp_path, cpu_profile):
    ddp_ran = Engagement(
        world_size=2,
        distributed_type="MULTI_CPU",
        wrapper="DistributedDataParallel",
        adapters=["default"],
        trainer="DPOTrainer",
    )
    executor = FakeExecutor(ddp_ran)
    (record,) = execute(context(tmp_path, cpu_profile, executor), [DDP], out=io.StringIO())
    assert record.status == Status.OK and record.executor == "fake" and record.world_size == 2
    assert record.metrics is not None and record.metrics.tokens_per_s == 100.0
    assert record.learning is not None and record.learning.failures == []
    assert record.config_files == [f"configs/{DDP.id}/spec.json"]
    assert (tmp_path / record.config_files[0]).is_file()
    assert load_results(tmp_path).records == [record]
    assert executor.plans[0].argv[0].endswith("torchrun")
    # what a container is labelled with: the run, the cell, the profile's name, the run folder
    assert executor.labels[0] == {
        "dpo-bench.run": "r1",
        "dpo-bench.cell": DDP.id,
        "dpo-bench.profile": cpu_profile.name,
        "dpo-bench.run-dir": str(tmp_path.resolve()),
    }
    # the cell loaded the dataset through its own folder, removed with its caches once the cell ended
    assert executor.datasets == [tmp_path / "cells" / DDP.id / "dataset"]
    assert not executor.datasets[0].exists()


def test_nothing_a_cell_writes_goes_through_a_link_out_of_the_run_folder(tmp_path, tmp_path_factory, cpu_profile):
    """Its config files, its log and its rank reports' folder, each a link to a user's file or folder beforehand: the
    links are replaced, the user's files are untouched."""
    user = tmp_path_factory.mktemp("user")
    for name in ("spec.json", "log.txt", "rank0.json"):
        (user / name).write_text("the user's own")
    (tmp_path / "configs" / DDP.id).mkdir(parents=True)
    (tmp_path / "configs" / DDP.id / "spec.json").symlink_to(user / "spec.json")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / f"{DDP.id}.log").symlink_to(user / "log.txt")
    (tmp_path / "cells").mkdir()
    (tmp_path / "cells" / DDP.id).symlink_to(user, target_is_directory=True)
    (record,) = execute(context(tmp_path, cpu_profile, FakeExecutor(RAN_DDP)), [DDP], out=io.StringIO())
    assert record.status == Status.OK, record.message
    assert sorted(p.name for p in user.iterdir()) == ["log.txt", "rank0.json", "spec.json"]
    assert all((user / name).read_text() == "the user's own" for name in ("spec.json", "log.txt", "rank0.json"))
    assert (tmp_path / "logs" / f"{DDP.id}.log").read_text() == "fake launch\n"
    assert not any(p.is_symlink() for p in (tmp_path / "configs").rglob("*")) and not (tmp_path / "cells").is_symlink()


def test_what_ran_decides_the_status(tmp_path, cpu_profile):
    one_process = Engagement(
        world_size=1, distributed_type="NO", wrapper="PeftModelForCausalLM", adapters=["default"], trainer="DPOTrainer"
    )
    (record,) = execute(context(tmp_path, cpu_profile, FakeExecutor(one_process)), [DDP], out=io.StringIO())
    assert record.status == Status.SILENT_FALLBACK and "world size 1, expected 2" in record.message


def test_a_failing_rank_is_classified(tmp_path, cpu_profile):
    ran = Engagement(world_size=2, distributed_type="MULTI_CPU", wrapper="DistributedDataParallel")
    executor = FakeExecutor(ran, exit_code=1, error="ValueError: bad config value")
    (record,) = execute(context(tmp_path, cpu_profile, executor), [DDP], out=io.StringIO())
    assert (record.status, record.error_class, record.message) == (
        Status.ERROR,
        "config",
        "ValueError: bad config value",
    )


def test_a_timeout_names_the_limit_the_cell_ran_under(tmp_path, cpu_profile):
    ran = Engagement(world_size=2, distributed_type="MULTI_CPU", wrapper="DistributedDataParallel")
    executor = FakeExecutor(ran, exit_code=-9, timed_out=True)
    (record,) = execute(context(tmp_path, cpu_profile, executor), [DDP], out=io.StringIO())
    assert record.status == Status.TIMEOUT
    assert record.message.startswith("cell exceeded its time limit of 120 s and was killed"), record.message


class ResultsTurnImmutable(FakeExecutor):
    """While the cell runs, its run's results.jsonl becomes immutable (chattr +i: root cannot append either)."""

    def run(self, plan: LaunchPlan, log_path: Path, timeout_s: float, labels: dict[str, str]) -> Outcome:
        outcome = super().run(plan, log_path, timeout_s, labels)
        subprocess.run(["chattr", "+i", str(log_path.parent.parent / "results.jsonl")], check=True)
        return outcome


def test_a_record_that_cannot_be_appended_is_kept_and_the_run_stops_with_a_resume_hint(
    tmp_path, cpu_profile, monkeypatch
):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr(tempfile, "tempdir", None)
    (tmp_path / "tmp").mkdir()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    results = run_dir / "results.jsonl"
    results.touch()
    ran = Engagement(
        world_size=2,
        distributed_type="MULTI_CPU",
        wrapper="DistributedDataParallel",
        adapters=["default"],
        trainer="DPOTrainer",
    )
    try:
        with pytest.raises(BenchError) as err:
            execute(context(run_dir, cpu_profile, ResultsTurnImmutable(ran)), [DDP], out=io.StringIO())
    finally:
        subprocess.run(["chattr", "-i", str(results)], check=False)
    (kept,) = (tmp_path / "tmp" / "dpo-bench-unrecorded").iterdir()
    assert str(err.value) == (
        f"could not append the result of {DDP.id} to {results}: Operation not permitted; its record is kept in "
        f"{kept} (to record it once results.jsonl can be written: cat {kept} >> {results}): the run stops; 0 "
        f"record(s) kept, {DDP.id} not recorded; make {run_dir} writable, then resume with --run-id r1"
    )
    record = ResultRecord.model_validate_json(kept.read_text())
    assert (record.cell_id, record.status) == (DDP.id, Status.OK) and record.metrics is not None
    assert results.read_text() == ""
    results.write_text(kept.read_text())  # what the message says to do: the measurement is recorded after all
    assert load_results(run_dir).records == [record]


class RunFolderTurnsImmutable(FakeExecutor):
    """The run folder cannot be written any more once the launcher started (running.json: chattr +i on the folder)."""

    def run(self, plan: LaunchPlan, log_path: Path, timeout_s: float, labels: dict[str, str]) -> Outcome:
        raise PermissionError(errno.EPERM, "Operation not permitted", str(log_path.parent.parent / "running.json"))


def test_a_run_folder_that_cannot_be_written_mid_run_stops_it_with_one_line_and_a_resume_hint(tmp_path, cpu_profile):
    ran = Engagement(world_size=2, distributed_type="MULTI_CPU", wrapper="DistributedDataParallel")
    with pytest.raises(BenchError) as err:
        execute(context(tmp_path, cpu_profile, RunFolderTurnsImmutable(ran)), [DDP], out=io.StringIO())
    assert str(err.value) == (
        f"{tmp_path / 'running.json'}: Operation not permitted: the run stops; 0 record(s) kept, {DDP.id} not "
        f"recorded; make {tmp_path} writable, then resume with --run-id r1"
    )


def test_a_config_file_replaced_by_a_folder_is_named_as_such(tmp_path, cpu_profile):
    """It used to read "make <run folder> writable", which it was."""
    ran = Engagement(world_size=2, distributed_type="MULTI_CPU", wrapper="DistributedDataParallel")
    spec = tmp_path / "configs" / DDP.id / "spec.json"
    spec.mkdir(parents=True)
    with pytest.raises(BenchError) as err:
        execute(context(tmp_path, cpu_profile, FakeExecutor(ran)), [DDP], out=io.StringIO())
    assert str(err.value) == (
        f"{spec} is a folder, where the run writes a file: the run stops; 0 record(s) kept, {DDP.id} not recorded; "
        f"move {spec} away, then resume with --run-id r1"
    )


def test_untested_is_decided_once_and_not_applicable_wins(cpu_profile):
    device_map = Cell(init="one_adapter", quant="none", backend="device_map", launcher="python")
    planned = [plan_for(c, cpu_profile, load_workload("tiny")) for c in (DDP, device_map)]
    plans = plan_cells(planned, untested="no stack")
    assert [p.not_run[0] for p in plans] == [Status.UNTESTED, Status.NOT_APPLICABLE]
    assert [p.not_run for p in plan_cells(planned[:1])] == [None]


def test_a_cell_that_ran_as_asked_but_did_not_learn_is_not_ok(tmp_path, cpu_profile):
    ddp_ran = Engagement(
        world_size=2,
        distributed_type="MULTI_CPU",
        wrapper="DistributedDataParallel",
        adapters=["default"],
        trainer="DPOTrainer",
    )
    executor = FakeExecutor(ddp_ran)
    executor.losses = lambda steps: [0.6931472] * steps
    (record,) = execute(context(tmp_path, cpu_profile, executor), [DDP], out=io.StringIO())
    assert record.status == Status.LEARNING_FAILED and record.message.startswith("loss did not fall")


def test_a_clear_predicted_oom_is_recorded_not_run_and_the_flag_runs_it(tmp_path, cpu_profile):
    from bench.results.schema import PredictionSummary

    def summary(total: float) -> PredictionSummary:
        return PredictionSummary(
            estimator_version="t",
            train_bytes=total,
            total_bytes=total,
            usable_bytes=100.0,
            verdict="oom" if total > 100 else "fits",
            margin_bytes=100.0 - total,
        )

    ddp_ran = Engagement(
        world_size=2,
        distributed_type="MULTI_CPU",
        wrapper="DistributedDataParallel",
        adapters=["default"],
        trainer="DPOTrainer",
    )
    executor = FakeExecutor(ddp_ran)
    ctx = context(tmp_path, cpu_profile, executor)
    ctx.predict = lambda cell: summary(130.0)  # 30 % over: a clear margin
    (record,) = execute(ctx, [DDP], out=io.StringIO())
    assert record.status == Status.PREDICTED_OOM and executor.plans == [] and record.prediction.total_bytes == 130
    ctx.run_predicted_oom = True
    (record,) = execute(ctx, [DDP], out=io.StringIO())
    assert record.status == Status.OK and len(executor.plans) == 1 and record.prediction.total_bytes == 130
    ctx.run_predicted_oom = False
    ctx.predict = lambda cell: summary(110.0)  # near the edge: it runs
    (record,) = execute(ctx, [DDP], force=True, out=io.StringIO())
    assert record.status == Status.OK and len(executor.plans) == 2


def test_mfu_counts_the_reference_forward_only_where_the_trainer_runs_one(tmp_path):
    """two_models under ZeRO-2 runs with the recipe's precomputed reference (no option on the cell): its steady
    state has no reference forward, so its flops per token are 6N + 12LHQT, not 8N + 16LHQT (1.33x)."""
    from bench.judge.mfu import flops_per_token, model_shape
    from bench.matrix.profiles import load_profile
    from bench.paths import SCENARIOS_DIR

    gpu = load_profile("2xA10")
    ran = Engagement(world_size=2, distributed_type="DEEPSPEED", wrapper="DeepSpeedEngine", zero_stage=2)
    ctx = context(tmp_path, gpu, FakeExecutor(ran))
    model = str(SCENARIOS_DIR / "workloads" / "phi-2")  # a config.json: MFU is computed from its shape
    ctx = RunContext(
        ctx.run_id, tmp_path, gpu, load_workload("phi-2"), ctx.assets.model_copy(update={"model": model}), ctx.executor
    )
    recipe = Cell(init="two_models", quant="none", backend="zero2", launcher="deepspeed")
    plain = Cell(init="two_models", quant="none", backend="ddp", launcher="torchrun")
    zero2, ddp = execute(ctx, [recipe, plain], out=io.StringIO())
    shape, length = model_shape(model), 1024
    assert zero2.metrics.flops_per_token == flops_per_token(shape, length, precomputed_ref=True)
    assert ddp.metrics.flops_per_token == flops_per_token(shape, length, precomputed_ref=False)
    assert ddp.metrics.mfu / zero2.metrics.mfu > 1.3


def test_a_cell_in_a_slot_of_the_hosts_memory_runs_under_its_slots_cap(tmp_path, cpu_profile):
    """The slot's cap is each rank's memory cgroup (the plan's budget, the executor's own otherwise), and the record
    is judged against it; on a GPU the cap is the per-process memory fraction in the cell's environment."""
    from bench.run.one_cell import run_cell
    from bench.run.slots import DeviceSlot, SlotPlacement

    ran = Engagement(
        world_size=2, distributed_type="MULTI_CPU", wrapper="DistributedDataParallel", adapters=["default"],
        trainer="DPOTrainer",
    )  # fmt: skip
    executor = FakeExecutor(ran)
    ctx = context(tmp_path, cpu_profile, executor)
    slots = (DeviceSlot(cores=(0,), memory_bytes=2**28), DeviceSlot(cores=(1,), memory_bytes=2**28))
    record = run_cell(ctx, DDP, placement=SlotPlacement((2, 3), slots, cap_bytes=2**28, of=6))
    assert executor.plans[0].memory_budget_bytes == 2**28 and executor.plans[0].cores == [0, 1]
    assert record.memory_budget_bytes == 2**28
    gpu = SlotPlacement((0,), (DeviceSlot(gpu="0", memory_bytes=2**34),), cap_bytes=2**33, device_bytes=2**35, of=4)
    run_cell(ctx, DDP, placement=gpu)
    plan = executor.plans[1]
    assert plan.memory_budget_bytes is None and plan.env["BENCH_EMULATE_MEMORY_FRACTION"] == "0.250000"
