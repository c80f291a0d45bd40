"""Argument types of the command line: each refusal one line naming what was expected."""

import argparse

from bench.matrix.profiles import MAX_TIME_S
from bench.run.memory_slots import MAX_SLOTS


def threshold(text: str) -> float:
    """Percent: `5`, `5%` and `2.5` all mean percent of the base median."""
    try:
        value = float(text.strip().rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a percentage: {text!r} (e.g. 5 or 5%)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"threshold must be >= 0, got {text!r}")
    return value / 100


def whole_number(flag: str, what: str, minimum: int, maximum: tuple[int, str] | None = None):
    """An argparse type: a whole number of at least `minimum` (and at most `maximum`'s number, which its words
    explain), each refusal one line naming `flag`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{flag} must be >= {minimum}, got {text!r}")
        if maximum is not None and value > maximum[0]:
            raise argparse.ArgumentTypeError(f"{flag} must be <= {maximum[0]} ({maximum[1]}), got {text!r}")
        return value

    return parse


pairs = whole_number("--pairs", "a number of pairs", 1)
cell_timeout = whole_number("--cell-timeout", "whole seconds", 10, (MAX_TIME_S, "a week"))
"""The profile schema's own bounds for a cell's time limit."""


def positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {number}")
    return number


def positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
    if not number > 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return number


def slot_count(value: str) -> int:
    number = int(value)
    if not 1 <= number <= MAX_SLOTS:
        raise argparse.ArgumentTypeError(f"must be 1 to {MAX_SLOTS}, got {number}")
    return number


def cell_count(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {number}")
    return number
