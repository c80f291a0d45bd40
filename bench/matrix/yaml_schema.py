"""Safe YAML loading into typed schemas, with one-line errors that name the file and the key."""

import difflib
import typing
from pathlib import Path
from typing import Annotated, TypeVar

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError

from bench.errors import BenchError
from bench.matrix.packages import PACKAGES
from bench.paths import PROJECT_ROOT

Model = TypeVar("Model", bound=BaseModel)
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser where PyYAML was built with it: the same documents, several times faster to read."""


def _https_links(value: tuple[str, ...]) -> tuple[str, ...]:
    for link in value:
        if not link.startswith("https://"):
            raise ValueError(f"{link!r} is not an https:// link")
    return value


def _one_line(value: str) -> str:
    if "\n" in value.strip():
        raise ValueError("must be one line")
    return value.strip()


def _package_specifiers(value: dict[str, str]) -> dict[str, str]:
    for package, specifier in value.items():
        if package not in PACKAGES:
            raise ValueError(f"unknown package {package!r}; allowed: {', '.join(PACKAGES)}")
        try:
            SpecifierSet(specifier)
        except InvalidSpecifier:
            raise ValueError(f"{package}: {specifier!r} is not a PEP 440 version specifier") from None
    return value


HttpsLinks = Annotated[tuple[str, ...], AfterValidator(_https_links)]
OneLine = Annotated[str, AfterValidator(_one_line)]
PackageSpecifiers = Annotated[dict[str, str], AfterValidator(_package_specifiers)]
"""Package (one of bench.matrix.packages.PACKAGES) -> PEP 440 specifier set."""


class Strict(BaseModel):
    """Base for every schema read from user files: unknown keys are errors, numbers are finite (no .inf or .nan),
    values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def display_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(PROJECT_ROOT))
    except ValueError:
        return str(path)


def read_yaml(path: Path) -> object:
    if not path.is_file():
        raise BenchError(f"{display_path(path)}: file not found")
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise BenchError(f"{display_path(path)}: malformed YAML{where}: {problem}") from None
    except UnicodeDecodeError:
        raise BenchError(f"{display_path(path)}: not UTF-8 text") from None


def describe_validation_error(source: str, exc: ValidationError, model: type[BaseModel] | None = None) -> str:
    """One line for the first problem, an unknown key before any other (a misspelt key also leaves the key it meant
    missing); with `model`, an unknown key names the known one it resembles."""
    errors = exc.errors()
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    key = ".".join(str(part) for part in err["loc"]) or "<top level>"
    shown = f"'{key}'" if key.isprintable() else repr(key)  # a key of the file may hold a line break
    ctx = err.get("ctx") or {}
    if err["type"] == "extra_forbidden":
        return f"{source}: unknown key {shown}{_resembling(model, err['loc'])}"
    if err["type"] == "missing":
        return f"{source}: missing key {shown}"
    if "expected" in ctx:
        got = err.get("input")
        return f"{source}: key {shown}: unknown value {got!r}; allowed: {ctx['expected']}"
    msg = err["msg"].removeprefix("Value error, ")
    return f"{source}: key {shown}: {msg}"


def _resembling(model: type[BaseModel] | None, loc: tuple) -> str:
    """` (did you mean 'x'?)` where the schema at `loc`'s mapping has a key close to its last part, else ''."""
    for part in loc[:-1]:
        if model is None:
            return ""
        if isinstance(part, str):
            field = model.model_fields.get(part)
            model = None if field is None else _schema_in(field.annotation)
    if model is None or not isinstance(loc[-1], str):
        return ""
    close = difflib.get_close_matches(loc[-1], list(model.model_fields), n=1, cutoff=0.75)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _schema_in(annotation: object) -> type[BaseModel] | None:
    """The schema a field holds: itself, or inside Optional, a union or a list/tuple of them."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((found for arg in typing.get_args(annotation) if (found := _schema_in(arg))), None)


def parse_model(source: str, data: object, model: type[Model]) -> Model:
    if not isinstance(data, dict):
        raise BenchError(f"{source}: expected a mapping of keys to values, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise BenchError(describe_validation_error(source, exc, model)) from None


def load_yaml_model(path: Path, model: type[Model]) -> Model:
    return parse_model(display_path(path), read_yaml(path), model)
