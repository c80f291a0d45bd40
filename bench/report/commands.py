"""CLI subcommands of the report package (compare, publish). Filled in by the report work."""

import argparse


def add_commands(sub: "argparse._SubParsersAction") -> None:
    """Register report subcommands on the `python -m bench` parser."""
