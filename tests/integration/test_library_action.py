"""The library action's script for real on the CPU: a git repository of TRL (this venv's TRL source with a
setuptools pyproject) whose head commit bumps its version, A/B'd over one cell, one pair. Each side is built from its
worktree into an overlay venv, its cells train with it (env.json says which TRL), and the script writes the PR
comment and github-action-benchmark JSON. Posting the comment is the action's github-script step: here the comment
file stands for it."""

import json
import shutil
import subprocess
from importlib import util
from pathlib import Path

import pytest

from bench.paths import PROJECT_ROOT
from bench.report.compare import MARKER
from bench.results.env import read_env

pytestmark = pytest.mark.integration
CELL = "sft-full-none-single"
ACTION = PROJECT_ROOT / ".github" / "actions" / "dpo-bench" / "library_ab.py"
PYPROJECT = """[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"
[project]
name = "trl"
version = "{version}"
[tool.setuptools.packages.find]
include = ["trl*"]
[tool.setuptools.package-data]
"*" = ["*.*"]
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def trl_repo(tmp_path_factory) -> Path:
    """TRL's source as this venv has it, committed as 1.16.0, then as 1.16.1.dev0 (tagged base and head)."""
    repo = tmp_path_factory.mktemp("trl-checkout")
    source = Path(util.find_spec("trl").origin).parent
    shutil.copytree(source, repo / "trl", ignore=shutil.ignore_patterns("__pycache__"))
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    for tag, version in (("base", "1.16.0"), ("head", "1.16.1.dev0")):
        (repo / "pyproject.toml").write_text(PYPROJECT.format(version=version))
        git(repo, "add", ".")
        git(repo, "commit", "-q", "-m", version)
        git(repo, "tag", tag)
    return repo


def test_the_script_ab_tests_a_library_pr_and_writes_the_comment_and_benchmark_json(trl_repo, tmp_path, monkeypatch):
    outputs = tmp_path / "github_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(outputs))
    argv = ["python3", str(ACTION), "--package", "trl", "--base", "base", "--head", "head", "--repo", str(trl_repo)]
    argv += ["--filter", CELL, "--method", "sft", "--pairs", "1", "--out", str(tmp_path / "out")]
    argv += ["--python", str(PROJECT_ROOT / ".venv" / "bin" / "python")]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    values = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    comment = Path(values["comment"]).read_text()
    assert comment.startswith(MARKER)
    assert "`trl 1.16.1.dev0 (head-worktree)` (head) vs `trl 1.16.0 (base-worktree)` (base)" in comment
    assert "No cell changed status." in comment and "not comparable" not in comment
    assert "dpo-bench library A/B of `trl`: base `base` (" in comment and f"cells `{CELL}`" in comment
    throughput = json.loads(Path(values["throughput-json"]).read_text())
    assert [e["name"] for e in throughput] == [f"cpu/{CELL} throughput"] and throughput[0]["value"] > 0
    memory = json.loads(Path(values["memory-json"]).read_text())
    assert memory[0]["unit"] == "MiB" and memory[0]["value"] > 0
    for side, version in (("base", "1.16.0"), ("head", "1.16.1.dev0")):
        env = read_env(Path(values["ab-dir"]) / side / "cpu" / f"{side}-worktree")
        assert env.packages["trl"] == version and env.installed_from.startswith("overlay trl="), side
    assert git(trl_repo, "worktree", "list").count("\n") == 0
