"""A cell placed on a profile, before its workload is known: what the N/A rules judge and what a launch sizes its
ranks by. The Plan (bench/matrix/plan.py) is built from it; a caller without a workload takes this alone. Pure."""

from dataclasses import dataclass

from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.matrix.profiles import HardwareProfile


@dataclass(frozen=True)
class CellOnProfile:
    """`cell` to run on `profile`."""

    cell: Cell
    profile: HardwareProfile

    @property
    def world(self) -> int:
        """Ranks the cell runs: the row's own (`+1rank`), else the profile's, for a multi-process backend; else 1."""
        if not backend_spec(self.cell.backend).multi_process:
            return 1
        return self.cell.ranks if self.cell.ranks is not None else self.profile.processes
