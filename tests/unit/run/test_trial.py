"""One trial lifecycle (bench/run/trial.py) whatever the scheduling: the same cells run one after another, side by
side in slots of one device and in flight under a (fake) scheduler go through the same steps, in the same order, for
every cell. `run_cell` is a fake; the steps are seen where the lifecycle calls them."""

import io
from dataclasses import dataclass, replace

import pytest

from bench.executors.local import LocalExecutor
from bench.results.schema import ResultRecord, Status
from bench.results.store import load_results
from bench.run import trial as trial_module
from bench.run.budget import TimeBudget
from bench.run.runner import execute
from tests.unit.run.test_side_by_side import CELLS, HOST, FakeCells, context

LIFECYCLE = ["admit", "run_cell", "with_overlap", "append_or_keep", "learn", "progress"]
"""What every cell goes through on this machine under a time budget."""
ORIGINAL = {name: getattr(trial_module, name) for name in ("with_overlap", "append_or_keep", "format_progress")}


@dataclass
class Steps:
    """The lifecycle steps seen, per cell, in order."""

    seen: dict[str, list[str]]

    def saw(self, cell_id: str, step: str) -> None:
        self.seen.setdefault(cell_id, []).append(step)


class SeenBudget(TimeBudget):
    """A time budget that says when it is asked whether a cell fits and when it learns from one."""

    seen_steps: Steps

    def fits(self, cell, now=None, beside=0, reserving=False) -> bool:
        self.seen_steps.saw(cell.id, "admit")
        return super().fits(cell, now, beside, reserving)

    def learn(self, cell, record: ResultRecord) -> None:
        self.seen_steps.saw(cell.id, "learn")
        super().learn(cell, record)


class FakeScheduler(LocalExecutor):
    """A scheduler that takes every cell at once and knows of no job."""

    concurrent = True

    def earlier_job(self, key, cell_id):
        return None

    def final_state(self, key):
        return None

    def queue_summary(self) -> str:
        return ""

    def cancel_all(self) -> list[str]:
        return []


def watched(monkeypatch, fake: FakeCells) -> Steps:
    """Every step the lifecycle takes, seen on its way through."""
    steps = Steps({})

    def run_cell(ctx, cell, *args, **kwargs):
        steps.saw(cell.id, "run_cell")
        return fake(ctx, cell, *args, **{k: v for k, v in kwargs.items() if k != "fresh"})

    def seen(name: str, record_at: int):
        def call(*args, **kwargs):
            steps.saw(args[record_at].cell_id, "progress" if name == "format_progress" else name)
            return ORIGINAL[name](*args, **kwargs)

        return call

    monkeypatch.setattr(trial_module, "run_cell", run_cell)
    monkeypatch.setattr(trial_module, "with_overlap", seen("with_overlap", 0))
    monkeypatch.setattr(trial_module, "append_or_keep", seen("append_or_keep", 1))
    monkeypatch.setattr(trial_module, "format_progress", seen("format_progress", 2))
    return steps


def run_watched(tmp_path, monkeypatch, how: str) -> tuple[Steps, dict[str, Status]]:
    fake = FakeCells(needs={}, seconds=0.05)
    ctx = context(tmp_path / how, monkeypatch, fake, {})
    steps = watched(monkeypatch, fake)
    budget = SeenBudget(1e6, 10, lambda cell: 0.1)
    budget.seen_steps = steps
    if how == "in flight":
        ctx = replace(ctx, executor=FakeScheduler(tmp_path / how))
    kwargs = {"exclusive": True} if how == "in order" else {}
    execute(ctx, list(CELLS.values()), out=io.StringIO(), budget=budget, slots=HOST, **kwargs)
    statuses = {r.cell_id: r.status for r in load_results(ctx.run_dir).records}
    return steps, statuses


@pytest.mark.parametrize("how", ["side by side", "in flight"])
def test_in_order_side_by_side_and_in_flight_take_every_cell_through_the_same_steps(tmp_path, monkeypatch, how):
    in_order, in_order_statuses = run_watched(tmp_path, monkeypatch, "in order")
    assert in_order.seen == {cell_id: LIFECYCLE for cell_id in CELLS}
    other, statuses = run_watched(tmp_path, monkeypatch, how)
    assert statuses == in_order_statuses == {cell_id: Status.OK for cell_id in CELLS}
    if how == "side by side":
        assert other.seen == in_order.seen
    else:  # a scheduler's node: no time budget, and not this machine's runners
        assert other.seen == {cell_id: ["run_cell", "append_or_keep", "progress"] for cell_id in CELLS}
