"""Device figures the speed model reads: dense peak, memory bandwidth, interconnect, host link. Read through one
function, `device_figures`, so the table below can later be replaced by the GPU catalog (scenarios/gpus.yaml).

Bandwidths are per direction, in GB/s (1e9 bytes/s). `interconnect_gbps` is what one GPU can send to its peers:
NVLink's per-direction half of the datasheet's bidirectional total, else the PCIe link (cards without P2P go
through the host, so the PCIe figure is an upper bound for them). PCIe x16 per direction: gen3 16, gen4 32,
gen5 64 GB/s (PCI-SIG base specifications, 8/16/32 GT/s per lane, 128b/130b).
"""

from dataclasses import dataclass

from bench.errors import BenchError
from bench.matrix.profiles import HardwareProfile

PCIE_GBPS = {3: 16.0, 4: 32.0, 5: 64.0}


@dataclass(frozen=True)
class Card:
    memory_gbps: float
    interconnect_gbps: float
    pcie_gen: int
    source: str
    peak_tflops: float | None = None
    """Dense bf16/fp16 TFLOP/s, for cards no profile ships (the published rows' A6000); profiles carry their own."""


CARDS: dict[str, Card] = {
    "NVIDIA A10": Card(600, PCIE_GBPS[4], 4, "https://www.nvidia.com/en-us/data-center/products/a10-gpu/"),
    "NVIDIA L4": Card(300, PCIE_GBPS[4], 4, "https://www.nvidia.com/en-us/data-center/l4/"),
    "NVIDIA T4": Card(320, PCIE_GBPS[3], 3, "https://www.nvidia.com/en-us/data-center/tesla-t4/"),
    "NVIDIA GeForce RTX 4090": Card(
        1008, PCIE_GBPS[4], 4, "https://www.nvidia.com/en-us/geforce/graphics-cards/40-series/rtx-4090/"
    ),
    "NVIDIA H100 SXM 80GB": Card(3350, 450, 5, "https://www.nvidia.com/en-us/data-center/h100/"),
    "NVIDIA A100-SXM4-80GB": Card(2039, 300, 4, "https://www.nvidia.com/en-us/data-center/a100/"),
    "Intel Gaudi2 HL-225": Card(2450, 262.5, 4, "https://habana.ai/products/gaudi2/"),
    "NVIDIA RTX A6000": Card(
        768, PCIE_GBPS[4], 4, "https://www.nvidia.com/en-us/products/workstations/rtx-a6000/", peak_tflops=154.8
    ),
}
"""Datasheet figures of the cards the shipped GPU profiles stand for (plus the A6000 of the published torchtune
rows: its 154.8 dense tensor TFLOP/s is half the datasheet's 309.7 with sparsity; no NVLink bridge assumed).
RTX 4090: 384-bit x 21 Gbps GDDR6X = 1008 GB/s. Gaudi2: 21 of its 24 100 GbE ports connect the eight cards of a
node (2100 Gb/s = 262.5 GB/s). H100 SXM and A100 SXM: NVLink 900 and 600 GB/s bidirectional, halved."""


@dataclass(frozen=True)
class DeviceFigures:
    name: str
    device_class: str
    """`cpu`, `gpu` or `hpu`: which efficiency and overhead constants apply (calibration.py)."""
    peak_flops: float
    """Dense peak FLOP/s of one rank's device (CPU: the measured matmul rate x the rank's threads)."""
    memory_bytes_s: float
    interconnect_bytes_s: float
    host_link_bytes_s: float
    """Host <-> device (PCIe); on CPU the host is the device: its memory bandwidth."""
    source: str


def card_figures(card: str, peak_tflops: float | None = None) -> DeviceFigures:
    """A GPU/accelerator card's figures by its name (`NVIDIA A10`)."""
    entry = CARDS.get(card)
    if entry is None:
        raise BenchError(f"no speed figures for card {card!r}; known: {', '.join(CARDS)}")
    peak = peak_tflops or entry.peak_tflops
    if peak is None:
        raise BenchError(f"card {card!r}: no peak_tflops in the profile or the table")
    return DeviceFigures(
        name=card,
        device_class="hpu" if "Gaudi" in card else "gpu",
        peak_flops=peak * 1e12,
        memory_bytes_s=entry.memory_gbps * 1e9,
        interconnect_bytes_s=entry.interconnect_gbps * 1e9,
        host_link_bytes_s=PCIE_GBPS[entry.pcie_gen] * 1e9,
        source=entry.source,
    )


def cpu_figures(matmul_gflops: float, memory_gbps: float, threads: int, source: str) -> DeviceFigures:
    """A CPU rank: `matmul_gflops` one thread's measured fp32 matmul rate, `memory_gbps` the measured copy rate.
    The collectives (gloo) move bytes through the same memory."""
    if matmul_gflops <= 0 or memory_gbps <= 0 or threads < 1:
        raise BenchError(f"cpu figures must be positive (got {matmul_gflops} GFLOP/s, {memory_gbps} GB/s)")
    bandwidth = memory_gbps * 1e9
    return DeviceFigures("cpu", "cpu", matmul_gflops * 1e9 * threads, bandwidth, bandwidth, bandwidth, source)


def device_figures(profile: HardwareProfile, cpu: tuple[float, float, str] | None = None) -> DeviceFigures:
    """The figures of one rank's device on `profile`. `cpu`: (matmul GFLOP/s per thread, copy GB/s, where from)
    for a CPU profile (env.json's measurement, or calibration.py's)."""
    if profile.device == "cpu":
        if cpu is None:
            raise BenchError(f"profile {profile.name}: a CPU profile needs the measured matmul rate (env.json)")
        return cpu_figures(cpu[0], cpu[1], profile.threads_per_process, cpu[2])
    if profile.card is None:
        raise BenchError(f"profile {profile.name}: no `card`, so no speed figures")
    return card_figures(profile.card, profile.peak_tflops)
