#!/usr/bin/env python3
"""The dpo-bench action's script: an interleaved A/B of two versions of a library (the package under test) over the
same dpo-bench, written out for a pull-request comment and github-action-benchmark.

    python library_ab.py --package trl --base <ref> --head <ref> [--repo PATH] [--filter GLOBS] [--hw cpu]
                         [--method dpo] [--pairs 4] [--fail-on status] [--out DIR]

A side is a git ref of the library's checkout (`--repo`, default the current folder), checked out into a temporary
worktree and installed into that side's overlay venv (`compare-ab --base-with PKG=<worktree>`), or `==VERSION`, a
released version from the package index. dpo-bench runs from the checkout this script is in (its `.venv`, `make
setup`). Writes into --out: comment.md (the compare, which starts with the marker the comment step finds its comment
by), compare.json, gab-throughput.json and gab-memory.json (github-action-benchmark's custom tools, of the head),
and the A/B folder ab/; names them in $GITHUB_OUTPUT when it is set. Posting the comment is the action's next step.
The exit code is compare-ab's: 0, 1 on a regression of a --fail-on kind, 2 when the A/B could not run (the comment
then says why).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH_ROOT = Path(__file__).resolve().parents[3]
MARKER = "<!-- dpo-bench-compare -->"
"""bench/report/compare.py MARKER: the comment step updates the comment that holds it."""
ERROR_LINES = 25


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--package", required=True, help="the distribution under test, e.g. trl, peft, accelerate")
    p.add_argument("--base", required=True, help="git ref of --repo, or ==VERSION from the package index")
    p.add_argument("--head", required=True, help="git ref of --repo, or ==VERSION from the package index")
    p.add_argument("--repo", default=".", help="the library's git checkout (full history: fetch-depth 0)")
    p.add_argument("--filter", default=None, help="cells, globs over cell ids (default: compare-ab's, every cell)")
    p.add_argument("--hw", default="cpu", help="hardware profile (default: %(default)s)")
    p.add_argument("--method", default="dpo", help="training method(s), or all (default: %(default)s)")
    p.add_argument("--pairs", type=int, default=4, help="A/B pairs = trials per side (default: %(default)s)")
    p.add_argument("--fail-on", default="status", help="compare's --fail-on (default: %(default)s)")
    p.add_argument("--out", default=None, help="output folder (default: $RUNNER_TEMP/dpo-bench or ./dpo-bench-ab)")
    p.add_argument("--python", default=None, help="dpo-bench's interpreter (default: its .venv's)")
    return p.parse_args(argv)


def out_dir(args: argparse.Namespace) -> Path:
    if args.out:
        return Path(args.out).absolute()
    return Path(os.environ.get("RUNNER_TEMP") or ".").absolute() / (
        "dpo-bench" if "RUNNER_TEMP" in os.environ else "dpo-bench-ab"
    )


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {(done.stderr.strip().splitlines() or ['failed'])[-1]}")
    return done.stdout.strip()


def side_spec(package: str, ref: str, repo: Path, worktrees: Path, label: str) -> tuple[str, str]:
    """(the --base-with/--head-with spec, what the comment calls the side): `==VERSION` from the index, else a
    worktree of the ref."""
    if ref.startswith("=="):
        return f"{package}{ref}", f"{package}{ref}"
    try:
        sha = git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except RuntimeError:
        raise RuntimeError(f"{ref!r} is not a commit of {repo} (check it out with fetch-depth: 0)") from None
    path = worktrees / label
    git(repo, "worktree", "add", "--detach", str(path), sha)
    return f"{package}={path}", f"`{ref}` ({sha[:12]})"


def compare_ab_argv(args: argparse.Namespace, python: str, specs: dict[str, str], out: Path) -> list[str]:
    argv = [python, "-m", "bench", "compare-ab", "--base-with", specs["base"], "--head-with", specs["head"]]
    argv += ["--hw", args.hw, "--method", args.method, "--pairs", str(args.pairs), "--fail-on", args.fail_on]
    if args.filter:
        argv += ["--filter", args.filter]
    return [*argv, "--out", str(out / "ab"), "--output", str(out / "comment.md"), "--json", str(out / "compare.json")]


def footer(args: argparse.Namespace, names: dict[str, str]) -> str:
    cells = f"cells `{args.filter}`" if args.filter else "every cell"
    return (
        f"\n<sub>dpo-bench library A/B of `{args.package}`: base {names['base']} vs head {names['head']}, "
        f"{args.pairs} pairs (A B B A …) on `{args.hw}`, method `{args.method}`, {cells}.</sub>\n"
    )


def failure_comment(args: argparse.Namespace, names: dict[str, str], why: str) -> str:
    lines = why.strip().splitlines()[-ERROR_LINES:]
    return "\n".join(
        [MARKER, "## DPO bench", "", f"The A/B of `{args.package}` did not finish:", "", "```", *lines, "```", ""]
    ) + footer(args, names)


def export_head(python: str, ab: Path, hw: str, out: Path) -> list[Path]:
    """github-action-benchmark JSON of the head run: tokens/s (bigger is better) and MiB (smaller is better)."""
    runs = sorted((ab / "head" / hw).glob("*/results.jsonl"))
    written = []
    for metric in ("throughput", "memory") if runs else ():
        path = out / f"gab-{metric}.json"
        argv = [python, "-m", "bench", "export", "--metric", metric, str(runs[-1].parent), "--output", str(path)]
        if subprocess.run(argv, cwd=BENCH_ROOT, check=False).returncode == 0:
            written.append(path)
    return written


def set_outputs(values: dict[str, str]) -> None:
    target = os.environ.get("GITHUB_OUTPUT")
    lines = "".join(f"{key}={value}\n" for key, value in values.items())
    if target:
        with open(target, "a", encoding="utf-8") as f:
            f.write(lines)
    else:
        sys.stdout.write(lines)


def run(args: argparse.Namespace, out: Path, worktrees: Path) -> tuple[int, dict[str, str]]:
    """compare-ab of the two sides; (its exit code, what the comment calls each side)."""
    python = args.python or str(BENCH_ROOT / ".venv" / "bin" / "python")
    names = {"base": f"`{args.base}`", "head": f"`{args.head}`"}
    try:
        specs = {}
        for label in ("base", "head"):
            specs[label], names[label] = side_spec(
                args.package, getattr(args, label), Path(args.repo), worktrees, label
            )
    except RuntimeError as exc:
        (out / "comment.md").write_text(failure_comment(args, names, str(exc)), encoding="utf-8")
        return 2, names
    argv = compare_ab_argv(args, python, specs, out)
    done = subprocess.run(argv, cwd=BENCH_ROOT, stderr=subprocess.PIPE, text=True, check=False)
    sys.stderr.write(done.stderr)
    comment = out / "comment.md"
    if done.returncode >= 2 or not comment.is_file():
        comment.write_text(failure_comment(args, names, done.stderr or f"exit {done.returncode}"), encoding="utf-8")
        return max(done.returncode, 2), names
    comment.write_text(comment.read_text(encoding="utf-8") + footer(args, names), encoding="utf-8")
    export_head(python, out / "ab", args.hw, out)
    return done.returncode, names


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    out = out_dir(args)
    out.mkdir(parents=True, exist_ok=True)
    worktrees = Path(tempfile.mkdtemp(prefix="dpo-bench-library-"))
    try:
        code, _ = run(args, out, worktrees)
    finally:
        for path in worktrees.iterdir():
            remove = ["git", "-C", args.repo, "worktree", "remove", "--force", str(path)]
            subprocess.run(remove, check=False, capture_output=True)
        shutil.rmtree(worktrees, ignore_errors=True)
        subprocess.run(["git", "-C", args.repo, "worktree", "prune"], check=False, capture_output=True)
    outputs = {"comment": out / "comment.md", "ab-dir": out / "ab", "exit-code": code}
    outputs |= {
        f"{m}-json": out / f"gab-{m}.json" for m in ("throughput", "memory") if (out / f"gab-{m}.json").is_file()
    }
    set_outputs({k: str(v) for k, v in outputs.items()})
    return code


if __name__ == "__main__":
    raise SystemExit(main())
