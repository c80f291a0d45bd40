"""What the runner hands a worker: everything one cell needs, as one JSON file."""

from pathlib import Path

from pydantic import BaseModel, computed_field

from bench.assets.prepare import PreparedAssets
from bench.matrix.cell import Cell
from bench.matrix.profiles import HardwareProfile, Workload
from bench.matrix.recipes import AppliedRecipe, resolve
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

    @computed_field  # type: ignore[prop-decorator]
    @property
    def recipe(self) -> AppliedRecipe:
        """The cell's documented settings on this profile (scenarios/recipes.yaml), written into spec.json for the
        reader; always resolved again from the cell, never read back."""
        return resolve(self.cell, self.profile.device)

    def rank_file(self, rank: int) -> Path:
        return Path(self.out_dir) / f"rank{rank}.json"

    @classmethod
    def read(cls, path: str | Path) -> "WorkerSpec":
        return cls.model_validate_json(Path(path).read_text(encoding="utf-8"))
