"""Well-known folders of the project. Everything else is derived from these."""

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SCENARIOS_DIR = PROJECT_ROOT / "scenarios"
RESULTS_DIR = PROJECT_ROOT / "results"
BUILD_DIR = PROJECT_ROOT / "build"
SCENARIOS_ENV = "BENCH_SCENARIOS"
"""Where the command line names the scenario folder in use (`--scenarios`), for itself and every process it starts."""


def scenarios_dir() -> Path:
    """The scenario folder in use: the one `--scenarios` named, else the shipped one. Every reader of a scenario file
    starts from here (or from a folder it is given)."""
    return Path(os.environ.get(SCENARIOS_ENV) or SCENARIOS_DIR)
