"""The library action (.github/actions/dpo-bench): its inputs and steps, and its script's sides, command line and
failure comment. tests/integration/test_library_action.py runs the script for real."""

import importlib.util
from pathlib import Path

import pytest
import yaml

from bench.paths import PROJECT_ROOT
from bench.report.compare import MARKER
from tests.unit.selfbench.test_ab import git, new_repo

ACTION = PROJECT_ROOT / ".github" / "actions" / "dpo-bench"


def load_script():
    spec = importlib.util.spec_from_file_location("library_ab", ACTION / "library_ab.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


library_ab = load_script()


@pytest.fixture
def library(tmp_path: Path) -> Path:
    repo = new_repo(tmp_path / "lib")
    (repo / "pyproject.toml").write_text("[project]\nname = 'trl'\nversion = '1.0'\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "v1")
    return repo


def test_the_action_takes_the_package_refs_filter_and_profile_and_runs_the_script_then_posts():
    action = yaml.safe_load((ACTION / "action.yml").read_text())
    assert {"package", "base", "head", "filter", "profile"} <= set(action["inputs"])
    assert action["inputs"]["package"]["required"] is True and action["runs"]["using"] == "composite"
    steps = action["runs"]["steps"]
    ab = next(s for s in steps if s.get("id") == "ab")
    assert "library_ab.py" in ab["run"] and '--package "$INPUT_PACKAGE"' in ab["run"]
    post = next(s for s in steps if s.get("uses", "").startswith("actions/github-script"))
    assert MARKER in post["with"]["script"] and "updateComment" in post["with"]["script"]
    assert {"comment", "throughput-json", "memory-json", "exit-code"} <= set(action["outputs"])
    assert library_ab.MARKER == MARKER and library_ab.BENCH_ROOT == PROJECT_ROOT


def test_a_side_is_a_worktree_of_a_ref_or_a_released_version(library, tmp_path):
    spec, name = library_ab.side_spec("trl", "==1.15.0", library, tmp_path / "wt", "base")
    assert (spec, name) == ("trl==1.15.0", "trl==1.15.0")
    spec, name = library_ab.side_spec("trl", "HEAD", library, tmp_path / "wt", "head")
    sha = git(library, "rev-parse", "HEAD")
    assert spec == f"trl={tmp_path / 'wt' / 'head'}" and name == f"`HEAD` ({sha[:12]})"
    assert (tmp_path / "wt" / "head" / "pyproject.toml").is_file()
    with pytest.raises(RuntimeError, match=r"'nope' is not a commit of .*fetch-depth: 0"):
        library_ab.side_spec("trl", "nope", library, tmp_path / "wt", "base")


def test_the_ab_is_compare_ab_of_the_two_sides_with_the_inputs():
    args = library_ab.parse(["--package", "trl", "--base", "a", "--head", "b", "--filter", "x-*", "--pairs", "2"])
    argv = library_ab.compare_ab_argv(args, "/py", {"base": "trl==1", "head": "trl=/wt/head"}, Path("/o"))
    assert argv[:4] == ["/py", "-m", "bench", "compare-ab"]
    pairs = dict(zip(argv[4::2], argv[5::2], strict=False))
    assert pairs["--base-with"] == "trl==1" and pairs["--head-with"] == "trl=/wt/head" and pairs["--filter"] == "x-*"
    assert (pairs["--pairs"], pairs["--hw"], pairs["--method"], pairs["--fail-on"]) == ("2", "cpu", "dpo", "status")
    assert (pairs["--out"], pairs["--output"], pairs["--json"]) == ("/o/ab", "/o/comment.md", "/o/compare.json")


def test_an_ab_that_cannot_start_is_a_comment_saying_why_and_exit_2(library, tmp_path, monkeypatch):
    outputs = tmp_path / "github_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(outputs))
    argv = ["--package", "trl", "--base", "no-such-ref", "--head", "HEAD", "--repo", str(library)]
    assert library_ab.main([*argv, "--out", str(tmp_path / "out")]) == 2
    comment = (tmp_path / "out" / "comment.md").read_text()
    assert comment.startswith(MARKER) and "The A/B of `trl` did not finish" in comment and "'no-such-ref'" in comment
    values = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    assert values["exit-code"] == "2" and values["comment"] == str(tmp_path / "out" / "comment.md")
    assert "throughput-json" not in values
    assert git(library, "worktree", "list").count("\n") == 0  # no worktree left behind
