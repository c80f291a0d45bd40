"""The runs git tracks under results/, apart from any a user made in the same checkout.

`make bench` writes a new run into results/<HW>/ of the checkout it runs in. What is derived from the committed runs
(the PREDICTED files' validation line, spread.json, calibration.json) and the tests that hold those files to the code
read this view instead: a temporary folder `results/` with a link to every file `git ls-files results` lists (files
added with `git add` included), built once per process. A checkout without git cannot tell the two apart, and says so.
A folder git ignores inside a checkout is a copy of that checkout (mutmut's working copy mutants/, `make mutants`,
holds the project's results/): its committed runs are the checkout's, read from the copy.
"""

import atexit
import functools
import shutil
import subprocess
import tempfile
from pathlib import Path

from bench.errors import BenchError
from bench.paths import PROJECT_ROOT

FOLDER = "results"


def tracked_files(root: Path = PROJECT_ROOT) -> list[str]:
    """Paths under results/ that git tracks in `root`, relative to it (for a copy git ignores: those of the folder
    holding the copy)."""
    if _git(root, "check-ignore", "-q", ".").returncode == 0:
        return tracked_files(root.parent)
    out = _git(root, "ls-files", "-z", "--", FOLDER)
    if out.returncode != 0:
        why = (out.stderr.strip().splitlines() or ["no output"])[0]
        raise BenchError(f"{root} is not a git checkout ({why}): cannot tell its committed runs from a user's own")
    return [name for name in out.stdout.split("\0") if name]


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BenchError(f"cannot list the committed runs of {root} (git: {exc})") from None


@functools.cache
def tracked_results(root: Path = PROJECT_ROOT) -> Path:
    """A `results/` folder holding links to the tracked files of `root`'s results/ (a tracked file deleted in the
    checkout is left out); removed when the process exits."""
    holder = Path(tempfile.mkdtemp(prefix="dpo-bench-tracked-"))
    atexit.register(shutil.rmtree, holder, True)
    view = holder / FOLDER
    view.mkdir()
    for name in tracked_files(root):
        source = root / name
        if not source.is_file():
            continue
        link = view / Path(name).relative_to(FOLDER)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(source)
    return view
