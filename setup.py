"""Build hooks beside pyproject.toml: what a wheel carries that a checkout keeps outside `bench/`.

- The scenario folder: `scenarios/` of the checkout becomes the package `bench._scenarios` (package-dir), every file
  of it package data, so an installed wheel reads it beside its modules (bench/paths.py SCENARIOS_DIR).
- The script that builds DeepSpeed's host ops before a run's first cell: `docker/cpu/prebuild_deepspeed_ops.py`, as
  the module `bench._host_ops.prebuild_deepspeed_ops` (bench/run/host_ops.py).
- The commit it was built from: `bench/_build_info.py` is written into the build (and into an sdist), for
  `dpo-bench --version` and env.json where no git checkout is at hand (bench/install.py).
"""

import subprocess
from pathlib import Path

from setuptools import find_namespace_packages, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

ROOT = Path(__file__).resolve().parent
SCENARIOS_PACKAGE = "bench._scenarios"
HOST_OPS_PACKAGE = "bench._host_ops"
BUILD_INFO = Path("bench") / "_build_info.py"


CODE_PATHS = ("bench", "scenarios", "pyproject.toml", "setup.py")
"""What the wheel is built from: a change under these (new files included) makes the build dirty."""


def git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def write_build_info(target_root: Path) -> None:
    """`bench/_build_info.py` under `target_root`: the checkout's commit, and whether the files built differ from it.
    Built from an sdist (no git), the copy the sdist carries, already copied as a module of `bench`, is kept."""
    top = (git("rev-parse", "--show-toplevel") or "").strip()
    if not top or Path(top).resolve() != ROOT:  # no git, or an unpacked sdist lying inside another repository
        sha, dirty = None, None
    else:
        sha = (git("rev-parse", "HEAD") or "").strip() or None
        status = git("status", "--porcelain", "--", *CODE_PATHS)
        dirty = None if status is None else bool(status.strip())
    target = target_root / BUILD_INFO
    if sha is None and target.is_file():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    text = f'"""Written by setup.py when the package was built."""\n\nGIT_SHA = {sha!r}\nGIT_DIRTY = {dirty!r}\n'
    target.write_text(text, encoding="utf-8")


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        if not self.editable_mode:  # an editable install reads git itself
            write_build_info(Path(self.build_lib))


class Sdist(sdist):
    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        write_build_info(Path(base_dir))


setup(
    packages=[
        *find_namespace_packages(include=["bench", "bench.*"], exclude=["*.__pycache__"]),
        SCENARIOS_PACKAGE,
        HOST_OPS_PACKAGE,
    ],
    package_dir={SCENARIOS_PACKAGE: "scenarios", HOST_OPS_PACKAGE: "docker/cpu"},
    cmdclass={"build_py": BuildPy, "sdist": Sdist},
)
