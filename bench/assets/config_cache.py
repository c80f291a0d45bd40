"""What is read off a model's config.json by building the model on the meta device (its shapes for the estimator, its
matmul shape for MFU), kept on disk: that build needs torch and transformers, whose imports take most of a `predict`
or an `advise`. An entry is keyed by the config's bytes and the transformers release that builds the model (its
classes decide the modules), so an edited config or another release builds it again."""

import contextlib
import hashlib
import importlib.metadata
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

CACHE_ENV = "BENCH_SHAPES_CACHE"
"""The cache's folder (default: ~/.cache/dpo-bench/shapes); `off`: nothing is kept."""

T = TypeVar("T")


def cache_file(kind: str, config_file: Path) -> Path | None:
    """Where `kind` of this config is kept; None when nothing is (the cache off, the config or transformers
    unreadable)."""
    folder = os.environ.get(CACHE_ENV) or str(Path.home() / ".cache" / "dpo-bench" / "shapes")
    if folder == "off":
        return None
    try:
        content = config_file.read_bytes()
        release = importlib.metadata.version("transformers")
    except (OSError, importlib.metadata.PackageNotFoundError):
        return None
    return Path(folder) / f"{kind}-{hashlib.sha256(content + release.encode()).hexdigest()}.json"


def cached(
    kind: str, config_file: Path, build: Callable[[], T], encode: Callable[[T], dict], decode: Callable[[dict], T]
) -> T:
    """`decode` of the kept entry, else `build()`, kept for next time (written whole or not at all)."""
    kept = cache_file(kind, config_file)
    if kept is not None and kept.is_file():
        try:
            return decode(json.loads(kept.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a torn or older entry: built again
    value = build()
    if kept is not None:
        with contextlib.suppress(OSError):
            kept.parent.mkdir(parents=True, exist_ok=True)
            partial = kept.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(json.dumps(encode(value)), encoding="utf-8")
            partial.replace(kept)
    return value
