"""The GPU catalog (scenarios/gpus.yaml): everything the suite knows about each accelerator (datasheet figures with
their sources, generation, SMs, compute capability, achievable matmul rate, cloud name), one entry per card;
`--gpu NAME:COUNT` parsed. The profile built from an entry: bench/matrix/profiles.py `gpu_profile`."""

import difflib
import functools
import re
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from bench.errors import BenchError
from bench.matrix.axes import Device
from bench.matrix.yaml_schema import Strict, load_yaml_model
from bench.paths import scenarios_dir

GPUS_FILE = "gpus.yaml"
NUMBERS = ("memory_gb", "bf16_tflops", "fp16_tflops", "memory_bandwidth_gbs", "interconnect", "host_link")
"""The figures each of which needs a source (`sources.default` or its own)."""
OWN_SOURCES = ("host_node", "mamf")
"""The figures that come from another page than the datasheet, and so need their own source."""
GPU_ARGUMENT = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*)(?::(?P<count>[0-9]+))?$")


class Interconnect(Strict):
    kind: Literal["pcie", "nvlink", "infinity_fabric", "roce"]
    gb_s: float | None = Field(default=None, gt=0, description="GB/s as the vendor states it (total bidirectional)")


class Mamf(Strict):
    """A measured achievable matmul rate (no sparsity, at the entry's precision) and the peak it is a share of."""

    tflops: float = Field(gt=0)
    of_tflops: float = Field(gt=0)

    @property
    def fraction(self) -> float:
        return self.tflops / self.of_tflops


class HostNode(Strict):
    """A typical server (or cloud instance) that carries the GPU: its host memory and how many of the GPUs it holds."""

    system: str = Field(min_length=1, max_length=80)
    gpus: int = Field(ge=1)
    memory_gb: float = Field(gt=0)
    """The host memory of the whole node as its vendor states it, GB; a figure stated in GiB is written as it stands
    (read as GB, it is about 7 % under the real memory: the conservative side)."""

    def per_gpu_gb(self) -> float:
        return self.memory_gb / self.gpus


class GpuSpec(Strict):
    """One card of the GPU catalog (scenarios/gpus.yaml): its published figures and their sources."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")
    aliases: list[str] = Field(default_factory=list)
    """Other names `--gpu` takes for it (compared as `spelling` writes them)."""
    card: str = Field(min_length=1, max_length=80)
    driver_names: list[str] = Field(min_length=1)
    """Regular expressions over the name the driver gives the device (nvidia-smi, torch, ROCm, Habana)."""
    device: Device
    precision: Literal["bf16", "fp16"]
    memory_gb: float = Field(gt=0)
    bf16_tflops: float | None = Field(gt=0)
    fp16_tflops: float | None = Field(gt=0)
    memory_bandwidth_gbs: float = Field(gt=0)
    interconnect: Interconnect
    host_link: Interconnect | None = None
    """The host <-> device link (PCIe) where the device-to-device link is another; absent: the interconnect is PCIe
    and is the host link too."""
    host_node: HostNode | None = None
    """A typical node that carries the GPU, for its host memory (`advise` holds offload cells against it); absent
    where no figure was found: then the offload cells are marked host unchecked."""
    generation: str = Field(pattern=r"^[a-z][a-z0-9]*$")
    """The vendor's architecture name (hopper, ampere, cdna3, gaudi ...): the published MFU figures' kind."""
    sms: int | None = Field(default=None, ge=1)
    """Streaming multiprocessors (NVIDIA only: what the CUDA context terms read)."""
    compute_capability: int | None = Field(default=None, ge=1)
    """Compute capability major version (NVIDIA only; 9: Hopper)."""
    mamf: Mamf | None = None
    """The card's row of the achievable-matmul table `sources.mamf` links; None where it has none."""
    runnable: bool = True
    """False where this suite cannot run on the card (AMD's ROCm: the images and launchers are CUDA's): advise still
    answers, its estimate labelled as not runnable here."""
    skypilot: str | None = Field(default=None, pattern=r"^[A-Za-z0-9-]+$")
    """SkyPilot's accelerator name for it (`sky show-gpus`); None: export-task cannot rent it."""
    sources: dict[str, str]

    @model_validator(mode="after")
    def _every_number_sourced(self) -> "GpuSpec":
        unknown = set(self.sources) - {"default", *OWN_SOURCES, *NUMBERS}
        if unknown:
            known = ", ".join(("default", *OWN_SOURCES, *NUMBERS))
            raise ValueError(f"sources: unknown figure {sorted(unknown)[0]!r}; known: {known}")
        for figure in OWN_SOURCES:
            if getattr(self, figure) is not None and figure not in self.sources:
                raise ValueError(f"{figure} has no source (sources.{figure}: its own page)")
            if getattr(self, figure) is None and figure in self.sources:
                raise ValueError(f"sources.{figure} names a source for a {figure} the entry does not have")
            if figure in self.sources and not self.sources[figure].startswith("https://"):
                raise ValueError(f"sources: {self.sources[figure]!r} is not an https:// link")
        if (self.sms is None) != (self.compute_capability is None):
            raise ValueError("sms and compute_capability go together (the CUDA figures of an NVIDIA card)")
        for figure in NUMBERS:
            link = self.sources.get(figure, self.sources.get("default"))
            if link is None:
                raise ValueError(f"{figure} has no source (sources.{figure} or sources.default)")
            if not link.startswith("https://"):
                raise ValueError(f"sources: {link!r} is not an https:// link")
        for pattern in self.driver_names:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"driver_names: {pattern!r} is not a regular expression ({exc})") from None
        if self.precision == "bf16" and self.bf16_tflops is None and self.fp16_tflops is not None:
            raise ValueError("precision bf16 with no bf16_tflops: a card without bf16 trains in fp16")
        return self

    def source(self, figure: str) -> str:
        return self.sources.get(figure, self.sources["default"])

    @property
    def host_link_gb_s(self) -> float | None:
        """The host <-> device link's GB/s as the vendor states it (total bidirectional), None where unpublished."""
        if self.host_link is not None:
            return self.host_link.gb_s
        return self.interconnect.gb_s if self.interconnect.kind == "pcie" else None

    def peak_tflops(self, precision: str) -> float | None:
        """Dense tensor TFLOP/s at the training precision (none for fp32: no tensor figure is kept)."""
        return {"bf16": self.bf16_tflops, "fp16": self.fp16_tflops}.get(precision)


class Catalog(Strict):
    gpus: list[GpuSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> "Catalog":
        names = [spelling(n) for g in self.gpus for n in (g.name, *g.aliases)]
        duplicate = next((n for n in names if names.count(n) > 1), None)
        if duplicate:
            raise ValueError(f"GPU {duplicate!r} is listed twice (as a name or an alias)")
        return self


@functools.lru_cache(maxsize=4096)
def spelling(name: str) -> str:
    """How names are compared: `RTX 4090`, `rtx-4090` and `RTX_4090` are one name; a leading NVIDIA is dropped."""
    folded = re.sub(r"[\s_-]+", "", name.lower())
    return folded.removeprefix("nvidia")


def load_catalog(path: Path | None = None) -> Catalog:
    """The catalog at `path` (default: the scenario folder in use's), read once per process."""
    return _catalog_at(path or scenarios_dir() / GPUS_FILE)


@functools.cache
def _catalog_at(path: Path) -> Catalog:
    return load_yaml_model(path, Catalog)


def gpu(name: str, catalog: Catalog | None = None) -> GpuSpec:
    """The entry named `name` or one of its aliases (as `spelling` compares them); an unknown name is a one-line
    error with the closest names first, then every known one."""
    entries = (catalog or load_catalog()).gpus
    by_spelling = {spelling(n): g for g in entries for n in (g.name, *g.aliases)}
    found = by_spelling.get(spelling(name))
    if found is None:
        close = difflib.get_close_matches(spelling(name), list(by_spelling), n=3, cutoff=0.5)
        suggested = list(dict.fromkeys(by_spelling[c].name for c in close))
        hint = f"did you mean {' or '.join(suggested)}? " if suggested else ""
        raise BenchError(f"unknown GPU {name!r}; {hint}known: {', '.join(g.name for g in entries)}")
    return found


def gpu_by_card(card: str, catalog: Catalog | None = None) -> GpuSpec:
    """The entry whose `card` is `card` (a profile's card, or a published row's)."""
    entries = (catalog or load_catalog()).gpus
    found = next((g for g in entries if g.card == card), None)
    if found is None:
        raise BenchError(f"no GPU catalog entry for card {card!r}; known: {', '.join(g.card for g in entries)}")
    return found


def entry_of(name: str | None, card: str | None) -> GpuSpec | None:
    """The entry named `name` (a profile's `gpu:`), else the one of `card`; None where the catalog holds neither
    (a loaded profile's `gpu:` is checked against the catalog when it is read: bench/matrix/profiles.py)."""
    try:
        if name is not None:
            return gpu(name)
        return None if card is None else gpu_by_card(card)
    except BenchError:
        return None


def identify(driver_name: str, catalog: Catalog | None = None) -> GpuSpec | None:
    """The entry whose `driver_names` match the name the driver gives a device ("NVIDIA H100 80GB HBM3" is the
    H100-SXM, "NVIDIA H100 PCIe" the H100-PCIe); None for a device the catalog does not hold. A name two entries
    match is an error in the catalog (tests/unit/matrix/test_gpus.py holds every entry to real driver names)."""
    entries = (catalog or load_catalog()).gpus
    name = driver_name.strip()
    found = [g for g in entries if any(re.search(p, name, re.IGNORECASE) for p in g.driver_names)]
    if len(found) > 1:
        raise BenchError(f"the driver's name {name!r} matches {' and '.join(g.name for g in found)} in {GPUS_FILE}")
    return found[0] if found else None


def parse_gpu_argument(text: str) -> tuple[str, int]:
    """`A10:2` -> ("A10", 2); `H100-SXM` -> ("H100-SXM", 1)."""
    match = GPU_ARGUMENT.match(text.strip())
    if match is None:
        raise BenchError(f"--gpu {text!r}: expected NAME:COUNT, e.g. A10:2 or H100-SXM:8")
    if match["count"] is not None and int(match["count"]) < 1:
        raise BenchError(f"--gpu {text!r}: COUNT must be 1 or more (GPUs per node), e.g. {match['name']}:1")
    return match["name"], int(match["count"] or 1)


def gpu_fields(name: str, precision: str) -> dict[str, object]:
    """What a profile's `gpu:` entry stands for: the catalog's memory, card and peak at the profile's precision."""
    entry = gpu(name)
    return {
        "memory_per_device_gb": entry.memory_gb,
        "card": entry.card,
        "peak_tflops": entry.peak_tflops(precision),
    }
