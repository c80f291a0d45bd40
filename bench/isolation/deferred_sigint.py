"""The stop signals: Ctrl-C (SIGINT), and SIGTERM and SIGHUP (what `timeout`, systemd, job schedulers and a closed
terminal send), which the runner turns into the same interrupt (`interrupt_on_stop_signals`), held off while setup
or cleanup must not be cut half-way (a cell's cgroups, its process group, its record), then delivered; `allow()`
opens it again around the long waits."""

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
TERMINATING = (signal.SIGTERM, signal.SIGHUP)
"""The stop signals that end a process unless it handles them; the runner makes them interrupt as Ctrl-C does."""

_received: list[int] = []
"""The terminating signals this process has received since it asked to be interrupted by them."""


class Interrupted(KeyboardInterrupt):
    """A stop by SIGTERM or SIGHUP, raised where Ctrl-C raises KeyboardInterrupt, so that it takes the same path:
    the running cell stopped, every finished record kept, one line."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


def stopped_by(exc: BaseException) -> str:
    """' by SIGTERM' for a stop by a terminating signal; '' for a Ctrl-C (the words after 'interrupted')."""
    return f" by {exc.name}" if isinstance(exc, Interrupted) else ""


def _interrupt_once(signum: int, frame: object) -> None:
    """Raise Interrupted for the first terminating signal only: the process is stopping by then, and a second one
    (`timeout` signals its command and then its process group, which holds the command) must not cut the cleanup
    short."""
    _received.append(signum)
    if len(_received) == 1:
        raise Interrupted(signum)


def interrupt_on_stop_signals() -> None:
    """From now on (main thread only), SIGTERM and SIGHUP raise Interrupted as Ctrl-C raises KeyboardInterrupt. A
    signal the process was started with ignored stays ignored (`nohup` ignores SIGHUP)."""
    _received.clear()
    for signum in TERMINATING:
        if signal.getsignal(signum) != signal.SIG_IGN:
            signal.signal(signum, _interrupt_once)


def exit_status(code: int, interrupted: int) -> int:
    """The exit status of a process that ends with `code`: a run interrupted (`interrupted`, 128 + SIGINT) by a
    terminating signal ends with 128 + that signal's number, as a shell reports a process that signal ended
    (143 for SIGTERM, 129 for SIGHUP)."""
    if code == interrupted and _received:
        return 128 + _received[0]
    return code


class DeferredSigint:
    """While entered (main thread only), the stop signals are recorded instead of raising KeyboardInterrupt, so
    setup and cleanup are never cut half-way; the first recorded one is delivered on exit (and at once when `allow`
    opens). A signal whose handler is not Python's (the default action, or ignored) is left alone.

    Nested deferrals deliver to the enclosing one. Inside `allow()` the previous handlers are back in force: the
    long waits go there, so a stop signal still stops a cell at once.
    """

    def __init__(self) -> None:
        self.previous: dict[int, Callable] = {}
        self.active = False
        self.pending: int | None = None

    def _record(self, signum: int, frame: object) -> None:
        if self.pending is None:
            self.pending = signum

    def __enter__(self) -> "DeferredSigint":
        if threading.current_thread() is not threading.main_thread():
            return self
        for signum in STOP_SIGNALS:
            previous = signal.getsignal(signum)
            if callable(previous):
                self.previous[signum] = previous
                signal.signal(signum, self._record)
        self.active = bool(self.previous)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if not self.active:
            return
        self._restore()
        self.active = False
        pending, self.pending = self.pending, None
        if pending is not None and (exc_type is None or not issubclass(exc_type, KeyboardInterrupt)):
            self.previous[pending](pending, None)

    def _restore(self) -> None:
        for signum, previous in self.previous.items():
            signal.signal(signum, previous)

    @contextmanager
    def allow(self) -> Iterator[None]:
        if not self.active:
            yield
            return
        try:
            self._restore()
            if self.pending is not None:
                pending, self.pending = self.pending, None
                self.previous[pending](pending, None)
            yield
        finally:
            for signum in self.previous:
                signal.signal(signum, self._record)


def uncut(call: Callable[[], T]) -> T:
    """`call()` with the stop signals held until it returns: for a short call that a signal must not land inside,
    such as pydantic's serializer, which turns a KeyboardInterrupt raised in its Python callbacks into a
    PydanticSerializationError (a traceback and exit 1 where a stop should print one line)."""
    with DeferredSigint():
        return call()
