"""Well-known folders of the project. Everything else is derived from these.

The same code runs from a checkout (or its editable install) and from an installed wheel. A checkout keeps the
scenario folder and its build outputs beside `bench/`; a wheel carries the scenarios inside the package
(`bench/_scenarios`, mapped from the checkout's `scenarios/` at build time: setup.py) and builds its assets in the
user's cache folder. Results are the current folder's `./results` in both."""

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
PROJECT_ROOT = PACKAGE_DIR.parent
"""The folder `bench` is imported from: the checkout, or site-packages for an installed wheel. The cells' processes
start here so that `python -m bench.worker` imports this very package."""
IN_CHECKOUT = (PROJECT_ROOT / "pyproject.toml").is_file() and (PROJECT_ROOT / "scenarios").is_dir()
"""A checkout (or its editable install): scenarios/, docker/ and git beside the package."""
PACKAGED_SCENARIOS = "_scenarios"
"""Where a wheel carries the scenario folder, inside the package."""
PACKAGED_HOST_OPS = "_host_ops"
"""Where a wheel carries docker/cpu/'s script that builds DeepSpeed's host ops (bench/run/host_ops.py)."""
SCENARIOS_DIR = PROJECT_ROOT / "scenarios" if IN_CHECKOUT else PACKAGE_DIR / PACKAGED_SCENARIOS
"""The shipped scenario folder: the checkout's, or the wheel's copy."""
DERIVED_DIR = SCENARIOS_DIR / "derived"
"""What `predict --write` and `validate-speed --fit` derive from the committed runs (the ranges' spreads, the memory
and speed calibrations): data the package reads, not code, so it ships with the scenarios."""
RESULTS_DIR = PROJECT_ROOT / "results"
"""The checkout's results folder: the committed runs its derived files and tests read (none in a wheel)."""
RESULTS_DEFAULT = Path("results")
"""Where a command reads and writes runs unless `--results` says otherwise: `./results` of the current folder."""
CACHE_ENV = "XDG_CACHE_HOME"


def user_cache_dir() -> Path:
    """The user's cache folder for dpo-bench ($XDG_CACHE_HOME/dpo-bench, else ~/.cache/dpo-bench)."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache") / "dpo-bench"


BUILD_DIR = PROJECT_ROOT / "build" if IN_CHECKOUT else user_cache_dir()
"""Prepared assets, carried assets, pipeline outputs: rebuilt on demand, never results. The checkout's build/, else
the user's cache folder (site-packages is no place to write)."""
SCENARIOS_ENV = "BENCH_SCENARIOS"
"""Where the command line names the scenario folder in use (`--scenarios`), for itself and every process it starts."""


def scenarios_dir() -> Path:
    """The scenario folder in use: the one `--scenarios` named, else the shipped one. Every reader of a scenario file
    starts from here (or from a folder it is given)."""
    return Path(os.environ.get(SCENARIOS_ENV) or SCENARIOS_DIR)
