"""The documented recipe of every cell, as data (scenarios/recipes.yaml), and what it resolves to for one cell.

An entry applies to a pattern of cells and states each setting once, with the sources that document it and the
package versions it needs. A recipe cell gets the settings of every matching entry; its `+newcomer` row gets
what a newcomer does instead (bench/matrix/axes.py Setup). launch.py and the worker read the resolved settings; nothing
else decides them. Pure apart from `recipes()` (reads the scenario folder's file once) and `installed_versions()`.
"""

from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, field_validator

from bench.matrix.axes import Backend, Device, Init, Launcher, Quant, Setup
from bench.matrix.packages import installed_versions
from bench.matrix.yaml_schema import HttpsLinks, OneLine, PackageSpecifiers, Strict, load_yaml_model
from bench.paths import scenarios_dir

if TYPE_CHECKING:
    from bench.matrix.cell import Cell

RECIPES_FILE = "recipes.yaml"


class Settings(Strict):
    """Every setting a recipe can make; None: not set (the library's default)."""

    device_map: Literal["local_rank", "auto", "balanced_io_first", "none"] | None = None
    """from_pretrained's device_map: `local_rank` = {"": this process's local rank}, `balanced_io_first` = layers
    balanced over the devices with the input embedding and the LM head on the first (bench/worker/models.py),
    `none` = no device_map."""
    bnb_4bit_quant_storage: Literal["compute_dtype"] | None = None
    """BitsAndBytesConfig's storage dtype of the 4-bit weights (default uint8)."""
    zero3_init_flag: bool | None = None
    """accelerate.yaml deepspeed_config.zero3_init_flag (models built under deepspeed.zero.Init)."""
    fsdp_cpu_ram_efficient_loading: bool | None = None
    """accelerate.yaml fsdp_config.fsdp_cpu_ram_efficient_loading."""
    reference: Literal["model", "precomputed"] | None = None
    """two_models: a separate reference model, or none and DPOConfig(precompute_ref_log_probs=True)."""

    def merged(self, other: "Settings", names: tuple[str, str]) -> "Settings":
        """Both sets of settings; a field both set is an error naming the two entries."""
        mine, theirs = self.model_dump(exclude_none=True), other.model_dump(exclude_none=True)
        clash = sorted(set(mine) & set(theirs))
        if clash:
            raise ValueError(f"recipes {names[0]} and {names[1]} both set {', '.join(clash)}")
        return Settings(**mine, **theirs)


class When(Strict):
    """Cells an entry applies to: each listed axis must hold one of its values; an axis left out holds for all."""

    init: tuple[Init, ...] | None = Field(default=None, min_length=1)
    quant: tuple[Quant, ...] | None = Field(default=None, min_length=1)
    backend: tuple[Backend, ...] | None = Field(default=None, min_length=1)
    launcher: tuple[Launcher, ...] | None = Field(default=None, min_length=1)
    device: tuple[Device, ...] | None = Field(default=None, min_length=1)

    def holds(self, cell: "Cell", device: str) -> bool:
        pairs = (
            (self.init, cell.init),
            (self.quant, cell.quant),
            (self.backend, cell.backend),
            (self.launcher, cell.launcher),
            (self.device, device),
        )
        return all(allowed is None or value in allowed for allowed, value in pairs)


class Recipe(Strict):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    when: When
    settings: Settings
    newcomer: Settings = Settings()
    """What the `+newcomer` row does instead: usually nothing (the library default)."""
    requires: PackageSpecifiers = {}
    """Package -> PEP 440 specifier set the recipe needs, e.g. {bitsandbytes: ">=0.43.3"}."""
    sources: HttpsLinks = Field(min_length=1)
    note: OneLine = Field(min_length=1, max_length=400)

    @property
    def link(self) -> str:
        return self.sources[0]


class RecipesFile(Strict):
    recipes: tuple[Recipe, ...]

    @field_validator("recipes")
    @classmethod
    def _unique_ids(cls, value: tuple[Recipe, ...]) -> tuple[Recipe, ...]:
        ids = [recipe.id for recipe in value]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ValueError(f"duplicate id {duplicates[0]!r}")
        return value


class Requirement(BaseModel):
    model_config = ConfigDict(frozen=True)

    package: str
    specifier: str
    recipe: str
    link: str


class AppliedRecipe(BaseModel):
    """What one cell runs with: its setup, the entries that matched, their settings and version requirements."""

    model_config = ConfigDict(frozen=True)

    setup: Setup = Setup.RECIPE
    entries: tuple[str, ...] = ()
    settings: Settings = Settings()
    requires: tuple[Requirement, ...] = ()


def load_recipes(path: Path | None = None) -> tuple[Recipe, ...]:
    return load_yaml_model(path or scenarios_dir() / RECIPES_FILE, RecipesFile).recipes


def recipes(scenarios: Path | None = None) -> tuple[Recipe, ...]:
    """The entries of `scenarios` (default: the scenario folder in use), read once per process."""
    return _recipes_at((scenarios or scenarios_dir()) / RECIPES_FILE)


@cache
def _recipes_at(path: Path) -> tuple[Recipe, ...]:
    return load_recipes(path)


def matching(cell: "Cell", device: str, entries: Sequence[Recipe]) -> list[Recipe]:
    return [entry for entry in entries if entry.when.holds(cell, device)]


def resolve(cell: "Cell", device: str, entries: Sequence[Recipe] | None = None) -> AppliedRecipe:
    """The settings `cell` runs with on a `device` profile: the recipe's, or the newcomer's for a newcomer row."""
    found = matching(cell, device, recipes() if entries is None else entries)
    newcomer = cell.setup == Setup.NEWCOMER
    settings, owner = Settings(), ""
    for entry in found:
        settings = settings.merged(entry.newcomer if newcomer else entry.settings, (owner or entry.id, entry.id))
        owner = entry.id
    requires = (
        ()
        if newcomer
        else tuple(
            Requirement(package=package, specifier=specifier, recipe=entry.id, link=entry.link)
            for entry in found
            for package, specifier in entry.requires.items()
        )
    )
    return AppliedRecipe(setup=cell.setup, entries=tuple(e.id for e in found), settings=settings, requires=requires)


def newcomer_differs(cell: "Cell", device: str, entries: Sequence[Recipe] | None = None) -> bool:
    """Whether the newcomer row of `cell` runs anything the recipe row does not."""
    recipe_cell = cell.model_copy(update={"setup": Setup.RECIPE})
    newcomer_cell = cell.model_copy(update={"setup": Setup.NEWCOMER})
    return resolve(recipe_cell, device, entries).settings != resolve(newcomer_cell, device, entries).settings


# --- versions ---


class RecipeVersionError(RuntimeError):
    """An installed package is outside the range a recipe needs: the cell would silently run another config."""


def version_problems(requires: Sequence[Requirement], installed: Mapping[str, str | None]) -> list[str]:
    """One line per requirement the installed versions miss. Pure."""
    problems = []
    for req in requires:
        raw = installed.get(req.package)
        try:
            ok = raw is not None and SpecifierSet(req.specifier).contains(Version(raw), prereleases=True)
        except InvalidVersion:
            ok = False
        if not ok:
            problems.append(
                f"recipe {req.recipe} needs {req.package}{req.specifier}, installed: {raw or 'none'} ({req.link})"
            )
    return problems


def verify_installed(applied: AppliedRecipe, installed: Mapping[str, str | None] | None = None) -> None:
    """Raise RecipeVersionError naming every package outside its recipe's range (installed versions by default)."""
    if not applied.requires:
        return
    if installed is None:
        installed = installed_versions(sorted({req.package for req in applied.requires}))
    problems = version_problems(applied.requires, installed)
    if problems:
        raise RecipeVersionError("; ".join(problems))
