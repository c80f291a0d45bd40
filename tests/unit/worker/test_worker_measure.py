"""StepRecorder: what the worker reads back after training, and the first-step hook it attaches afterwards."""

import types

from bench.worker.measure import StepRecorder


def test_recorder_times_every_step_and_calls_the_first_step_hook_once():
    recorder = StepRecorder()
    recorder.trainer = types.SimpleNamespace(_total_train_tokens=0)
    calls: list[int] = []
    recorder.on_first_step = lambda: calls.append(len(recorder.step_ends))
    recorder.on_train_begin(None, None, None)
    for tokens in (100, 250):
        recorder.trainer._total_train_tokens = tokens
        recorder.on_step_end(None, None, None)
    assert calls == [1]
    assert recorder.tokens == [100, 250]
    assert recorder.train_start is not None and recorder.train_start <= recorder.step_ends[0] <= recorder.step_ends[1]
    assert len(recorder.memory_now) == 2 and all(value > 0 for value in recorder.memory_now)
