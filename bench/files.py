"""Writing a file whole: a reader sees the old content or the new one, never a torn file."""

import os
from pathlib import Path


def write_whole(path: Path, text: str) -> None:
    """`text` into `path` through a temporary file beside it and a rename (atomic within a filesystem). The temporary
    name carries the writer's pid, so processes writing the same path never share one; it matches no `*.json` glob."""
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
