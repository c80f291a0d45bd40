"""The committed runs apart from a user's own (bench/results/tracked.py): what the derived files and their tests read."""

import subprocess

import pytest

from bench.errors import BenchError
from bench.results.tracked import tracked_files, tracked_results


def git(root, *args):
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True, capture_output=True
    )


@pytest.fixture
def checkout(tmp_path):
    root = tmp_path / "clone"
    for name in ("results/cpu/committed/results.jsonl", "results/cpu/committed/env.json", "results/README.md"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(name)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "runs")
    return root


def test_a_run_the_user_made_is_not_in_the_view(checkout):
    (checkout / "results/cpu/mine").mkdir()
    (checkout / "results/cpu/mine/results.jsonl").write_text("{}\n")
    (checkout / "results/cpu/staged").mkdir()
    (checkout / "results/cpu/staged/results.jsonl").write_text("{}\n")
    git(checkout, "add", "results/cpu/staged/results.jsonl")
    (checkout / "results/README.md").unlink()  # tracked, deleted in the checkout
    view = tracked_results(checkout)
    assert view.name == "results"
    found = sorted(str(p.relative_to(view)) for p in view.rglob("*") if p.is_file())
    assert found == ["cpu/committed/env.json", "cpu/committed/results.jsonl", "cpu/staged/results.jsonl"]
    assert (view / "cpu/committed/results.jsonl").read_text() == "results/cpu/committed/results.jsonl"
    assert tracked_results(checkout) is view  # built once per process


def test_without_git_it_says_so(tmp_path):
    with pytest.raises(BenchError, match="not a git checkout"):
        tracked_files(tmp_path)


def test_an_ignored_copy_inside_the_checkout_has_the_checkouts_committed_runs(checkout):
    """mutmut's working copy: mutants/ in the checkout, ignored by git, with the project's results/ copied into it."""
    (checkout / ".gitignore").write_text("/mutants/\n")
    copy = checkout / "mutants"
    for name in ("results/cpu/committed/results.jsonl", "results/cpu/mine/results.jsonl"):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_text(f"copy of {name}")
    assert tracked_files(copy) == tracked_files(checkout)
    view = tracked_results(copy)
    found = sorted(str(p.relative_to(view)) for p in view.rglob("*") if p.is_file())
    assert found == ["cpu/committed/results.jsonl"]
    assert (view / "cpu/committed/results.jsonl").read_text() == "copy of results/cpu/committed/results.jsonl"
