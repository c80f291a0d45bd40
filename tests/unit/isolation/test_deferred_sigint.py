import os
import signal
import time

import pytest

from bench.isolation.deferred_sigint import DeferredSigint


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
