"""The caching allocator's model (bench/estimate/allocator.py) on sequences whose outcome c10's rules decide, and its
replay of a recorded history (bench/worker/allocator_history.py)."""

from bench.estimate.allocator import (
    LARGE_BUFFER,
    SMALL_BUFFER,
    CachingAllocator,
    allocation_size,
    held_against,
    replay,
    round_size,
)
from bench.units import MiB


def test_requests_round_to_512_bytes_and_segments_to_the_pools_sizes():
    assert (round_size(1), round_size(512), round_size(513)) == (512, 512, 1024)
    assert allocation_size(4096) == SMALL_BUFFER  # up to 1 MiB: a 2 MiB small segment
    assert allocation_size(1 * MiB + 512) == LARGE_BUFFER  # up to 10 MiB: a 20 MiB segment shared by splits
    assert allocation_size(10 * MiB) == 10 * MiB  # from 10 MiB: its own segment, in 2 MiB steps
    assert allocation_size(10 * MiB + 512) == 12 * MiB


def test_a_freed_block_serves_a_smaller_request_and_a_larger_one_maps_a_segment():
    allocator = replay([("alloc", "a", 30 * MiB), ("free", "a", 0), ("alloc", "b", 20 * MiB), ("alloc", "c", 40 * MiB)])
    assert allocator.segments == [30 * MiB, 40 * MiB]  # b took the cached 30 MiB block, split: 10 MiB stays free
    assert (allocator.allocated, allocator.reserved) == (60 * MiB, 70 * MiB)


def test_best_fit_takes_the_smallest_cached_block_that_fits():
    allocator = CachingAllocator()
    for key, size in (("big", 40 * MiB), ("mid", 24 * MiB), ("keep", 12 * MiB)):
        allocator.malloc(key, size)
    allocator.free("big")
    allocator.free("mid")
    allocator.malloc("new", 23 * MiB + MiB // 2)  # fits both: the 24 MiB one, whole (half a MiB is not split off)
    assert allocator.allocated == 36 * MiB
    allocator.malloc("again", 39 * MiB)  # the 40 MiB block is still whole
    assert allocator.segments == [40 * MiB, 24 * MiB, 12 * MiB]


def test_freed_neighbours_merge_and_serve_a_request_neither_could():
    allocator = CachingAllocator()
    for key in "abc":
        allocator.malloc(key, 4 * MiB)  # three splits of one 20 MiB segment (8 MiB left free after them)
    assert allocator.segments == [LARGE_BUFFER]
    allocator.free("a")
    allocator.free("b")
    allocator.malloc("d", 7 * MiB)  # a and b merged: 8 MiB
    assert allocator.segments == [LARGE_BUFFER]
    allocator.malloc("e", 9 * MiB)  # only the 8 MiB tail and 1 MiB of a+b are free: a new segment
    assert allocator.segments == [LARGE_BUFFER, LARGE_BUFFER]


def test_small_requests_share_a_2_mib_segment():
    allocator = replay([("alloc", n, 1000) for n in range(4096)])  # 1,024 bytes each after rounding
    assert allocator.segments == [SMALL_BUFFER, SMALL_BUFFER]
    assert allocator.allocated == 4096 * 1024


def _history(*rows: tuple[str, int, int]) -> dict:
    return {"version": 1, "device": 0, "events": [list(r) for r in rows], "segments": [], "truncated": False}


def test_a_history_the_model_explains_and_one_it_does_not():
    agreeing = _history(
        ("segment_alloc", 0, 30 * MiB),
        ("alloc", 0, 30 * MiB),
        ("free_completed", 0, 30 * MiB),
        ("alloc", 0, 20 * MiB),  # the cached block, split
        ("segment_alloc", 30 * MiB, 40 * MiB),
        ("alloc", 30 * MiB, 40 * MiB),
    )
    check = held_against(agreeing)
    assert (check.requests, check.peak_allocated, check.peak_reserved) == (3, 60 * MiB, 70 * MiB)
    assert (check.model_peak_reserved, check.segments, check.model_segments) == (70 * MiB, 2, 2)
    assert check.first_other_segment is None
    # an allocator that released the cached block before the second request (an empty_cache the model cannot see)
    released = _history(
        ("segment_alloc", 0, 30 * MiB),
        ("alloc", 0, 30 * MiB),
        ("free_completed", 0, 30 * MiB),
        ("segment_free", 0, 30 * MiB),
        ("segment_alloc", 0, 20 * MiB),
        ("alloc", 0, 20 * MiB),
    )
    check = held_against(released)
    assert (check.peak_reserved, check.model_peak_reserved, check.first_other_segment) == (30 * MiB, 30 * MiB, 1)
