"""What the runner hands a worker: everything one cell needs, as one JSON file. Built from the cell's Plan
(`WorkerSpec.from_plan`), so the worker reads the recipe and reference the Plan resolved rather than resolving them."""

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from bench.assets.prepare import PreparedAssets
from bench.matrix.cell import Cell
from bench.matrix.plan import Plan
from bench.matrix.profiles import HardwareProfile, Workload
from bench.matrix.recipes import AppliedRecipe
from bench.matrix.reference import ReferencePlan
from bench.worker.trackers import Tracker


class WorkerSpec(BaseModel):
    cell: Cell
    profile: HardwareProfile
    workload: Workload
    assets: PreparedAssets
    out_dir: str
    deepspeed_config: str | None = None
    """Passed to TrainingArguments(deepspeed=...) when the launcher does not configure DeepSpeed itself."""
    save_dir: str | None = None
    """Where the trained model (for adapters: the adapter) is saved after training, for a pipeline's next stage;
    None: nothing is saved (a matrix cell)."""
    reward_model: str | None = None
    """A trained sequence-classification reward model (the rlhf pipeline's reward stage, merged) that scores an
    online cell's completions with the `reward_model` option; None: the option builds one from the workload's
    checkpoint with a zero head (its memory, no reward)."""
    report_to: tuple[Tracker, ...] = ("none",)
    """The experiment trackers the trainer reports to (`--report-to`; bench/worker/trackers.py)."""

    recipe: AppliedRecipe
    """The cell's documented settings on this profile (scenarios/recipes.yaml), as its Plan resolved them."""
    reference: ReferencePlan
    """How the cell's reference model is held (bench/matrix/reference.py), as its Plan resolved it."""

    @classmethod
    def from_plan(cls, plan: Plan, assets: PreparedAssets, out_dir: str, **options: Any) -> "WorkerSpec":
        """The spec of `plan`'s cell: `options` are the fields a Plan does not hold (deepspeed_config, save_dir,
        reward_model, report_to)."""
        return cls(
            cell=plan.cell,
            profile=plan.profile,
            workload=plan.workload,
            recipe=plan.recipe,
            reference=plan.reference,
            assets=assets,
            out_dir=out_dir,
            **options,
        )

    def rank_file(self, rank: int) -> Path:
        return Path(self.out_dir) / f"rank{rank}.json"

    @classmethod
    def read(cls, path: str | Path) -> "WorkerSpec":
        return cls.model_validate_json(Path(path).read_text(encoding="utf-8"))
