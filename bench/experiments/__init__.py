"""Experiments about the suite's own measurements (scripts, run by hand; their summaries are committed)."""
