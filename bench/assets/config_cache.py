"""What is read off a model's config.json by building the model on the meta device (its shapes for the estimator, its
matmul shape for MFU), kept on disk: that build needs torch and transformers, whose imports take most of a `predict`
or an `advise`. An entry is keyed by the config's bytes and the transformers release that builds the model (its
classes decide the modules), so an edited config or another release builds it again.

The configs shipped under scenarios/ (models/, workloads/) have their entries committed too (SHIPPED_DIR, written
by `python -m bench predict --hw all --write`, with the transformers release they were built with): the first `predict`
or `advise` of a shipped model imports neither, and needs neither installed."""

import contextlib
import hashlib
import importlib.metadata
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from bench.files import write_whole
from bench.paths import SCENARIOS_DIR, scenarios_dir, user_cache_dir

CACHE_ENV = "BENCH_SHAPES_CACHE"
"""The cache's folder (default: shapes/ of the user's cache folder, ~/.cache/dpo-bench/shapes); `off`: nothing is kept
or read, every shape is built."""
SHIPPED_DIR = SCENARIOS_DIR / "shapes"
"""The committed entries of the shipped configs (shipped_configs), built with the pinned transformers; read from the
scenario folder in use (shipped_dir)."""
RELEASE_FILE = "transformers-release.txt"
"""Beside the shipped entries: the transformers release they were built with."""

T = TypeVar("T")


def shipped_dir() -> Path:
    return scenarios_dir() / "shapes"


def shipped_configs() -> list[Path]:
    """The config.json files shipped under scenarios/: the models `--model` names, the workloads' models."""
    folder = scenarios_dir()
    return sorted(folder.glob("models/*/config.json")) + sorted(folder.glob("workloads/*/config.json"))


def transformers_release() -> str | None:
    """The installed transformers release; without transformers (the base install) the shipped entries' own: nothing
    can be built then, and what was shipped is read as it is."""
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        return (shipped_dir() / RELEASE_FILE).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def entry_name(kind: str, config_file: Path) -> str | None:
    """The entry's file name: its kind and a hash of the config's bytes and the transformers release; None when the
    config or the release cannot be read."""
    release = transformers_release()
    try:
        content = config_file.read_bytes()
    except OSError:
        return None
    return None if release is None else f"{kind}-{hashlib.sha256(content + release.encode()).hexdigest()}.json"


def cache_file(kind: str, config_file: Path) -> Path | None:
    """Where `kind` of this config is kept; None when nothing is (the cache off, the config or transformers
    unreadable)."""
    folder = os.environ.get(CACHE_ENV) or str(user_cache_dir() / "shapes")
    name = entry_name(kind, config_file)
    if folder == "off" or name is None:
        return None
    return Path(folder) / name


def _read(path: Path, decode: Callable[[dict], T]) -> T | None:
    if not path.is_file():
        return None
    try:
        return decode(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # a torn or older entry: built again


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_whole(path, json.dumps(data, sort_keys=True))


def ship(kind: str, config_file: Path, encoded: dict) -> Path:
    """Commit-ready: `encoded` as the shipped entry of `kind` for this config."""
    name = entry_name(kind, config_file)
    if name is None:
        raise ValueError(f"{config_file}: unreadable, or transformers is not installed")
    _write(shipped_dir() / name, encoded)
    return shipped_dir() / name


def cached(
    kind: str, config_file: Path, build: Callable[[], T], encode: Callable[[T], dict], decode: Callable[[dict], T]
) -> T:
    """`decode` of the kept entry, else `build()`, kept for next time (written whole or not at all)."""
    kept = cache_file(kind, config_file)
    if kept is not None:
        for place in (kept, shipped_dir() / kept.name):
            if (found := _read(place, decode)) is not None:
                return found
    value = build()
    if kept is not None:
        with contextlib.suppress(OSError):
            _write(kept, encode(value))
    return value
