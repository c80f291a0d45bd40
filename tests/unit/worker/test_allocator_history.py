"""The allocator history a CUDA rank records when the window asks (bench/worker/allocator_history.py): asked for by
steps, kept compact, read back as written; a rank without CUDA records nothing."""

from bench.run.window_spec import HISTORY_STEPS, WindowContent, window_phases
from bench.worker import allocator_history
from bench.worker.allocator_history import HISTORY_ENV, compact, read, requested_steps, write


def test_the_steps_are_read_from_the_environment_and_nothing_else_starts_it(monkeypatch):
    assert requested_steps({HISTORY_ENV: "2"}) == 2
    assert requested_steps({HISTORY_ENV: "two"}) == requested_steps({}) == 0
    monkeypatch.setenv(HISTORY_ENV, "2")
    assert allocator_history.start(on_cuda=False) == 0  # torch.cuda is not touched without CUDA


def test_a_snapshot_is_kept_as_its_devices_requests_and_segments(tmp_path):
    snapshot = {
        "segments": [{"device": 0, "total_size": 20971520}, {"device": 1, "total_size": 2097152}],
        "device_traces": [
            [
                {"action": "segment_alloc", "addr": 4096, "size": 20971520, "frames": []},
                {"action": "alloc", "addr": 4096, "size": 1048576, "frames": []},
                {"action": "free_requested", "addr": 4096, "size": 1048576, "frames": []},
                {"action": "free_completed", "addr": 4096, "size": 1048576, "frames": []},
            ],
            [{"action": "alloc", "addr": 8192, "size": 512, "frames": []}],
        ],
    }
    history = compact(snapshot, 0)
    assert history["events"] == [
        ["segment_alloc", 4096, 20971520],
        ["alloc", 4096, 1048576],
        ["free_completed", 4096, 1048576],
    ]
    assert (history["segments"], history["truncated"]) == ([20971520], False)
    path = tmp_path / "allocator_history.rank0.json.gz"
    write(path, history)
    assert read(path) == history
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # written beside, then renamed


def test_the_window_records_the_dpo_and_other_methods_phases_only():
    content = WindowContent(
        target=("--hw", "1xH200"), profile="1xH200", workload="llama-3.2-1b", dpo=("one_adapter-none-single",),
        methods=("sft-one_adapter-none-single",), methods_rest=("orpo-one_adapter-none-single",), emulated=(),
        seven_b=("mistral-7b", (), ()),
    )  # fmt: skip
    environments = {p.name: p.environment() for p in window_phases(content, "w")}
    for recorded in ("dpo", "methods", "methods-rest"):
        assert environments.pop(recorded) == {HISTORY_ENV: str(HISTORY_STEPS)}, recorded
    assert set(map(len, environments.values())) == {0}  # the speed pass above all runs unrecorded


def test_a_history_that_cannot_be_written_costs_the_cell_nothing(tmp_path, monkeypatch, capsys):
    import torch

    stopped = []
    monkeypatch.setattr(torch.cuda.memory, "_snapshot", lambda: {"device_traces": [], "segments": []})
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", lambda enabled=None: stopped.append(enabled))
    allocator_history.save(tmp_path / "allocator_history.rank0.json.gz")  # device 0 has no trace: IndexError
    assert stopped == [None]  # recording stopped all the same
    assert not (tmp_path / "allocator_history.rank0.json.gz").exists()
    assert capsys.readouterr().err.startswith("allocator history not written: IndexError(")
