"""The side-by-side scheduler (bench/run/side_by_side.py) through `execute`, with `run_cell` replaced by a fake that
takes a set time and runs out of memory where its cell's real need exceeds its cap: admission by predicted memory,
records that say where and beside what a cell ran, the re-run alone after an OOM under a slot's cap, the exclusive
speed pass, and cells of another run on the same device. The ledger is the real file one."""

import io
import threading
import time
from dataclasses import dataclass, field, replace

from bench.assets.prepare import PreparedAssets
from bench.executors.local import LocalExecutor
from bench.judge.record import RunFacts, _identity
from bench.matrix.profiles import load_profile, load_workload
from bench.matrix.scenario import expand, load_matrix
from bench.results.layout import RunFolder
from bench.results.schema import Metrics, PredictionSummary, ResultRecord, Status
from bench.results.store import load_results
from bench.run import side_by_side
from bench.run.budget import TimeBudget
from bench.run.memory_slots import SPEED_TRIALS, SharedDevice
from bench.run.one_cell import RunContext
from bench.run.runner import execute
from bench.run.side_by_side import speed_pass
from bench.run.slot_ledger import DeviceLedger
from bench.run.trial import Trial, label
from bench.units import MiB

SINGLES = ("one_adapter-none-single", "two_models-none-single", "two_adapters-none-single")
DDP = "one_adapter-none-ddp"
CELLS = {c.id: c for c in expand(load_matrix()) if c.id in (*SINGLES, DDP)}
BUDGET = 768 * MiB
HOST = SharedDevice("host", None, 2 * BUDGET, 6, BUDGET)
"""The cpu-budget profile's host memory in 6 slots of 256 MiB, each rank alone given 768 MiB."""


def predicted(total: float | None) -> PredictionSummary:
    return PredictionSummary(
        estimator_version="t", train_bytes=total, total_bytes=total, usable_bytes=BUDGET, verdict="fits",
        margin_bytes=None,
    )  # fmt: skip


@dataclass
class FakeCells:
    """run_cell: each trial takes `seconds`, and runs out of memory where its cell needs more than its cap."""

    needs: dict[str, int]
    seconds: float = 0.5
    longer: dict[str, float] = field(default_factory=dict)
    """Cells that take other than `seconds`."""
    ran: list[tuple[str, int, object]] = field(default_factory=list)
    live: int = 0
    most: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, ctx, cell, trial=0, prediction=None, timeout_s=None, placement=None) -> ResultRecord:
        with self.lock:
            self.live += 1
            self.most = max(self.most, self.live)
            self.ran.append((cell.id, trial, placement))
        RunFolder(ctx.run_dir).logs.mkdir(parents=True, exist_ok=True)
        RunFolder(ctx.run_dir).log(cell.id, trial).write_text("fake\n")
        time.sleep(self.longer.get(cell.id, self.seconds))
        with self.lock:
            self.live -= 1
        cap = placement.cap_bytes if placement is not None and placement.cap_bytes is not None else BUDGET
        facts = RunFacts(ctx.run_id, ctx.profile.name, ctx.workload.name, "local")
        record = _identity(facts, cell, 1, Status.OOM if self.needs.get(cell.id, 0) > cap else Status.OK)
        metrics = Metrics(
            tokens_per_s=100.0, pairs_per_s=1.0, step_time_median_s=0.1, step_time_p90_s=0.1, steps=10,
            warmup_steps=1, tokens_total=1000, memory_kind="cgroup", load_peak_bytes=None, train_peak_bytes=None,
            mem_growth_per_step_bytes=None, load_s=None,
        )  # fmt: skip
        ok = record.status == Status.OK
        return record.model_copy(update={"trial": trial, "wall_s": self.seconds, "metrics": metrics if ok else None})


def context(tmp_path, monkeypatch, fake: FakeCells, totals: dict[str, float | None], profile="cpu-budget"):
    monkeypatch.setattr("bench.run.trial.run_cell", fake)
    assets = PreparedAssets(model="", tokenizer="", dataset="")
    return RunContext(
        "r1", tmp_path, load_profile(profile), load_workload("tiny"), assets, executor=LocalExecutor(tmp_path),
        predict=lambda plan: predicted(totals.get(plan.cell.id, 123 * MiB)),
    )  # fmt: skip


def run(ctx, cells=None, **kwargs) -> tuple[dict[str, ResultRecord], str]:
    out = io.StringIO()
    execute(ctx, list(CELLS.values()) if cells is None else list(cells), out=out, **kwargs)
    return load_results(ctx.run_dir).latest_by_cell(), out.getvalue()


def test_cells_are_admitted_by_their_predicted_memory_and_say_where_and_beside_what_they_ran(tmp_path, monkeypatch):
    fake = FakeCells(needs={})
    records, text = run(context(tmp_path, monkeypatch, fake, {}), slots=HOST)
    assert fake.most == 4  # 1 + 1 + 1 slots for the singles, 2 for the two ranks of DDP: 5 of 6
    assert "6 slots of the host's memory (0.25 GiB each)" in text
    for cell_id, record in records.items():
        assert record.status == Status.OK and record.gpu_shared and record.speed_shared
        assert record.shared_with == sorted(set(CELLS) - {cell_id})
        assert record.memory_cap_bytes == 256 * MiB  # one slot, or two for two ranks: 256 MiB each
        assert record.slot.endswith(" of 6") and record.devices.startswith("core")
    assert records[DDP].slot.count("-") == 1  # two slots
    placements = {cell_id: placement for cell_id, _, placement in fake.ran}
    assert placements[DDP].memory_budget_bytes == 256 * MiB and placements[DDP].env == {}


def test_a_cell_without_a_prediction_or_too_big_for_the_slots_runs_alone(tmp_path, monkeypatch):
    fake = FakeCells(needs={})
    ctx = context(tmp_path, monkeypatch, fake, {SINGLES[0]: None, SINGLES[1]: 1400 * MiB})
    records, _ = run(ctx, slots=HOST)
    for cell_id in SINGLES[:2]:
        assert records[cell_id].slot == "0-5 of 6" and records[cell_id].memory_cap_bytes is None
        assert not records[cell_id].gpu_shared and records[cell_id].shared_with == []
    # the cells that share the device started first, all at once, the two that take all of it after them
    assert {cell_id for cell_id, _, _ in fake.ran[-2:]} == set(SINGLES[:2])


def test_a_run_with_alone_runs_each_cell_in_every_slot_one_after_another(tmp_path, monkeypatch):
    """`run --alone` (the window's speed pass, a cell whose host memory leaves no room): every cell takes every slot
    through the ledger, so nothing of this run or another runs beside it."""
    fake = FakeCells(needs={})
    records, _ = run(context(tmp_path, monkeypatch, fake, {}), cells=[CELLS[c] for c in SINGLES],
                     slots=replace(HOST, alone=True))  # fmt: skip
    assert fake.most == 1
    for record in records.values():
        assert record.slot == "0-5 of 6" and record.memory_cap_bytes is None and not record.gpu_shared


def test_an_oom_under_a_slots_cap_is_not_recorded_and_the_cell_runs_again_alone(tmp_path, monkeypatch):
    fake = FakeCells(needs={SINGLES[0]: 300 * MiB})  # predicted 123 MiB: one slot of 256 MiB, too small
    ctx = context(tmp_path, monkeypatch, fake, {})
    records, text = run(ctx, slots=HOST)
    tries = [placement for cell_id, _, placement in fake.ran if cell_id == SINGLES[0]]
    assert [p.cap_bytes for p in tries] == [256 * MiB, None] and tries[1].indexes == tuple(range(6))
    lines = [r for r in load_results(ctx.run_dir).records if r.cell_id == SINGLES[0]]
    assert [(r.status, r.slot, r.gpu_shared) for r in lines] == [(Status.OK, "0-5 of 6", False)]
    assert "out of memory under its slots' cap (0.25 GiB)" in text and "run again alone" in text
    assert (ctx.run_dir / "logs" / f"{SINGLES[0]}.capped.log").is_file()
    assert all(records[c].status == Status.OK for c in CELLS)


def test_an_oom_under_the_cells_own_memory_is_its_record(tmp_path, monkeypatch):
    fake = FakeCells(needs={SINGLES[0]: 2 * BUDGET})  # more than its own profile gives it
    ctx = context(tmp_path, monkeypatch, fake, {SINGLES[0]: 700 * MiB})  # every slot: its own budget
    records, text = run(ctx, slots=HOST)
    assert records[SINGLES[0]].status == Status.OOM and "run again alone" not in text
    assert [cell_id for cell_id, _, _ in fake.ran].count(SINGLES[0]) == 1
    emulated = SharedDevice("0", "0", 100 * BUDGET, 6, BUDGET, BUDGET)  # an emulated card: its cap is its own
    fake = FakeCells(needs={SINGLES[1]: 2 * BUDGET})
    records, text = run(context(tmp_path / "e", monkeypatch, fake, {}), slots=emulated)
    assert records[SINGLES[1]].status == Status.OOM and records[SINGLES[1]].memory_cap_bytes == BUDGET
    assert "run again alone" not in text


def test_an_exclusive_speed_pass_runs_a_handful_twice_each_alone_after_the_shared_cells(tmp_path, monkeypatch):
    fake = FakeCells(needs={})
    ctx = context(tmp_path, monkeypatch, fake, {})
    records, text = run(ctx, slots=HOST, speed_cells=2)
    assert f"exclusive speed pass: 2 cell(s) x {SPEED_TRIALS} trials" in text
    alone = [(c, t, p) for c, t, p in fake.ran[4:]]
    assert len(alone) == 2 * SPEED_TRIALS and all(p.indexes == tuple(range(6)) for _, _, p in alone)
    assert sorted(t for _, t, _ in alone) == [1, 1, 2, 2]  # after the run's own trial 0
    unshared = [r for r in load_results(ctx.run_dir).records if not r.speed_shared]
    assert len(unshared) == 4 and all(r.status == Status.OK and r.trial >= 1 for r in unshared)
    assert "(speed pass, trial 2/2)" in text
    assert not [r for r in records.values() if r.speed_shared and r.cell_id in {c for c, _, _ in alone}]


def test_the_speed_pass_takes_the_first_ok_cells_whose_speed_was_shared():
    cells = list(CELLS.values())
    shared = ResultRecord.model_construct(status=Status.OK, overlapped_by=[], shared_with=["x"], gpu_shared=True)
    alone = shared.model_copy(update={"shared_with": [], "gpu_shared": False})
    failed = shared.model_copy(update={"status": Status.OOM})
    done = {cells[0].id: failed, cells[1].id: alone, cells[2].id: shared, cells[3].id: shared}
    assert speed_pass(cells, done, 1, repeats=3) == [Trial(cells[2], 3, True), Trial(cells[2], 4, True)]
    assert speed_pass(cells, done, 0, repeats=1) == []


def test_another_runs_cells_in_the_devices_slots_are_named_and_not_taken_for_an_overlap(tmp_path, monkeypatch):
    import os

    fake = FakeCells(needs={})
    ctx = context(tmp_path, monkeypatch, fake, {})
    other = DeviceLedger.for_device(HOST.key, HOST.slots, HOST.memory_bytes, "run2")
    other = DeviceLedger(other.path, HOST.slots, HOST.memory_bytes, "run2", pid=os.getppid())
    held, span = other.take(1, "its-cell")
    overlapped = {"overlapped_by": ["run2", "run3"]}  # as the runners folder names them
    monkeypatch.setattr("bench.run.trial.with_overlap", lambda record, start, end: record.model_copy(update=overlapped))
    records, _ = run(ctx, cells=[CELLS[SINGLES[0]]], slots=HOST)
    record = records[SINGLES[0]]
    assert record.shared_with == ["run2/its-cell"] and record.overlapped_by == ["run3"] and record.gpu_shared
    assert fake.ran[0][2].indexes == (1,)  # slot 0 is the other run's
    other.give(held, span)


def test_a_run_that_only_waits_for_the_devices_slots_is_not_taken_for_an_overlap(tmp_path, monkeypatch):
    """A run whose cells wait in the ledger (the window's phases of a lower priority while a cell runs alone) has no
    cell on the device: the ledger accounts for it, its idle runner did not share the machine."""
    import os

    fake = FakeCells(needs={})
    ctx = context(tmp_path, monkeypatch, fake, {})
    other = DeviceLedger.for_device(HOST.key, HOST.slots, HOST.memory_bytes, "waiting", priority=9)
    other = DeviceLedger(other.path, HOST.slots, HOST.memory_bytes, "waiting", pid=os.getppid(), priority=9)
    third = DeviceLedger(other.path, HOST.slots, HOST.memory_bytes, "third", pid=os.getppid())
    held = third.take(HOST.slots, "all")
    assert held is not None and other.take(1, "its-cell") is None  # it waits from before the cell starts ...
    third.give(*held)
    overlapped = {"overlapped_by": ["waiting", "elsewhere"]}  # as the runners folder names them
    monkeypatch.setattr("bench.run.trial.with_overlap", lambda record, start, end: record.model_copy(update=overlapped))
    original = fake.__call__

    def waiting_meanwhile(*args, **kwargs):
        assert other.take(1, "its-cell") is None  # ... and all along, held off by the cell alone
        return original(*args, **kwargs)

    monkeypatch.setattr("bench.run.trial.run_cell", waiting_meanwhile)
    records, _ = run(ctx, cells=[CELLS[SINGLES[0]]], slots=replace(HOST, alone=True))
    record = records[SINGLES[0]]
    assert record.shared_with == [] and record.overlapped_by == ["elsewhere"] and not record.gpu_shared
    ours = DeviceLedger(other.path, HOST.slots, HOST.memory_bytes, "r1")
    assert ours.waiting_runs(time.time() - 60) == set()  # one that began waiting later may have done more before


def test_a_time_budget_predicts_cells_beside_others_slower_and_keeps_the_speed_pass_time_back(tmp_path, monkeypatch):
    singles = [CELLS[c] for c in SINGLES]

    def budgeted(folder: str, seconds: float, speed_cells: int) -> tuple[dict, str, TimeBudget]:
        # each cell: 10 s of start-up and 1 s of steps, its steps as many times as long as cells share the device
        budget = TimeBudget(seconds, 10, lambda c: 0.1, start_up_guess_s=10.0)
        ctx = context(tmp_path / folder, monkeypatch, FakeCells({}), {})
        return (*run(ctx, cells=singles, slots=HOST, budget=budget, speed_cells=speed_cells), budget)

    records, text, _ = budgeted("all", 30.0, 0)  # 11, 12 and 13 s, all at once
    assert len(records) == 3 and "not run" not in text
    records, text, _ = budgeted("third", 12.5, 0)
    assert len(records) == 2 and "not run: predicted 13 s" in text
    records, text, budget = budgeted("reserved", 30.0, 1)  # 2 x 11 s kept back: 8 s left for the shared cells
    assert records == {} and text.count("not run: predicted 11 s") == 3
    assert budget.reserved == []  # let go for the speed pass
    records, text, _ = budgeted("pass", 300.0, 1)
    assert "exclusive speed pass: 1 cell(s)" in text and len(records) == 3


def test_cells_on_disjoint_core_groups_still_run_side_by_side_and_two_ranks_alone(tmp_path, monkeypatch):
    monkeypatch.setattr("bench.run.runner.os.sched_getaffinity", lambda pid: {0, 1})
    fake = FakeCells(needs={}, longer={"two_models-none-single": 0.9})  # the third single starts beside it
    records, text = run(context(tmp_path, monkeypatch, fake, {}, profile="cpu-slots"))
    assert "side by side on 2 devices" in text
    assert [cell_id for cell_id, _, _ in fake.ran][-1] == DDP and records[DDP].devices == "cores 0-1"
    assert records[DDP].shared_with == [] and not records[DDP].gpu_shared and records[DDP].slot is None
    assert all(records[c].devices in ("core 0", "core 1") and records[c].shared_with for c in SINGLES)


def test_two_trials_of_one_cell_never_run_together_and_a_trial_says_which_it_is(tmp_path, monkeypatch):
    fake = FakeCells(needs={})
    _, text = run(context(tmp_path, monkeypatch, fake, {}), cells=[CELLS[SINGLES[0]]], slots=HOST, repeats=2)
    assert fake.most == 1 and [t for _, t, _ in fake.ran] == [0, 1]
    assert "(trial 2/2)" in text
    cell = CELLS[SINGLES[0]]
    assert label(Trial(cell, 0), 1) == cell.id
    assert label(Trial(cell, 3, True), 2) == f"{cell.id} (speed pass, trial 2/{SPEED_TRIALS})"


def test_a_run_whose_slots_another_run_holds_waits_for_them(tmp_path, monkeypatch):
    import os

    monkeypatch.setattr(side_by_side, "POLL_S", 0.1)
    other = DeviceLedger.for_device(HOST.key, HOST.slots, HOST.memory_bytes, "run2")
    other = DeviceLedger(other.path, HOST.slots, HOST.memory_bytes, "run2", pid=os.getppid())
    held, span = other.take(6, "takes-it-all")
    threading.Timer(1.0, other.give, (held, span)).start()
    fake = FakeCells(needs={})
    started = time.monotonic()
    records, _ = run(context(tmp_path, monkeypatch, fake, {}), cells=[CELLS[SINGLES[0]]], slots=HOST)
    assert time.monotonic() - started >= 1.0 and records[SINGLES[0]].status == Status.OK
    assert records[SINGLES[0]].shared_with == [] and not records[SINGLES[0]].gpu_shared  # it ended before


def test_an_emulated_card_is_said_and_disjoint_devices_run_no_speed_pass(tmp_path, monkeypatch):
    emulated = SharedDevice("0", "0", 100 * BUDGET, 6, BUDGET, BUDGET)
    _, text = run(context(tmp_path, monkeypatch, FakeCells({}), {}), cells=[CELLS[SINGLES[0]]], slots=emulated)
    assert f"each capped at its card's {BUDGET / 1e9:g} GB" in text and "slots of GPU 0" in text
    monkeypatch.setattr("bench.run.runner.os.sched_getaffinity", lambda pid: {0, 1})
    ctx = context(tmp_path / "d", monkeypatch, FakeCells({}), {}, profile="cpu-slots")
    _, text = run(ctx, cells=[CELLS[c] for c in SINGLES], speed_cells=5)
    assert "speed pass" not in text
