"""Two one-second measurements of this host, recorded in env.json for the speed model (bench/estimate/speed):
one thread's fp32 matmul rate and the memory copy rate. Best of a few repeats: the machine may be shared."""

import time

from bench.units import GB, MiB

MATMUL_SIZE = 512
"""Square fp32 matmul side: 512^3 x 2 = 268 MFLOP per product, the scale of the small workload's LM head tiles."""
COPY_BYTES = 256 * MiB
"""Copied per repeat: far above any last-level cache, so the figure is the DRAM rate."""


def best_seconds(work, repeats: int) -> float:
    """The fastest of `repeats` timed calls of `work` (one untimed call first)."""
    work()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times)


def cpu_matmul_gflops(repeats: int = 5) -> float:
    """fp32 GFLOP/s of one thread multiplying two MATMUL_SIZE-square matrices with torch."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, b = torch.randn(MATMUL_SIZE, MATMUL_SIZE), torch.randn(MATMUL_SIZE, MATMUL_SIZE)
        seconds = best_seconds(lambda: torch.mm(a, b), repeats)
    finally:
        torch.set_num_threads(threads)
    return 2 * MATMUL_SIZE**3 / seconds / 1e9


def cpu_memory_gbps(repeats: int = 3) -> float:
    """GB/s (1e9) moved by one thread copying COPY_BYTES: read + write, both counted."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        src = torch.ones(COPY_BYTES // 4)
        dst = torch.empty_like(src)
        seconds = best_seconds(lambda: dst.copy_(src), repeats)
    finally:
        torch.set_num_threads(threads)
    return 2 * COPY_BYTES / seconds / GB
