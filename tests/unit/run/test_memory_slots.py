"""Slots of one device's memory (bench/run/memory_slots.py, pure): how many a card is cut into, how many a cell takes
by its predicted memory with a margin, the cap it runs under, and which runs may cut a device at all."""

import pytest

from bench.errors import BenchError
from bench.matrix.profiles import load_profile
from bench.results.schema import PredictionSummary
from bench.run.memory_slots import (
    MARGIN,
    SharedDevice,
    SlotRequest,
    auto_slots,
    below_own,
    cap_bytes,
    check_asked,
    core_groups,
    outside_bytes,
    shared_device,
    slot_devices,
    slots_taken,
)
from bench.run.slots import SlotPlacement
from bench.units import GB, GiB, MiB

H200 = 143771 * MiB
"""What nvidia-smi reports of an H200 (139 GiB)."""
H100 = 81559 * MiB


def predicted(total: float | None, reserved: float | None = None) -> PredictionSummary:
    return PredictionSummary(
        estimator_version="t", train_bytes=None, total_bytes=total, usable_bytes=None, verdict="fits",
        margin_bytes=None, reserved_bytes=reserved,
    )  # fmt: skip


def gpu(slots: int = 5, memory: int = H200, emulated: int | None = None) -> SharedDevice:
    return SharedDevice("0", "0", memory, slots, emulated, emulated)


def host(slots: int = 6, budget: int = 768 * MiB, ranks: int = 2) -> SharedDevice:
    return SharedDevice("host", None, budget * ranks, slots, budget)


def test_a_big_card_is_cut_into_slots_that_each_hold_a_24_gb_card_and_a_smaller_one_is_not():
    assert auto_slots(H200) == 5 and auto_slots(H100) == 3
    assert auto_slots(int(79 * GB)) == 1 and auto_slots(int(48 * GB)) == 1
    assert gpu().share_bytes == H200 // 5


def test_a_cell_takes_the_slots_its_predicted_memory_with_the_margin_needs():
    device = gpu()  # 5 slots of 27.9 GiB
    assert slots_taken(device, predicted(3 * GiB, 2.5 * GiB), 1) == 1
    assert slots_taken(device, predicted(device.share_bytes / (1 + MARGIN) + GiB), 1) == 2  # the margin tips it
    assert slots_taken(device, predicted(37 * GiB), 1) == 2  # ORPO's 37 GiB
    assert slots_taken(device, predicted(500 * GiB), 1) == 5  # more than the card: every slot, alone
    assert slots_taken(device, None, 1) == 5 and slots_taken(device, predicted(None), 1) == 5  # no prediction: alone
    assert slots_taken(device, predicted(0.0), 1) == 1  # at least one
    cpu = host()  # 6 slots of 256 MiB
    assert slots_taken(cpu, predicted(123 * MiB), 1) == 1
    assert slots_taken(cpu, predicted(123 * MiB), 2) == 2  # each rank's memory counts


def test_an_emulated_card_takes_the_slots_its_card_and_what_sits_outside_it_need():
    card = int(24 * GB)
    assert slots_taken(gpu(emulated=card), predicted(60 * GiB, 58 * GiB), 1) == 1  # its card's, not its need
    assert slots_taken(gpu(slots=6, emulated=card), predicted(20 * GiB, 19 * GiB), 1) == 1  # 24 + 1.07 <= 25.1 GB
    assert slots_taken(gpu(slots=6, emulated=card), predicted(21 * GiB, 19 * GiB), 1) == 2  # 24 + 2.1 > 25.1 GB


def test_the_cap_is_the_slots_less_what_sits_outside_the_allocator_on_a_gpu_and_a_ranks_share_on_cpu():
    device = gpu()
    prediction = predicted(10 * GiB, 9 * GiB)
    assert outside_bytes(prediction) == GiB and outside_bytes(None) == 0.0 and outside_bytes(predicted(GiB)) == 0.0
    assert cap_bytes(device, 1, prediction, 1) == device.share_bytes - GiB
    assert cap_bytes(device, 2, prediction, 1) == 2 * device.share_bytes - GiB
    assert cap_bytes(device, 5, prediction, 1) is None  # every slot: the whole card, as its own profile gives it
    assert cap_bytes(gpu(emulated=int(24 * GB)), 5, prediction, 1) == int(24 * GB)  # alone too: its card's
    cpu = host()
    assert cap_bytes(cpu, 1, None, 1) == 256 * MiB and cap_bytes(cpu, 2, None, 2) == 256 * MiB
    assert cap_bytes(cpu, 3, None, 1) is None  # 768 MiB: no less than its own budget


def test_an_oom_is_re_run_alone_only_where_the_cap_was_below_what_its_own_profile_gives():
    assert below_own(gpu(), 20 * GiB) and not below_own(gpu(), None)
    card = int(24 * GB)
    assert not below_own(gpu(emulated=card), card)  # an emulated card's OOM is its answer
    assert below_own(host(), 256 * MiB) and not below_own(host(), 768 * MiB)


def test_cores_are_cut_as_evenly_as_they_come_and_shared_in_turn_when_too_few():
    groups = core_groups(range(16), 5)
    assert [len(g) for g in groups] == [3, 3, 3, 3, 4] and sorted(c for g in groups for c in g) == list(range(16))
    assert core_groups([3, 1], 5) == [(1,), (3,), (1,), (3,), (1,)]
    assert core_groups([], 2) == [(), ()]
    slots = slot_devices(host(slots=2), [0, 1])
    assert [(s.cores, s.memory_bytes, s.gpu) for s in slots] == [((0,), 768 * MiB, None), ((1,), 768 * MiB, None)]


def test_a_placement_in_slots_names_its_slots_and_carries_its_cap():
    devices = tuple(slot_devices(gpu(), range(15)))
    placement = SlotPlacement((1, 2), devices[1:3], cap_bytes=H200 // 5, device_bytes=H200, of=5)
    assert placement.env == {"CUDA_VISIBLE_DEVICES": "0", "BENCH_EMULATE_MEMORY_FRACTION": "0.200000"}
    assert (placement.slot, placement.label, placement.memory_budget_bytes) == ("1-2 of 5", "GPU 0 (cores 3-8)", None)
    alone = SlotPlacement(tuple(range(5)), devices, None, H200, 5)
    assert alone.env == {"CUDA_VISIBLE_DEVICES": "0"} and alone.slot == "0-4 of 5"  # no fraction: the whole card
    cpu = SlotPlacement((0, 1), tuple(slot_devices(host(), [0, 1]))[:2], 256 * MiB, None, 6)
    assert (cpu.env, cpu.memory_budget_bytes, cpu.cores, cpu.label) == ({}, 256 * MiB, [0, 1], "cores 0-1")
    assert SlotPlacement((0,), devices[:1]).slot is None


def request(slots: int | None = None, **changes) -> SlotRequest:
    base = {"exclusive": False, "local": True, "emulated": False, "device_bytes": H200, "gpu": "3"}
    return SlotRequest(slots=slots, **(base | changes))


def test_a_big_card_is_shared_by_default_and_not_when_the_run_says_otherwise():
    h200 = load_profile("1xH200")
    device = shared_device(h200, request())
    assert device == SharedDevice("3", "3", H200, 5, None, None)
    assert shared_device(h200, request(3)).slots == 3
    assert shared_device(h200, request(1)) is None  # --gpu-slots 1
    assert shared_device(h200, request(exclusive=True)) is None
    assert shared_device(h200, request(device_bytes=int(48 * GB))) is None  # a small card
    assert shared_device(h200, request(local=False)) is None  # docker, slurm: not automatically
    assert shared_device(h200, request(device_bytes=None)) is None  # no GPU seen


def test_an_emulated_card_caps_every_cell_at_its_cards_memory():
    device = shared_device(load_profile("1xA10"), request(emulated=True))
    assert device is not None and device.emulated_bytes == device.own_bytes == int(24 * GB) and device.slots == 5


def test_a_cpu_profile_shares_the_memory_its_budget_gives_a_cell_when_asked():
    budget = load_profile("cpu-budget")
    assert shared_device(budget, request(device_bytes=None)) is None  # never automatically on CPU
    device = shared_device(budget, request(6, device_bytes=None))
    assert device == SharedDevice("host", None, 2 * budget.memory_budget_bytes, 6, budget.memory_budget_bytes)


@pytest.mark.parametrize(
    ("profile", "changes", "says"),
    [
        ("cpu", {}, "has no memory_budget_gb"),
        ("1xH200", {"exclusive": True}, "--exclusive runs one cell at a time"),
        ("1xH200", {"local": False}, "under the local executor only"),
        ("1xH200", {"device_bytes": None}, "no GPU was seen"),
        ("2xA10", {}, "spans 2 GPUs"),
        ("8xGaudi2", {}, "runs on hpu"),
    ],
)
def test_slots_asked_of_a_run_that_cannot_share_a_device_is_a_one_line_error(profile, changes, says):
    with pytest.raises(BenchError, match=says) as error:
        shared_device(load_profile(profile), request(4, **changes))
    assert str(error.value).startswith("--gpu-slots 4: ") and "\n" not in str(error.value)


def test_the_cli_refuses_what_the_profile_alone_rules_out_before_anything_is_prepared():
    with pytest.raises(BenchError, match="--gpu-slots 2: --exclusive"):
        check_asked(load_profile("1xH200"), 2, exclusive=True)
    with pytest.raises(BenchError, match="no memory_budget_gb"):
        check_asked(load_profile("cpu"), 2, exclusive=False)
    check_asked(load_profile("cpu"), 1, exclusive=True)  # one slot: nothing is shared, nothing to refuse
    check_asked(load_profile("1xH200"), None, exclusive=True)


def test_a_runs_request_is_read_from_its_flags_its_machine_and_its_executor(tmp_path):
    from bench.executors.local import LocalExecutor
    from bench.run.preflight import Preflight
    from bench.run.session import RunRequest, device_slots

    h200 = load_profile("1xH200")
    machine = Preflight(launch_env={"CUDA_VISIBLE_DEVICES": "GPU-1234"}, device_memory_bytes=H200)
    asked = RunRequest("r", tmp_path, h200, None, [], "local", 0.0, gpu_slots=2)  # type: ignore[arg-type]
    device = device_slots(asked, machine, LocalExecutor(tmp_path))
    assert device == SharedDevice("GPU-1234", "GPU-1234", H200, 2, None, None)
    visible = {"CUDA_VISIBLE_DEVICES": "0"}
    emulated = Preflight(launch_env=visible, emulated_from="NVIDIA H200", device_memory_bytes=H200)
    a10 = RunRequest("r", tmp_path, load_profile("1xA10"), None, [], "local", 0.0)  # type: ignore[arg-type]
    assert device_slots(a10, emulated, LocalExecutor(tmp_path)).emulated_bytes == int(24 * GB)
