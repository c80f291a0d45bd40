"""Ctrl-C held off while setup or cleanup must not be cut half-way (a cell's cgroups, its process group, its record),
then delivered; `allow()` opens it again around the long waits."""

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class DeferredSigint:
    """While entered (main thread only), SIGINT is recorded instead of raising KeyboardInterrupt, so setup and
    cleanup are never cut half-way; a recorded SIGINT is delivered on exit (and at once when `allow` opens).

    Nested deferrals deliver to the enclosing one. Inside `allow()` the previous handler is back in force: the
    long waits go there, so a Ctrl-C still stops a cell at once.
    """

    def __init__(self) -> None:
        self.previous: Callable | int | None = None
        self.active = False
        self.pending = False

    def _record(self, signum: int, frame: object) -> None:
        self.pending = True

    def __enter__(self) -> "DeferredSigint":
        if threading.current_thread() is not threading.main_thread():
            return self
        previous = signal.getsignal(signal.SIGINT)
        if previous is None or previous == signal.SIG_IGN:
            return self
        self.previous = previous
        signal.signal(signal.SIGINT, self._record)
        self.active = True
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if not self.active:
            return
        signal.signal(signal.SIGINT, self.previous)
        self.active = False
        if self.pending:
            self.pending = False
            if exc_type is None or not issubclass(exc_type, KeyboardInterrupt):
                self._deliver()

    def _deliver(self) -> None:
        if callable(self.previous):
            self.previous(signal.SIGINT, None)
        elif self.previous == signal.SIG_DFL:
            signal.raise_signal(signal.SIGINT)

    @contextmanager
    def allow(self) -> Iterator[None]:
        if not self.active:
            yield
            return
        try:
            signal.signal(signal.SIGINT, self.previous)
            if self.pending:
                self.pending = False
                self._deliver()
            yield
        finally:
            signal.signal(signal.SIGINT, self._record)
