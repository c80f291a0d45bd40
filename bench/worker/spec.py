"""What the runner hands a worker: everything one cell needs, as one JSON file."""

from pathlib import Path

from pydantic import BaseModel

from bench.assets import PreparedAssets
from bench.profiles import HardwareProfile, Workload
from bench.scenario import Cell


class WorkerSpec(BaseModel):
    cell: Cell
    profile: HardwareProfile
    workload: Workload
    assets: PreparedAssets
    out_dir: str
    deepspeed_config: str | None = None
    """Passed to TrainingArguments(deepspeed=...) when the launcher does not configure DeepSpeed itself."""

    def rank_file(self, rank: int) -> Path:
        return Path(self.out_dir) / f"rank{rank}.json"

    @classmethod
    def read(cls, path: str | Path) -> "WorkerSpec":
        return cls.model_validate_json(Path(path).read_text(encoding="utf-8"))
