"""PyTorch's CUDA caching allocator for one stream, as c10/cuda/CUDACachingAllocator.cpp's DeviceCachingAllocator
serves requests (defaults: no max_split_size, no expandable segments, no power-of-two rounding): what a sequence of
allocations and frees leaves reserved. A request rounds up to 512 bytes and is served by the smallest cached free
block of its pool that fits (`get_free_block`, best fit by size then address), else by a new segment
(`get_allocation_size`); the block is split where the remainder is worth keeping (`should_split`); a freed block
merges with free neighbours of its segment and stays cached. Held against the allocator's own record of a GPU step
(bench/worker/allocator_history.py) by `held_against`."""

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

MIN_BLOCK = 512
"""kMinBlockSize: every request rounds up to a multiple of it."""
SMALL_SIZE = 1 << 20
"""kSmallSize: requests up to 1 MiB come from the small pool, larger ones from the large pool."""
SMALL_BUFFER = 2 << 20
"""kSmallBuffer: a small pool's segment."""
LARGE_BUFFER = 20 << 20
"""kLargeBuffer: the segment of a request above 1 MiB and below kMinLargeAlloc."""
MIN_LARGE_ALLOC = 10 << 20
"""kMinLargeAlloc: from here on a request gets a segment of its own size, rounded up to kRoundLarge."""
ROUND_LARGE = 2 << 20
"""kRoundLarge."""


def round_size(size: int) -> int:
    return MIN_BLOCK if size < MIN_BLOCK else MIN_BLOCK * -(-size // MIN_BLOCK)


def allocation_size(size: int) -> int:
    """The segment cudaMalloc is asked for when no cached block fits a request of `size` (already rounded)."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * -(-size // ROUND_LARGE)


@dataclass(eq=False)
class _Block:
    address: int
    size: int
    small: bool
    allocated: bool = False
    prev: "_Block | None" = None
    next: "_Block | None" = None


@dataclass
class CachingAllocator:
    """Allocations by key; `reserved` is the segments' bytes, `allocated` the blocks' handed out."""

    allocated: int = 0
    reserved: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    segments: list[int] = field(default_factory=list)
    """Each segment's size, in the order cudaMalloc was asked for them."""
    _pools: dict[bool, list[tuple[int, int, _Block]]] = field(default_factory=lambda: {True: [], False: []})
    _live: dict[object, _Block] = field(default_factory=dict)
    _top: int = 0

    def malloc(self, key: object, size: int) -> None:
        if size <= 0:
            return  # an empty tensor takes no block
        size = round_size(size)
        small = size <= SMALL_SIZE
        pool = self._pools[small]
        found = bisect.bisect_left(pool, (size, -1))
        block = pool.pop(found)[2] if found < len(pool) else self._segment(size, small)
        remaining = block.size - size
        if remaining >= MIN_BLOCK if small else remaining > SMALL_SIZE:
            rest = _Block(block.address + size, remaining, small, prev=block, next=block.next)
            if block.next is not None:
                block.next.prev = rest
            block.next, block.size = rest, size
            self._cache(rest)
        block.allocated = True
        self._live[key] = block
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)

    def free(self, key: object) -> None:
        block = self._live.pop(key, None)
        if block is None:
            return
        self.allocated -= block.size
        block.allocated = False
        before, after = block.prev, block.next
        if before is not None and not before.allocated:
            self._uncache(before)
            before.size += block.size
            before.next = after
            if after is not None:
                after.prev = before
            block = before
        if after is not None and not after.allocated:
            self._uncache(after)
            block.size += after.size
            block.next = after.next
            if after.next is not None:
                after.next.prev = block
        self._cache(block)

    def _segment(self, size: int, small: bool) -> _Block:
        grant = allocation_size(size)
        self.segments.append(grant)
        self.reserved += grant
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        block = _Block(self._top, grant, small)
        self._top += grant
        return block

    def _cache(self, block: _Block) -> None:
        bisect.insort(self._pools[block.small], (block.size, block.address, block))

    def _uncache(self, block: _Block) -> None:
        pool = self._pools[block.small]
        pool.pop(bisect.bisect_left(pool, (block.size, block.address)))


def replay(events: Iterable[tuple[str, int, int]]) -> CachingAllocator:
    """The allocator after `events`: ("alloc", key, bytes) and ("free", key, 0), in order."""
    allocator = CachingAllocator()
    for action, key, size in events:
        if action == "alloc":
            allocator.malloc(key, size)
        elif action == "free":
            allocator.free(key)
    return allocator


@dataclass(frozen=True)
class HeldAgainst:
    """A GPU step's allocator history (bench/worker/allocator_history.py) beside this model's replay of its requests."""

    requests: int
    peak_allocated: int
    """The history's, by its own blocks."""
    peak_reserved: int
    model_peak_reserved: int
    segments: int
    model_segments: int
    first_other_segment: int | None
    """The index of the first segment whose size the model gives otherwise (None: every one the same)."""


def held_against(history: dict) -> HeldAgainst:
    """Replay the history's requests (`alloc` by address, `free_completed`) through the model and compare the
    segments it maps with those the allocator mapped."""
    model, real_segments = CachingAllocator(), []
    reserved = peak_reserved = allocated = peak_allocated = requests = 0
    live: dict[int, int] = {}
    for action, address, size in history["events"]:
        if action == "alloc":
            model.malloc(address, size)
            live[address] = size
            allocated += size
            requests += 1
        elif action == "free_completed":
            model.free(address)
            allocated -= live.pop(address, 0)
        elif action in ("segment_alloc", "segment_map"):
            real_segments.append(size)
            reserved += size
        elif action in ("segment_free", "segment_unmap"):
            reserved -= size
        peak_reserved, peak_allocated = max(peak_reserved, reserved), max(peak_allocated, allocated)
    pairs = zip(real_segments, model.segments, strict=False)
    other = next((i for i, (real, modelled) in enumerate(pairs) if real != modelled), None)
    if other is None and len(real_segments) != len(model.segments):
        other = min(len(real_segments), len(model.segments))
    return HeldAgainst(
        requests, peak_allocated, peak_reserved, model.peak_reserved, len(real_segments), len(model.segments), other
    )
