"""This installation of dpo-bench: its version, the commit it was built from, and what only its `train` extra brings.

A wheel is stamped with its commit by setup.py (`bench/_build_info.py`, written into the build only); a checkout
asks git instead (bench/results/env.py). The base install plans and reports (advise, predict, list, matrix, compare,
publish); training needs the extra."""

from typing import NamedTuple

from bench import __version__

VERSION = __version__
"""The package's version (pyproject.toml reads it from bench/__init__.py)."""
TRAINING_STACK = ("torch", "transformers", "trl", "peft", "accelerate", "deepspeed", "bitsandbytes", "datasets")
"""The modules only `pip install "dpo-bench[train]"` brings (pyproject.toml's `train` extra): what cells train with,
and what builds a model's shapes on the meta device. No planning or reporting command imports them."""
TRAIN_EXTRA = 'pip install "dpo-bench[train]"'


class Commit(NamedTuple):
    sha: str | None
    dirty: bool | None
    """Whether the files built differed from `sha` (None: unknown)."""


def stamped_commit() -> Commit:
    """The build's stamp; (None, None) where nothing was stamped (a checkout, or a build without git)."""
    try:
        from bench import _build_info  # type: ignore[attr-defined]
    except ImportError:
        return Commit(None, None)
    return Commit(getattr(_build_info, "GIT_SHA", None), getattr(_build_info, "GIT_DIRTY", None))


def missing_training_stack(exc: ModuleNotFoundError) -> str | None:
    """The one-line error for a module of the training stack that is not installed; None for any other module."""
    name = (exc.name or "").split(".")[0]
    if name not in TRAINING_STACK:
        return None
    return f"{name} is not installed: this needs the training stack ({TRAIN_EXTRA})"
