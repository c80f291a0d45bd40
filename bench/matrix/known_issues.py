"""Known upstream failures as data (scenarios/known_issues.yaml) and the matcher that links a failure to one.

An entry matches when its regex finds the failure text, the cell meets every condition it lists, and every installed
package it gives a range for is known and inside that range. Pure apart from `known_issues()`, which reads the
file of the scenario folder in use once.
"""

import re
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import Field, field_validator

from bench.matrix.axes import Backend, Init, Launcher, Method, Option, Quant, Setup
from bench.matrix.cell import Cell
from bench.matrix.yaml_schema import HttpsLinks, OneLine, PackageSpecifiers, Strict, load_yaml_model
from bench.paths import scenarios_dir

KNOWN_ISSUES_FILE = "known_issues.yaml"


class Conditions(Strict):
    """Cells an entry applies to: each listed axis must hold one of its values; an axis left out holds for all."""

    init: tuple[Init, ...] | None = Field(default=None, min_length=1)
    quant: tuple[Quant, ...] | None = Field(default=None, min_length=1)
    backend: tuple[Backend, ...] | None = Field(default=None, min_length=1)
    launcher: tuple[Launcher, ...] | None = Field(default=None, min_length=1)
    options: tuple[Option, ...] | None = Field(default=None, min_length=1)
    """The cell runs at least one of these options."""
    setup: tuple[Setup, ...] | None = Field(default=None, min_length=1)
    """recipe or newcomer (scenarios/recipes.yaml)."""
    method: tuple[Method, ...] | None = Field(default=None, min_length=1)
    """The training method (one trainer's own failure)."""

    @property
    def empty(self) -> bool:
        axes = (self.init, self.quant, self.backend, self.launcher, self.options, self.setup, self.method)
        return all(values is None for values in axes)

    def hold_for(self, cell: Cell) -> bool:
        axes = (
            (self.init, (cell.init,)),
            (self.quant, (cell.quant,)),
            (self.backend, (cell.backend,)),
            (self.launcher, (cell.launcher,)),
            (self.options, cell.options),
            (self.setup, (cell.setup,)),
            (self.method, (cell.method,)),
        )
        return all(allowed is None or any(value in allowed for value in values) for allowed, values in axes)


class KnownIssue(Strict):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    pattern: re.Pattern[str]
    """Searched in everything the failed cell left: every rank's error and traceback, then the launcher log."""
    when: Conditions = Conditions()
    versions: PackageSpecifiers = {}
    """Package -> PEP 440 specifier set, e.g. {trl: "<0.7.2"}: the versions that still fail."""
    links: HttpsLinks = Field(min_length=1)
    """Upstream threads; the first is the one a result record carries."""
    note: OneLine = Field(min_length=1, max_length=300)

    @field_validator("pattern", mode="before")
    @classmethod
    def _compiles(cls, value: object) -> re.Pattern[str]:
        if not isinstance(value, str):
            raise ValueError("must be a regular expression (a string)")
        try:
            return re.compile(value)
        except re.error as exc:
            raise ValueError(f"invalid regular expression: {exc}") from None

    @property
    def link(self) -> str:
        return self.links[0]

    def in_version_range(self, installed: Mapping[str, str | None]) -> bool:
        """Every ranged package is installed at a version inside its range; unknown versions do not match."""
        for package, specifier in self.versions.items():
            raw = installed.get(package)
            if raw is None:
                return False
            try:
                version = Version(raw)
            except InvalidVersion:
                return False
            # Development builds (1.7.0.dev0) count: they are what a bisecting user runs.
            if not SpecifierSet(specifier).contains(version, prereleases=True):
                return False
        return True

    def matches(self, text: str, cell: Cell | None, installed: Mapping[str, str | None]) -> bool:
        if cell is None and not self.when.empty:
            return False
        if cell is not None and not self.when.hold_for(cell):
            return False
        return self.in_version_range(installed) and self.pattern.search(text) is not None


class KnownIssuesFile(Strict):
    issues: tuple[KnownIssue, ...]

    @field_validator("issues")
    @classmethod
    def _unique_ids(cls, value: tuple[KnownIssue, ...]) -> tuple[KnownIssue, ...]:
        seen: set[str] = set()
        for issue in value:
            if issue.id in seen:
                raise ValueError(f"duplicate id {issue.id!r}")
            seen.add(issue.id)
        return value


def load_known_issues(path: Path | None = None) -> tuple[KnownIssue, ...]:
    return load_yaml_model(path or scenarios_dir() / KNOWN_ISSUES_FILE, KnownIssuesFile).issues


def known_issues(scenarios: Path | None = None) -> tuple[KnownIssue, ...]:
    """The entries of `scenarios` (default: the scenario folder in use), read once per process."""
    return _known_issues_at((scenarios or scenarios_dir()) / KNOWN_ISSUES_FILE)


@cache
def _known_issues_at(path: Path) -> tuple[KnownIssue, ...]:
    return load_known_issues(path)


def find_known_issue(
    text: str, cell: Cell | None, installed: Mapping[str, str | None], issues: Sequence[KnownIssue]
) -> KnownIssue | None:
    """The first entry (file order) that explains this failure."""
    return next((issue for issue in issues if issue.matches(text, cell, installed)), None)
