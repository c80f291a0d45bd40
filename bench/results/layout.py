"""The layout of one run's folder, results/<HW>/<run-id>/, stated once: every reader and writer asks here."""

from dataclasses import dataclass
from pathlib import Path

RESULTS_FILE = "results.jsonl"
"""One schema-versioned record per cell trial, appended as each ends."""
ENV_FILE = "env.json"
"""The environment fingerprint, written once per run."""
FORK_SERVER_LOG = "logs/fork-server.log"
"""What the run's fork server printed (bench/run/fork_server_mode.py)."""
HOST_OPS_LOG = "host-ops.log"
"""The build of DeepSpeed's CPU ops before the first cell that needs them (bench/run/host_ops.py)."""
CPU_FEATURES_AFTER_FILE = "cpu_features.after.json"
"""A run whose env.json predates `cpu_features`: the features measured afterwards on a machine of the same kind, with
the evidence that it is (bench/results/cpu_features.MeasuredAfter); never written by a run."""


def trial_key(cell_id: str, trial: int) -> str:
    """How a trial is named in file names: the cell id, with `.trial<N>` from the second trial on."""
    return cell_id if trial == 0 else f"{cell_id}.trial{trial}"


@dataclass(frozen=True)
class RunFolder:
    path: Path

    @property
    def results(self) -> Path:
        return self.path / RESULTS_FILE

    @property
    def env(self) -> Path:
        return self.path / ENV_FILE

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    def log(self, cell_id: str, trial: int) -> Path:
        return self.logs / f"{trial_key(cell_id, trial)}.log"

    def cell(self, cell_id: str) -> Path:
        """What the cell's ranks write (rank reports, scheduler output) and its dataset links; not committed."""
        return self.path / "cells" / cell_id

    def configs(self, cell_id: str) -> Path:
        """The generated launcher and library config files and the worker spec, reusable as they are."""
        return self.path / "configs" / cell_id
