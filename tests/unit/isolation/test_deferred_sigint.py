import os
import signal
import time

import pydantic_core
import pytest

from bench.isolation import deferred_sigint
from bench.isolation.deferred_sigint import (
    TERMINATING,
    DeferredSigint,
    Interrupted,
    exit_status,
    interrupt_on_stop_signals,
    stopped_by,
    uncut,
)


def test_deferred_sigint_holds_ctrl_c_until_the_end_or_allow():
    with pytest.raises(KeyboardInterrupt), DeferredSigint():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        reached = True
    assert reached
    steps = []
    with pytest.raises(KeyboardInterrupt), DeferredSigint() as sigint:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        steps.append("deferred")
        with sigint.allow():
            steps.append("not reached")
    assert steps == ["deferred"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.fixture
def stop_handlers():
    """SIGTERM's and SIGHUP's handlers as they were, and no signal received, after the test."""
    saved = {signum: signal.getsignal(signum) for signum in TERMINATING}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)
    deferred_sigint._received.clear()


def test_sigterm_and_sighup_interrupt_as_ctrl_c_does_the_first_of_them_only(stop_handlers):
    interrupt_on_stop_signals()
    with pytest.raises(KeyboardInterrupt) as raised:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
    assert isinstance(raised.value, Interrupted) and raised.value.name == "SIGTERM"
    assert stopped_by(raised.value) == " by SIGTERM" and stopped_by(KeyboardInterrupt()) == ""
    os.kill(os.getpid(), signal.SIGHUP)  # the process is stopping already: a second one cuts nothing short
    time.sleep(0.05)
    assert exit_status(130, 130) == 143  # 128 + SIGTERM, the first
    assert exit_status(2, 130) == 2  # a run that ended otherwise keeps its status


def test_ctrl_c_keeps_its_status_and_a_signal_ignored_at_start_stays_ignored(stop_handlers):
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as `nohup` starts a command
    interrupt_on_stop_signals()
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    os.kill(os.getpid(), signal.SIGHUP)
    time.sleep(0.05)
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
    assert exit_status(130, 130) == 130


def test_a_sigterm_during_setup_is_held_until_it_ends_and_then_stops_it(stop_handlers):
    interrupt_on_stop_signals()
    handler = signal.getsignal(signal.SIGTERM)
    steps = []
    with pytest.raises(Interrupted) as raised, DeferredSigint() as held:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(0.05)
        steps.append("set up")
        with held.allow():
            steps.append("not reached")
    assert steps == ["set up"] and raised.value.name == "SIGTERM"  # the first one held
    assert signal.getsignal(signal.SIGTERM) is handler and signal.getsignal(signal.SIGHUP) is handler


def test_a_ctrl_c_inside_pydantic_serialisation_arrives_whole_after_it():
    """pydantic wraps a KeyboardInterrupt raised in its Python callbacks into its own error; `uncut` holds it until
    the dump returns, so it arrives as the KeyboardInterrupt it is."""
    import pydantic

    class Signalled(pydantic.BaseModel):
        value: int

        @pydantic.field_serializer("value")
        def _signal(self, value: int) -> int:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            return value

    with pytest.raises(pydantic_core.PydanticSerializationError):
        Signalled(value=1).model_dump_json()
    dumped = []
    with pytest.raises(KeyboardInterrupt):
        dumped.append(uncut(Signalled(value=1).model_dump_json))
    assert dumped == []
    assert uncut(lambda: 7) == 7
