"""A file's parse kept while the file stays as it is (the same modification time and size): the estimator's derived
tables (spread.json, traced_flops.json) are read for every cell an `advise` or the decision page predicts, and are
rewritten only by commands that regenerate them."""

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def parsed(path: Path, parse: Callable[[str], T]) -> T:
    """`parse` of the file's text, parsed again once the file changes. The value is shared: callers do not change it."""
    stat = path.stat()
    return _parsed(str(path), stat.st_mtime_ns, stat.st_size, parse)


@functools.lru_cache(maxsize=32)
def _parsed(path: str, mtime_ns: int, size: int, parse: Callable[[str], T]) -> T:
    return parse(Path(path).read_text(encoding="utf-8"))
