"""The README names every command the CLI has, and no other."""

import re

from bench.cli import parser
from bench.paths import PROJECT_ROOT


def subcommands() -> set[str]:
    action = next(a for a in parser()._actions if a.dest == "command")
    return set(action.choices)


def test_readme_lists_every_command_of_the_cli():
    readme = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
    (row,) = [line for line in readme.splitlines() if line.startswith("| `dpo-bench --help` |")]
    listed = set(re.findall(r"`([a-z-]+)`", row.split("|")[2]))
    assert listed == subcommands()
