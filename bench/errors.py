"""User-facing errors: printed as one line by the CLI, never as a traceback."""


class BenchError(Exception):
    """A problem with the user's input or environment that the user can fix."""
