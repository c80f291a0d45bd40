"""Cells side by side: the devices a machine hands out, how many each cell takes, which ones (pure)."""

from bench.matrix.axes import Backend, Init, Quant
from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.matrix.on_profile import CellOnProfile
from bench.matrix.profiles import load_profile
from bench.run.slot_ledger import Span, beside
from bench.run.slots import DeviceSlot, SlotPlacement, core_ranges, machine_devices, need, pick, start_order


def cell(backend: str = Backend.SINGLE, init: str = Init.ONE_ADAPTER) -> Cell:
    return Cell(init=init, quant=Quant.NONE, backend=backend, launcher=backend_spec(backend).default_launcher)


def test_eight_single_gpu_cells_take_one_gpu_each_and_four_two_gpu_cells_take_aligned_pairs():
    free = list(range(8))
    taken = []
    for _ in range(8):
        block = pick(free, 1, 8)
        taken.append(block)
        free = [i for i in free if i not in block]
    assert taken == [[i] for i in range(8)] and pick(free, 1, 8) is None
    free, pairs = list(range(8)), []
    for _ in range(4):
        block = pick(free, 2, 8)
        pairs.append(block)
        free = [i for i in free if i not in block]
    assert pairs == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_a_pair_avoids_a_half_taken_block_and_takes_what_is_left_when_no_block_is_whole():
    assert pick([1, 2, 3, 4, 5, 6, 7], 2, 8) == [2, 3]
    assert pick([1, 2, 5, 6], 2, 8) == [1, 2]  # no aligned pair is free
    assert pick([0, 1, 2], 4, 8) is None


def test_what_a_cell_takes_on_gpus_and_on_cores():
    eight = load_profile("8xA100-80G")
    assert need(CellOnProfile(cell(), eight), 1, 8) == 1
    assert need(CellOnProfile(cell(Backend.DDP), eight), 8, 8) == 8
    assert (
        need(CellOnProfile(cell(Backend.ZERO2_OFFLOAD), eight), 1, 8) == 8
    )  # its optimizer step takes every host core
    slots = load_profile("cpu-slots")
    assert need(CellOnProfile(cell(), slots), 0, 2) == 1 and need(CellOnProfile(cell(Backend.DDP), slots), 0, 2) == 2


def test_the_machines_devices_are_its_gpus_or_its_core_groups():
    eight = load_profile("8xA100-80G")
    gpus = machine_devices(eight, {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}, [0, 1])
    assert [d.gpu for d in gpus] == [str(i) for i in range(8)]
    cores = machine_devices(load_profile("cpu-slots"), {}, [0, 1, 2, 3, 4])
    assert [d.cores for d in cores] == [(0, 1), (2, 3)]
    assert machine_devices(load_profile("cpu"), {}, [0, 1]) == [DeviceSlot()]  # nothing to share
    assert machine_devices(load_profile("cpu-slots"), {}, [0]) == [DeviceSlot()]  # fewer cores than groups


def test_a_placement_names_its_mask_and_its_environment():
    gpus = SlotPlacement((2, 3), (DeviceSlot(gpu="2"), DeviceSlot(gpu="3")))
    assert (gpus.env, gpus.cores, gpus.label, gpus.first) == ({"CUDA_VISIBLE_DEVICES": "2,3"}, None, "GPUs 2,3", 2)
    cores = SlotPlacement((1,), (DeviceSlot(cores=(2, 3)),))
    assert (cores.env, cores.cores, cores.label) == ({}, [2, 3], "cores 2-3")
    assert core_ranges([0, 1, 2, 3, 6, 8, 9]) == "0-3,6,8-9"


def test_cells_that_share_the_machine_start_before_those_that_take_all_of_it():
    cells = [cell(Backend.DDP), cell(), cell(Backend.FSDP), cell(init=Init.TWO_MODELS)]
    needs = {c.id: 2 if c.backend != Backend.SINGLE else 1 for c in cells}
    assert start_order(cells, lambda c: needs[c.id], 2) == [cells[1], cells[3], cells[0], cells[2]]


def test_a_record_names_the_cells_that_ran_at_some_moment_beside_it():
    a = Span("r", cell().id, started=0.0, ended=10.0)
    b = Span("r", cell(init=Init.TWO_MODELS).id, started=5.0, ended=None)  # still running
    c = Span("r", cell(init=Init.TWO_ADAPTERS).id, started=11.0, ended=12.0)  # after a ended
    d = Span("r", cell(Backend.DDP).id, started=-5.0, ended=-1.0)  # before a started
    e = Span("other", cell(Backend.DDP).id, started=9.0, ended=20.0)  # another run's, on the same device
    assert beside(a, [a, b, c, d, e], "r") == sorted([b.cell, f"other/{e.cell}"])


def test_the_last_aligned_block_is_taken_before_a_misaligned_one():
    assert pick([5, 6, 7], 2, 8) == [6, 7]
    assert pick([3, 4, 5, 6, 7], 4, 8) == [4, 5, 6, 7]


def test_a_cpu_profile_shares_cores_whatever_gpus_the_run_can_see():
    visible = {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert [d.cores for d in machine_devices(load_profile("cpu-slots"), visible, [0, 1, 2, 3])] == [(0, 1), (2, 3)]
    assert machine_devices(load_profile("cpu"), visible, [0, 1]) == [DeviceSlot()]


def test_as_many_cores_as_groups_give_one_core_each():
    assert [d.cores for d in machine_devices(load_profile("cpu-slots"), {}, [4, 7])] == [(4,), (7,)]
