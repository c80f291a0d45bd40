"""The experiment trackers a cell's trainer may report to (TrainingArguments.report_to, through transformers' own
integrations): `--report-to` on `run` and in `advise --export` recipes. `none` (the default) loads no integration,
so a cell makes no connection; the others read their own environment (WANDB_MODE=offline, MLFLOW_TRACKING_URI,
TENSORBOARD_LOGGING_DIR, ...), which reaches the cells. Pure but for `missing`, which asks the importer."""

import importlib.util
from typing import Literal

Tracker = Literal["wandb", "mlflow", "tensorboard", "trackio", "none"]
NONE = "none"
MODULES: dict[str, tuple[str, ...]] = {
    "wandb": ("wandb",),
    "mlflow": ("mlflow",),
    "tensorboard": ("tensorboard", "tensorboardX"),
    "trackio": ("trackio",),
}
"""Tracker -> the modules transformers' integration can use (any one of them)."""
TRACKERS: tuple[str, ...] = (*MODULES, NONE)


def parse_report_to(text: str, flag: str = "--report-to") -> tuple[Tracker, ...]:
    """`wandb`, `tensorboard,mlflow` or `none`; one line naming `flag` and the allowed values otherwise."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in TRACKERS]
    if unknown or not names:
        given = unknown[0] if unknown else text
        raise ValueError(f"{flag}: unknown tracker {given!r}; use {'|'.join(TRACKERS)} (several comma-separated)")
    if NONE in names and len(names) > 1:
        raise ValueError(f"{flag}: {NONE} cannot be combined with {', '.join(n for n in names if n != NONE)}")
    return names  # type: ignore[return-value]


def trainer_value(trackers: tuple[str, ...]) -> str | list[str]:
    """TrainingArguments.report_to: one name as it is, several as a list."""
    return trackers[0] if len(trackers) == 1 else list(trackers)


def missing(trackers: tuple[str, ...]) -> list[str]:
    """The trackers none of whose modules this interpreter can import (the cells would fail in the trainer)."""
    return [t for t in trackers if t != NONE and not any(importlib.util.find_spec(m) for m in MODULES[t])]


def missing_line(trackers: tuple[str, ...], flag: str = "--report-to") -> str | None:
    """One line naming the trackers not installed here, with what to install; None when all are."""
    absent = missing(trackers)
    if not absent:
        return None
    packages = " ".join(MODULES[t][0] for t in absent)
    return f"{flag} {','.join(absent)}: not installed in this venv ({'; '.join(absent)}): pip install {packages}"
