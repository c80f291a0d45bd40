"""Runs one cell inside its own process (or container). Imports nothing from executors or report."""
