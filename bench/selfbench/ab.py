"""Interleaved A/B: two git refs, or two sets of library versions, measured alternately in one invocation, so that
drift on the machine (another job, thermal or frequency changes, a noisy neighbour) hits both sides alike.

    python -m bench compare-ab --base REF [--head REF] [--filter GLOBS] [--pairs N] [--hw cpu]
    python -m bench compare-ab --base-with trl==1.15.0 --head-with trl=/path/to/trl [--filter GLOBS] ...

Each ref runs its own code from a detached worktree with this interpreter; `--base-with`/`--head-with` give a side
an overlay venv of its own packages (overlay.py). Pair i runs trial i of each side, in ABBA order so that a linear
drift cancels over every two pairs (use an even number). The runs are then compared as `compare` does, into
`results/ab/<timestamp>/`, and the exit code is compare's. Worktrees are removed on exit, error or Ctrl-C."""

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench.errors import BenchError
from bench.matrix.scenario import filter_patterns
from bench.paths import BUILD_DIR, PROJECT_ROOT
from bench.selfbench.overlay import Overlay, PackageSpec, overlay_for, parse_packages

WORKING_TREE = "."
"""A ref that means the current checkout as it is (no worktree; uncommitted changes included)."""
INTERRUPTED = 130
SIDES = ("base", "head")

Runner = Callable[[Sequence[str], Path, Mapping[str, str]], int]
"""Runs argv in a working directory with an environment; returns the exit code."""


@dataclass(frozen=True)
class Side:
    label: str
    """base or head."""
    ref: str
    """As given: a git ref, or WORKING_TREE."""
    sha: str | None
    """The commit it resolved to; None for the working tree."""
    root: Path
    """The checkout whose code runs."""
    results: Path
    """--results of this side's `python -m bench run`: the run is results/<hw>/<run_id>."""
    run_id: str
    env: Mapping[str, str] = field(default_factory=dict)
    """Added to this side's environment (the noise experiment injects its fault here)."""
    overlay: Overlay | None = None
    """The side's own packages: its runs use the overlay's interpreter; None: this interpreter's packages."""

    def run_dir(self, hw: str) -> Path:
        return self.results / hw / self.run_id

    @property
    def packages(self) -> list[str]:
        """`--base-with`/`--head-with` as given."""
        return [] if self.overlay is None else [s.text for s in self.overlay.packages]


def schedule(pairs: int) -> list[tuple[int, str]]:
    """(trial, side) in running order, trial 1-based: pair i runs base then head when i is odd, head then base when
    it is even (A B B A A B ...)."""
    order = []
    for trial in range(1, pairs + 1):
        order += [(trial, s) for s in (SIDES if trial % 2 else SIDES[::-1])]
    return order


def run_argv(
    side: Side,
    trial: int,
    hw: str,
    cell_filter: str | None,
    python: str = sys.executable,
    executor: str = "local",
    method: str | None = None,
) -> list[str]:
    """The command that records trial `trial` (1-based) of every selected cell in `side`'s run, run by the side's
    overlay interpreter where it has one (the executor, the fork server and the launchers take the interpreter that
    runs `bench run`), else by `python`."""
    interpreter = side.overlay.python if side.overlay is not None else python
    argv = [interpreter, "-m", "bench", "--results", str(side.results), "run", "--hw", hw]
    if method:
        argv += ["--method", method]
    if cell_filter:
        argv += ["--filter", cell_filter]
    return [*argv, "--run-id", side.run_id, "--repeats", str(trial), "--executor", executor]


def side_env(side: Side, base: Mapping[str, str]) -> dict[str, str]:
    """`base` with the side's checkout first on PYTHONPATH (the launcher's ranks import its `bench` too) and the
    side's own additions."""
    path = [str(side.root), *([base["PYTHONPATH"]] if base.get("PYTHONPATH") else [])]
    return dict(base) | {"PYTHONPATH": os.pathsep.join(path)} | dict(side.env)


def run_process(argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> int:
    """Run one side's `python -m bench run`, its output passing through. On Ctrl-C it is given the time to stop its
    cell and record what finished (it gets the terminal's SIGINT itself; a SIGINT is sent when it did not), then
    the KeyboardInterrupt goes on."""
    process = subprocess.Popen(list(argv), cwd=cwd, env=dict(env))
    try:
        return process.wait()
    except KeyboardInterrupt:
        try:
            process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        raise


def run_pairs(
    base: Side,
    head: Side,
    pairs: int,
    hw: str,
    cell_filter: str | None,
    runner: Runner = run_process,
    python: str = sys.executable,
    executor: str = "local",
    out=sys.stdout,
    method: str | None = None,
) -> list[tuple[int, str, int]]:
    """Run the schedule; returns (trial, side, exit code) per step. A side whose run fails stops the A/B with a
    BenchError; an interrupted one (exit 130) raises KeyboardInterrupt."""
    sides = {"base": base, "head": head}
    done = []
    for step, (trial, label) in enumerate(schedule(pairs), start=1):
        side = sides[label]
        what = f"pair {trial}/{pairs}: {label} ({side.ref})"
        print(f"\n=== compare-ab [{step}/{2 * pairs}] {what}", file=out, flush=True)
        argv = run_argv(side, trial, hw, cell_filter, python, executor, method)
        code = runner(argv, side.root, side_env(side, os.environ))
        done.append((trial, label, code))
        if code == INTERRUPTED:
            raise KeyboardInterrupt
        if code != 0:
            raise BenchError(f"compare-ab: {what}: `python -m bench run` exited {code}; see its output above")
    return done


# ---------------------------------------------------------------- git worktrees


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        message = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise BenchError(f"git {' '.join(args)}: {message}")
    return done.stdout.strip()


def resolve(repo: Path, ref: str) -> str | None:
    """The commit `ref` names (None for WORKING_TREE); one-line BenchError when it names none."""
    if ref == WORKING_TREE:
        return None
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except BenchError:
        raise BenchError(f"compare-ab: {ref!r} is not a commit of {repo} (fetch it first?)") from None


@contextmanager
def checkouts(repo: Path, shas: Sequence[str | None], assets: Path | None = None) -> Iterator[dict[str | None, Path]]:
    """sha -> a detached worktree of it under a temporary folder (None -> `repo` itself), removed again on exit,
    whatever the exit. Each worktree's build/assets links to `assets` (the workload assets are deterministic and
    named by their workload's fingerprint, so both sides share them instead of building them twice)."""
    made: list[Path] = []
    tmp = Path(tempfile.mkdtemp(prefix="dpo-bench-ab-"))
    roots: dict[str | None, Path] = {None: repo}
    try:
        for sha in dict.fromkeys(s for s in shas if s is not None):
            path = tmp / sha[:12]
            git(repo, "worktree", "add", "--detach", str(path), sha)
            made.append(path)
            roots[sha] = path
            if assets is not None:
                assets.mkdir(parents=True, exist_ok=True)
                (path / "build").mkdir(exist_ok=True)
                (path / "build" / "assets").symlink_to(assets.resolve(), target_is_directory=True)
        yield roots
    finally:
        remove_worktrees(repo, made)
        shutil.rmtree(tmp, ignore_errors=True)


def remove_worktrees(repo: Path, paths: Sequence[Path]) -> None:
    """`git worktree remove --force` each; a folder git will not remove is deleted and pruned. Never raises."""
    for path in paths:
        try:
            git(repo, "worktree", "remove", "--force", str(path))
        except BenchError:
            shutil.rmtree(path, ignore_errors=True)
    if paths:
        with suppress(BenchError):
            git(repo, "worktree", "prune")


# ---------------------------------------------------------------- the command


def make_sides(
    base_ref: str,
    head_ref: str,
    shas: Mapping[str, str | None],
    roots: Mapping[str | None, Path],
    out_dir: Path,
    envs: Mapping[str, Mapping[str, str]] | None = None,
    overlays: Mapping[str, Overlay | None] | None = None,
) -> tuple[Side, Side]:
    """The two sides: run ids `base-<sha>` / `head-<sha>` (`head-worktree` for the working tree)."""
    sides = []
    for label, ref in zip(SIDES, (base_ref, head_ref), strict=True):
        sha = shas[label]
        run_id = f"{label}-{sha[:12] if sha else 'worktree'}"
        env = dict((envs or {}).get(label, {}))
        overlay = (overlays or {}).get(label)
        sides.append(Side(label, ref, sha, roots[sha], out_dir / label, run_id, env, overlay))
    return sides[0], sides[1]


def default_refs(base: str | None, head: str | None, with_packages: bool) -> tuple[str, str]:
    """(base, head) refs: as given, the head `HEAD` by default; without a base, both the current checkout when the
    sides differ by their packages."""
    if base is not None:
        return base, head or "HEAD"
    if not with_packages:
        raise BenchError("compare-ab: give --base REF (two git refs) or --base-with/--head-with (two package sets)")
    return WORKING_TREE, head or WORKING_TREE


def side_title(side: Side, run_name: str, names: Sequence[str]) -> str:
    """`trl 1.15.0 (base-worktree)`: the versions of the packages the sides differ by, this interpreter's where the
    side has no overlay."""
    from bench.matrix.packages import installed_versions

    versions = dict(side.overlay.versions) if side.overlay is not None else {}
    missing = tuple(n for n in names if n not in versions)
    versions |= {n: v or "not installed" for n, v in installed_versions(missing).items()} if missing else {}
    return ", ".join(f"{n} {versions[n]}" for n in names) + f" ({run_name})"


def for_packages(result, base: Side, head: Side):
    """With overlays the report is titled by the versions compared, and those versions differing is what is
    compared, not a reason the runs are not comparable."""
    names = list(dict.fromkeys(s.name for side in (base, head) if side.overlay for s in side.overlay.packages))
    if not names:
        return result
    kept = [r for r in result.not_comparable if not any(r.startswith(f"package {n}:") for n in names)]
    titles = {"base": side_title(base, result.base, names), "head": side_title(head, result.head, names)}
    return replace(result, base=titles["base"], head=titles["head"], not_comparable=kept)


def compare_runs(
    base: Side, head: Side, hw: str, out_dir: Path, threshold: float, fail_on: str, include_overlapped: bool = False
) -> tuple[str, dict, list[str]]:
    """(Markdown, JSON, failing kinds) of head vs base, also written to out_dir/compare.md and compare.json."""
    from bench.report.compare import compare, failing_kinds, load_run, parse_fail_on, to_json, to_markdown
    from bench.secrets import redact

    kinds = parse_fail_on(fail_on)
    runs = load_run(base.run_dir(hw)), load_run(head.run_dir(hw))
    result = for_packages(compare(*runs, threshold, include_overlapped=include_overlapped), base, head)
    markdown, data = to_markdown(result, kinds), to_json(result, kinds)
    (out_dir / "compare.md").write_text(markdown, encoding="utf-8")
    (out_dir / "compare.json").write_text(redact(json.dumps(data, indent=2)) + "\n", encoding="utf-8")
    return markdown, data, failing_kinds(result, kinds)


def write_manifest(out_dir: Path, base: Side, head: Side, **facts: object) -> None:
    sides = {
        s.label: {"ref": s.ref, "sha": s.sha, "run_id": s.run_id, "results": str(s.results), "env": dict(s.env)}
        | _overlay_facts(s)
        for s in (base, head)
    }
    text = json.dumps({"sides": sides, "order": "ABBA (alternating per pair)", **facts}, indent=2, default=str)
    (out_dir / "ab.json").write_text(text + "\n", encoding="utf-8")


def _overlay_facts(side: Side) -> dict[str, object]:
    if side.overlay is None:
        return {}
    return {"packages": side.packages, "versions": side.overlay.versions, "overlay": str(side.overlay.prefix)}


def run_ab(
    base_ref: str,
    head_ref: str,
    pairs: int,
    hw: str,
    cell_filter: str | None,
    out_dir: Path,
    repo: Path = PROJECT_ROOT,
    envs: Mapping[str, Mapping[str, str]] | None = None,
    runner: Runner = run_process,
    executor: str = "local",
    out=sys.stdout,
    packages: Mapping[str, Sequence[PackageSpec]] | None = None,
    method: str | None = None,
) -> tuple[Side, Side]:
    """Make the sides' overlays (where `packages` gives a side some), check both refs out, run the pairs, remove
    the checkouts; returns the sides (their runs stay in out_dir)."""
    if cell_filter is not None:
        filter_patterns(cell_filter)  # an empty --filter would run every cell on both sides
    shas = {"base": resolve(repo, base_ref), "head": resolve(repo, head_ref)}
    say = lambda line: print(line, file=out, flush=True)  # noqa: E731
    overlays = {label: overlay_for(specs, say=say) for label, specs in (packages or {}).items() if specs}
    out_dir.mkdir(parents=True, exist_ok=True)
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    with checkouts(repo, list(shas.values()), BUILD_DIR / "assets" if repo == PROJECT_ROOT else None) as roots:
        base, head = make_sides(base_ref, head_ref, shas, roots, out_dir, envs, overlays)
        for side in (base, head):
            where = "the working tree" if side.sha is None else f"{side.sha[:12]} in {side.root}"
            extra = f", with {' '.join(side.packages)}" if side.packages else ""
            say(f"compare-ab: {side.label} = {side.ref} ({where}{extra}) -> {side.run_dir(hw)}")
        facts = {"pairs": pairs, "hw": hw, "filter": cell_filter, "method": method, "started_at": started}
        write_manifest(out_dir, base, head, **facts)
        run_pairs(base, head, pairs, hw, cell_filter, runner, executor=executor, out=out, method=method)
        finished = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        write_manifest(out_dir, base, head, **facts, finished_at=finished)
    return base, head


def cmd_compare_ab(args: argparse.Namespace) -> int:
    if args.pairs % 2:
        print(f"note: {args.pairs} pairs is odd: the base runs first once more than the head", file=sys.stderr)
    packages = {
        "base": parse_packages(args.base_with, "--base-with"),
        "head": parse_packages(args.head_with, "--head-with"),
    }
    base_ref, head_ref = default_refs(args.base, args.head, any(packages.values()))
    if any(packages.values()) and args.executor != "local":
        raise BenchError(
            f"compare-ab: --base-with/--head-with run in overlay venvs here: --executor local, not {args.executor}"
        )
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    out_dir = Path(args.out) if args.out else Path(args.results) / "ab" / stamp
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        base, head = run_ab(
            base_ref,
            head_ref,
            args.pairs,
            args.hw,
            args.filter,
            out_dir,
            executor=args.executor,
            packages=packages,
            method=args.method,
        )
    except KeyboardInterrupt:
        print(f"\ncompare-ab interrupted; worktrees removed, finished trials kept in {out_dir}", file=sys.stderr)
        return INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous)
    markdown, _, failed = compare_runs(
        base, head, args.hw, out_dir, args.threshold, args.fail_on, args.include_overlapped
    )
    output = Path(args.output) if args.output else None
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(markdown, encoding="utf-8")
    if args.json:
        shutil.copyfile(out_dir / "compare.json", args.json)
    print()
    sys.stdout.write(markdown)
    print(f"\ncompare-ab: {args.pairs} pairs recorded in {out_dir} (compare.md, compare.json, ab.json)")
    if failed:
        print(f"compare-ab: regressions in {', '.join(failed)} (--fail-on {args.fail_on})", file=sys.stderr)
    return 1 if failed else 0


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # the same cleanup as Ctrl-C
