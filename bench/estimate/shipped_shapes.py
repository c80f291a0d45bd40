"""The committed shapes of the shipped configs (bench/assets/config_cache.py SHIPPED_DIR): built on the meta device
and written by `python -m bench predict --hw all --write`, so that no `predict` or `advise` of a shipped model
imports torch or transformers."""

import dataclasses
import importlib.metadata
from pathlib import Path

from bench.assets.config_cache import RELEASE_FILE, entry_name, ship, shipped_configs, shipped_dir
from bench.estimate import shapes
from bench.files import write_whole
from bench.judge import mfu

KINDS = ("shapes", "mfu")
"""The cached kinds: the estimator's ModelShapes (bench/estimate/shapes.py), MFU's ModelShape (bench/judge/mfu.py)."""


def expected_entries() -> set[str]:
    """The entry names the shipped configs need under the installed transformers."""
    return {name for config in shipped_configs() for kind in KINDS if (name := entry_name(kind, config)) is not None}


def write_shipped() -> list[Path]:
    """Build and write every shipped config's entries and the release they were built with; remove entries no
    shipped config needs any more."""
    written = []
    for config in shipped_configs():
        written.append(ship("shapes", config, dataclasses.asdict(shapes.built_on_meta(str(config)))))
        written.append(ship("mfu", config, dataclasses.asdict(mfu.built_on_meta(str(config.parent)))))
    release = shipped_dir() / RELEASE_FILE
    write_whole(release, importlib.metadata.version("transformers") + "\n")
    written.append(release)
    wanted = expected_entries()
    for stale in shipped_dir().glob("*.json"):
        if stale.name not in wanted:
            stale.unlink()
    return written
