"""Safe YAML loading into typed schemas, with one-line errors that name the file and the key."""

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from bench.errors import BenchError
from bench.paths import PROJECT_ROOT

Model = TypeVar("Model", bound=BaseModel)


class Strict(BaseModel):
    """Base for every schema read from user files: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def display_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(PROJECT_ROOT))
    except ValueError:
        return str(path)


def read_yaml(path: Path) -> object:
    if not path.is_file():
        raise BenchError(f"{display_path(path)}: file not found")
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise BenchError(f"{display_path(path)}: malformed YAML{where}: {problem}") from None
    except UnicodeDecodeError:
        raise BenchError(f"{display_path(path)}: not UTF-8 text") from None


def describe_validation_error(source: str, exc: ValidationError) -> str:
    err = exc.errors()[0]
    key = ".".join(str(part) for part in err["loc"]) or "<top level>"
    ctx = err.get("ctx") or {}
    if err["type"] == "extra_forbidden":
        return f"{source}: unknown key '{key}'"
    if err["type"] == "missing":
        return f"{source}: missing key '{key}'"
    if "expected" in ctx:
        got = err.get("input")
        return f"{source}: key '{key}': unknown value {got!r}; allowed: {ctx['expected']}"
    msg = err["msg"].removeprefix("Value error, ")
    return f"{source}: key '{key}': {msg}"


def parse_model(source: str, data: object, model: type[Model]) -> Model:
    if not isinstance(data, dict):
        raise BenchError(f"{source}: expected a mapping of keys to values, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise BenchError(describe_validation_error(source, exc)) from None


def load_yaml_model(path: Path, model: type[Model]) -> Model:
    return parse_model(display_path(path), read_yaml(path), model)
