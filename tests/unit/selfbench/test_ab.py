"""Interleaved A/B (bench/selfbench/ab.py): the pair schedule, the command lines, worktrees removed whatever
happens, and a
whole compare-ab with a fake runner in a throwaway git repository."""

import argparse
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cli import parser
from bench.errors import BenchError
from bench.paths import PROJECT_ROOT
from bench.report.compare import MARKER
from bench.results.env_schema import EnvFingerprint
from bench.results.schema import Status
from bench.results.store import append_result
from bench.selfbench import ab
from bench.selfbench.overlay import Overlay, parse_package
from tests.unit.report.test_compare import rec

CELL = "one_adapter-none-single"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def new_repo(root: Path) -> Path:
    """An empty git repository at `root`, with a committer."""
    root.mkdir()
    git(root, "init", "-q")
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "t")
    return root


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with two commits, tagged v1 and v2."""
    root = new_repo(tmp_path / "repo")
    for version in ("v1", "v2"):
        (root / "VERSION").write_text(version)
        git(root, "add", "VERSION")
        git(root, "commit", "-q", "-m", version)
        git(root, "tag", version)
    return root


def worktrees(repo: Path) -> list[str]:
    return [line for line in git(repo, "worktree", "list", "--porcelain").splitlines() if line.startswith("worktree ")]


def side(label: str, root: Path, results: Path, **env: str) -> ab.Side:
    return ab.Side(label, "ref", "a" * 40, root, results / label, f"{label}-x", env)


# ---------------------------------------------------------------- schedule and command lines


def test_pairs_alternate_abba_so_each_side_runs_first_in_half_of_them():
    order = ab.schedule(4)
    assert order == [
        (1, "base"),
        (1, "head"),
        (2, "head"),
        (2, "base"),
        (3, "base"),
        (3, "head"),
        (4, "head"),
        (4, "base"),
    ]
    firsts = [order[2 * i][1] for i in range(4)]
    assert firsts.count("base") == firsts.count("head") == 2
    assert ab.schedule(1) == [(1, "base"), (1, "head")]


def test_each_run_resumes_its_side_and_records_trial_i(tmp_path):
    s = side("base", tmp_path / "wt", tmp_path / "ab")
    argv = ab.run_argv(s, 3, "cpu", CELL, python="/venv/bin/python")
    assert argv == [
        "/venv/bin/python",
        "-m",
        "bench",
        "--results",
        str(tmp_path / "ab" / "base"),
        "run",
        "--hw",
        "cpu",
        "--filter",
        CELL,
        "--run-id",
        "base-x",
        "--repeats",
        "3",
        "--executor",
        "local",
    ]
    assert "--filter" not in ab.run_argv(s, 1, "cpu", None)
    assert s.run_dir("cpu") == tmp_path / "ab" / "base" / "cpu" / "base-x"


def test_a_sides_code_comes_first_on_pythonpath_and_its_env_is_added(tmp_path):
    s = side("head", tmp_path / "wt", tmp_path, BENCH_FAULT="slow_step")
    env = ab.side_env(s, {"PATH": "/bin", "PYTHONPATH": "/elsewhere"})
    assert env["PYTHONPATH"].split(":") == [str(tmp_path / "wt"), "/elsewhere"]
    assert env["BENCH_FAULT"] == "slow_step" and env["PATH"] == "/bin"
    assert ab.side_env(s, {})["PYTHONPATH"] == str(tmp_path / "wt")


class FakeRunner:
    """Records each call; writes the trial that `--repeats i` would record (i - 1) into the side's run."""

    def __init__(self, codes: dict[int, int] | None = None, tokens: dict[str, float] | None = None) -> None:
        self.calls: list[tuple[list[str], Path, dict[str, str]]] = []
        self.codes = codes or {}
        self.tokens = tokens or {"base": 1000.0, "head": 1000.0}

    def __call__(self, argv, cwd, env) -> int:
        self.calls.append((list(argv), Path(cwd), dict(env)))
        code = self.codes.get(len(self.calls), 0)
        if code == 0:
            results = Path(argv[argv.index("--results") + 1])
            run_id, trial = argv[argv.index("--run-id") + 1], int(argv[argv.index("--repeats") + 1]) - 1
            run_dir = results / argv[argv.index("--hw") + 1] / run_id
            run_dir.mkdir(parents=True, exist_ok=True)
            label = results.name
            append_result(run_dir, rec(CELL, tokens=self.tokens[label] + trial, trial=trial, run_id=run_id))
        return code


def test_run_pairs_runs_the_schedule_with_trial_i_in_pair_i(tmp_path):
    base, head = side("base", tmp_path / "b", tmp_path), side("head", tmp_path / "h", tmp_path)
    runner = FakeRunner()
    done = ab.run_pairs(base, head, 2, "cpu", CELL, runner, python="py", out=open(tmp_path / "log", "w"))  # noqa: SIM115
    assert [(t, s) for t, s, _ in done] == ab.schedule(2)
    repeats = [argv[argv.index("--repeats") + 1] for argv, _, _ in runner.calls]
    assert repeats == ["1", "1", "2", "2"]
    assert [cwd.name for _, cwd, _ in runner.calls] == ["b", "h", "h", "b"]


def test_a_failing_or_interrupted_side_stops_the_ab(tmp_path):
    base, head = side("base", tmp_path / "b", tmp_path), side("head", tmp_path / "h", tmp_path)
    log = io.StringIO()
    with pytest.raises(BenchError, match=r"pair 1/2: head \(ref\).*exited 2"):
        ab.run_pairs(base, head, 2, "cpu", CELL, FakeRunner({2: 2}), out=log)
    with pytest.raises(KeyboardInterrupt):
        ab.run_pairs(base, head, 2, "cpu", CELL, FakeRunner({3: ab.INTERRUPTED}), out=log)


# ---------------------------------------------------------------- worktrees


def test_worktrees_are_made_per_commit_and_removed_on_exit(repo):
    v1, v2 = ab.resolve(repo, "v1"), ab.resolve(repo, "v2")
    with ab.checkouts(repo, [v1, v2, v2, None]) as roots:
        assert (roots[v1] / "VERSION").read_text() == "v1" and (roots[v2] / "VERSION").read_text() == "v2"
        assert roots[None] == repo and len(worktrees(repo)) == 3  # the same commit twice: one worktree
        made = [roots[v1], roots[v2]]
    assert len(worktrees(repo)) == 1 and not any(p.exists() for p in made)


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()])
def test_worktrees_are_removed_on_an_error_and_on_ctrl_c(repo, error):
    with pytest.raises(type(error)), ab.checkouts(repo, [ab.resolve(repo, "v1")]) as roots:
        made = next(p for sha, p in roots.items() if sha)
        (made / "untracked.txt").write_text("left behind by a run")  # --force removes a dirty worktree too
        raise error
    assert len(worktrees(repo)) == 1 and not made.exists()


def test_worktrees_share_the_workload_assets(repo, tmp_path):
    assets = tmp_path / "assets"
    with ab.checkouts(repo, [ab.resolve(repo, "v1")], assets) as roots:
        link = next(p for sha, p in roots.items() if sha) / "build" / "assets"
        assert link.is_symlink() and link.resolve() == assets.resolve()
    assert assets.is_dir()  # the shared folder itself stays


def test_unknown_refs_are_one_line_errors(repo):
    with pytest.raises(BenchError, match="'nope' is not a commit"):
        ab.resolve(repo, "nope")
    assert ab.resolve(repo, ab.WORKING_TREE) is None


def test_an_empty_filter_is_refused_before_anything_is_checked_out(repo, tmp_path):
    def runner(*args, **kwargs):
        raise AssertionError("no side may run")

    with pytest.raises(BenchError, match=r"--filter '' names no cell pattern"):
        ab.run_ab("v1", "v2", 2, "cpu", "", tmp_path / "ab", repo=repo, runner=runner)
    assert not (tmp_path / "ab").exists()


# ---------------------------------------------------------------- a whole A/B


def test_run_ab_checks_out_both_refs_runs_the_pairs_and_compares(repo, tmp_path):
    out_dir = tmp_path / "ab"
    runner = FakeRunner(tokens={"base": 1000.0, "head": 700.0})
    log = io.StringIO()
    base, head = ab.run_ab("v1", "v2", 4, "cpu", CELL, out_dir, repo=repo, runner=runner, out=log)
    roots = {cwd for _, cwd, _ in runner.calls}
    assert len(roots) == 2 and not any(r.exists() for r in roots)  # two worktrees, both gone
    assert len(worktrees(repo)) == 1
    assert base.run_id == f"base-{ab.resolve(repo, 'v1')[:12]}" and head.run_dir("cpu").is_dir()
    assert (out_dir / "ab.json").is_file()
    markdown, data, failed = ab.compare_runs(base, head, "cpu", out_dir, 0.05, "status,throughput")
    assert markdown.startswith(MARKER) and (out_dir / "compare.md").read_text() == markdown
    assert data["regressions"]["throughput"] == [CELL] and failed == ["throughput"]


def test_run_ab_removes_the_worktrees_when_a_side_fails(repo, tmp_path):
    runner = FakeRunner({3: 1})
    log = io.StringIO()
    with pytest.raises(BenchError, match="exited 1"):
        ab.run_ab("v1", "v2", 4, "cpu", CELL, tmp_path / "ab", repo=repo, runner=runner, out=log)
    assert len(worktrees(repo)) == 1 and not any(cwd.exists() for _, cwd, _ in runner.calls)


def test_the_working_tree_runs_in_place(repo, tmp_path):
    runner = FakeRunner()
    log = io.StringIO()
    base, head = ab.run_ab("v1", ".", 1, "cpu", CELL, tmp_path / "ab", repo=repo, runner=runner, out=log)
    assert head.root == repo and head.run_id == "head-worktree" and base.root != repo


def test_cli_and_make_target():
    args = parser().parse_args(["compare-ab", "--base", "main"])
    assert (args.base, args.head, args.pairs, args.hw, args.filter) == ("main", None, 4, "cpu", None)
    assert ab.default_refs(args.base, args.head, False) == ("main", "HEAD")
    with pytest.raises(SystemExit):
        parser().parse_args(["compare-ab", "--base", "main", "--pairs", "0"])
    makefile = (PROJECT_ROOT / "Makefile").read_text(encoding="utf-8")
    assert "compare-ab: setup" in makefile and "-m bench compare-ab $(if $(BASE),--base '$(BASE)')" in makefile
    assert "$(foreach p,$(BASE_WITH),--base-with '$(p)')" in makefile
    assert "$(if $(HEAD),--head '$(HEAD)')" in makefile and "$(if $(PAIRS),--pairs $(PAIRS))" in makefile
    phony = next(line for line in makefile.splitlines() if line.startswith(".PHONY"))
    assert " compare-ab " in phony and " perf-matrix " in phony


def test_compare_ab_help_runs_without_importing_torch():
    code = "import sys; from bench.cli import parser; parser(); print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PROJECT_ROOT, check=True)
    assert done.stdout.strip() == "False"


# ---------------------------------------------------------------- the noise experiment (bench/selfbench/ab_noise.py)


class FaultAwareRunner(FakeRunner):
    """A side with BENCH_FAULT=slow_step gets its step time stretched by the delay (wall and CPU alike)."""

    def __call__(self, argv, cwd, env) -> int:
        self.calls.append((list(argv), Path(cwd), dict(env)))
        results = Path(argv[argv.index("--results") + 1])
        run_id, trial = argv[argv.index("--run-id") + 1], int(argv[argv.index("--repeats") + 1]) - 1
        run_dir = results / "cpu" / run_id
        run_dir.mkdir(parents=True, exist_ok=True)
        step = 0.05 + (float(env["BENCH_FAULT_DELAY_MS"]) / 1000 if env.get("BENCH_FAULT") == "slow_step" else 0)
        jitter = (trial % 3) * 0.0002
        cells = argv[argv.index("--filter") + 1].split(",")
        for cell in cells:
            record = rec(cell, tokens=50 / (step + jitter), trial=trial, run_id=run_id)
            update = {"step_time_median_s": step + jitter, "cpu_s_per_step_median": step * 0.9 + jitter}
            append_result(run_dir, record.model_copy(update={"metrics": record.metrics.model_copy(update=update)}))
        return 0


def test_noise_experiment_counts_false_verdicts_and_finds_the_smallest_detected_slowdown(tmp_path, monkeypatch):
    from bench.selfbench import ab_noise

    summary = tmp_path / "SUMMARY.md"
    argv = ["--pairs", "4", "--filter", CELL, "--slowdowns", "2,10,40", "--out", str(tmp_path / "runs")]
    parser = argparse.ArgumentParser()
    ab_noise.arguments(parser)
    args = parser.parse_args([*argv, "--summary", str(summary)])
    args.argv = argv
    runner = FaultAwareRunner()
    monkeypatch.setattr(ab, "run_process", runner)
    markdown, data = ab_noise.run_experiment(args, runner=runner)
    assert len(runner.calls) == 2 * 4 * (1 + 3)  # A/A, then three slowdowns of one cell
    faulted = [env for _, _, env in runner.calls if env.get("BENCH_FAULT") == "slow_step"]
    delays = sorted({float(e["BENCH_FAULT_DELAY_MS"]) for e in faulted})
    assert len(faulted) == 4 * 3 and delays == pytest.approx([50.1 * p / 100 for p in (2, 10, 40)])  # of the A/A step
    heads = [env for argv, _, env in runner.calls if "/head/" in argv[argv.index("--results") + 1] + "/"]
    assert all(env.get("BENCH_FAULT", "") in ("", "slow_step") for env in heads)
    assert "**0 false verdicts** of 3 judged" in markdown
    # 2 % stays under the 5 % threshold; 10 % is caught on all 4 pairs and in the one 4-pair subset
    assert ab_noise.smallest_reliable(
        [e | {"rows": [ab_noise.Judged(**r) for r in e["rows"]]} for e in data["slowdowns"]], "tokens/s"
    ) == {CELL: 10.0}
    assert f"- tokens/s: `{CELL}`: 10 %" in markdown and f"- CPU s/step: `{CELL}`: 10 %" in markdown
    assert "Smoke run" not in markdown


def test_noise_experiment_subsets_keep_pairs_together_and_are_bounded():
    from bench.selfbench import ab_noise

    assert ab_noise.subsets([1, 2, 3], 4) == []
    assert len(ab_noise.subsets(list(range(10)), 4)) == 210
    drawn = ab_noise.subsets(list(range(30)), 4, limit=100)
    assert len(drawn) == 100 and all(len(set(s)) == 4 for s in drawn)
    row = ab_noise.judge(CELL, "tokens/s", {1: 100.0, 2: 101.0}, {1: 80.0, 2: 81.0}, 0.05, 4)
    assert row is not None and row.verdict == "no_verdict" and row.subsets == 0 and row.regression is None


def test_ctrl_c_gives_the_running_side_its_own_sigint_and_waits_for_it(tmp_path):
    """A SIGINT that reaches only compare-ab (not the terminal's whole group) is passed on to the side's `bench run`,
    which then stops its cell and records what finished; compare-ab waits for it before going on."""
    import signal
    import time

    marker = tmp_path / "child-stopped"
    child = (
        "import signal, sys, time\n"
        f"def stop(*_):\n    open({str(marker)!r}, 'w').write('sigint'); sys.exit(130)\n"
        "signal.signal(signal.SIGINT, stop)\nprint('ready', flush=True)\ntime.sleep(60)\n"
    )
    parent = (
        "import sys\nfrom pathlib import Path\nfrom bench.selfbench.ab import run_process\n"
        f"try:\n    run_process([sys.executable, '-c', {child!r}], Path('.'), dict(__import__('os').environ))\n"
        "except KeyboardInterrupt:\n    print('interrupted', flush=True); sys.exit(130)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", parent], cwd=PROJECT_ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert process.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    process.send_signal(signal.SIGINT)  # the parent only, as `kill -INT` would
    out, _ = process.communicate(timeout=30)
    assert process.returncode == 130 and "interrupted" in out
    assert marker.read_text() == "sigint"


# ---------------------------------------------------------------- sides defined by packages (overlay venvs)


def fake_overlay(tmp_path: Path, version: str) -> Overlay:
    spec = parse_package(f"trl=={version}", "--base-with")
    return Overlay(tmp_path / f"overlay-{version}", (spec,), {"trl": version})


def test_a_side_with_packages_runs_on_its_overlays_interpreter(tmp_path):
    s = ab.Side("base", ".", None, tmp_path, tmp_path / "base", "base-worktree", overlay=fake_overlay(tmp_path, "1.0"))
    argv = ab.run_argv(s, 1, "cpu", CELL, python="/venv/bin/python", method="all")
    assert argv[0] == str(tmp_path / "overlay-1.0" / "bin" / "python")
    assert argv[argv.index("--method") + 1] == "all" and s.packages == ["trl==1.0"]


def test_without_a_base_ref_both_sides_run_this_checkout_and_only_their_packages_differ(repo, tmp_path, monkeypatch):
    made = {}
    monkeypatch.setattr(
        ab, "overlay_for", lambda specs, say: made.setdefault(specs[0].text, fake_overlay(tmp_path, specs[0].text[5:]))
    )
    assert ab.default_refs(None, None, True) == (".", ".")
    with pytest.raises(BenchError, match=r"give --base REF .* or --base-with/--head-with"):
        ab.default_refs(None, None, False)
    runner = FakeRunner(tokens={"base": 1000.0, "head": 1000.0})
    packages = {
        "base": (parse_package("trl==1.0", "--base-with"),),
        "head": (parse_package("trl==2.0", "--head-with"),),
    }
    base, _head = ab.run_ab(
        ".",
        ".",
        2,
        "cpu",
        CELL,
        tmp_path / "ab",
        repo=repo,
        runner=runner,
        out=io.StringIO(),
        packages=packages,
        method="all",
    )
    assert [argv[0] for argv, _, _ in runner.calls] == [
        str(tmp_path / f"overlay-{v}" / "bin" / "python") for v in ("1.0", "2.0", "2.0", "1.0")
    ]
    assert {cwd for _, cwd, _ in runner.calls} == {repo}
    assert base.root == repo and base.run_id == "base-worktree"
    manifest = json.loads((tmp_path / "ab" / "ab.json").read_text())
    assert manifest["sides"]["head"]["packages"] == ["trl==2.0"] and manifest["sides"]["base"]["versions"] == {
        "trl": "1.0"
    }
    assert manifest["method"] == "all"


def test_the_report_is_titled_by_the_versions_compared_and_their_difference_is_no_warning(tmp_path):
    base = ab.Side(
        "base", ".", None, tmp_path, tmp_path / "base", "base-worktree", overlay=fake_overlay(tmp_path, "1.0")
    )
    head = ab.Side(
        "head", ".", None, tmp_path, tmp_path / "head", "head-worktree", overlay=fake_overlay(tmp_path, "2.0")
    )
    envs = {
        side: EnvFingerprint(hardware_profile="cpu", lock_hash="l", packages={"trl": v, "peft": p})
        for side, v, p in (("base", "1.0", "0.1"), ("head", "2.0", "0.2"))
    }
    for side in (base, head):
        run_dir = side.run_dir("cpu")
        run_dir.mkdir(parents=True)
        (run_dir / "env.json").write_text(envs[side.label].model_dump_json())
        for trial in range(4):
            append_result(run_dir, rec(CELL, status=Status.OK if side.label == "base" else Status.ERROR, trial=trial))
    markdown, data, failed = ab.compare_runs(base, head, "cpu", tmp_path, 0.05, "status")
    assert "## DPO bench: `trl 2.0 (head-worktree)` (head) vs `trl 1.0 (base-worktree)` (base)" in markdown
    assert data["not_comparable"] == ["package peft: 0.1 → 0.2"]  # a package the sides were not meant to differ by
    assert failed == ["status"] and markdown.index("### Status changes") < markdown.index("Throughput")


def test_the_library_flags_parse_several_packages_per_side():
    args = parser().parse_args(
        ["compare-ab", "--base-with", "trl==1.15.0", "peft==0.17.0", "--head-with", "trl=/x", "--method", "all"]
    )
    assert (args.base, args.head, args.base_with, args.head_with) == (
        None,
        None,
        ["trl==1.15.0", "peft==0.17.0"],
        ["trl=/x"],
    )
    assert args.method == "all" and args.include_overlapped is False


def test_package_sides_run_in_local_overlay_venvs_only(capsys):
    from bench.cli import main

    code = main(["compare-ab", "--base-with", "trl==1.15.0", "--executor", "docker"])
    assert code == 2 and "--executor local, not docker" in capsys.readouterr().err
