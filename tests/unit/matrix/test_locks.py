"""The cpu and cuda locks are one truth: they differ only where the platform forces them to."""

import re
from pathlib import Path

import pytest

from bench.paths import PROJECT_ROOT

PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;#]+)$")

CUDA_ONLY = {
    # torch 2.13.0's CUDA 13.0 runtime from PyPI (its Requires-Dist), and triton, its GPU compiler
    "cuda-bindings",
    "cuda-pathfinder",
    "cuda-toolkit",
    "nvidia-cublas",
    "nvidia-cuda-cupti",
    "nvidia-cuda-nvrtc",
    "nvidia-cuda-runtime",
    "nvidia-cudnn-cu13",
    "nvidia-cufft",
    "nvidia-cufile",
    "nvidia-curand",
    "nvidia-cusolver",
    "nvidia-cusparse",
    "nvidia-cusparselt-cu13",
    "nvidia-nccl-cu13",
    "nvidia-nvjitlink",
    "nvidia-nvshmem-cu13",
    "nvidia-nvtx",
    "triton",
    # cuda-toolkit[nvcc,cccl]: nvcc, its front end and headers, for DeepSpeed's JIT-built CUDA ops
    "nvidia-cuda-cccl",
    "nvidia-cuda-crt",
    "nvidia-cuda-nvcc",
    "nvidia-nvvm",
    # NVML bindings: the worker's GPU memory sampler (bench/worker/nvml.py)
    "nvidia-ml-py",
}
LOCAL_BUILD = {"torch": "cpu"}
"""Same release, different build: the cpu lock pins PyTorch's CPU wheel (local version +cpu)."""


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(path: Path) -> dict[str, str]:
    """Normalized name -> pinned version; raises ValueError on a line that is not an exact pin or a duplicate."""
    pins: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = PIN.match(line)
        if match is None:
            raise ValueError(f"{path}:{number}: not an exact pin: {line!r}")
        name = normalize(match["name"])
        if name in pins:
            raise ValueError(f"{path}:{number}: {name} pinned twice")
        pins[name] = match["version"]
    return pins


@pytest.fixture(scope="module")
def locks() -> tuple[dict[str, str], dict[str, str]]:
    return (
        parse_lock(PROJECT_ROOT / "docker" / "cpu" / "requirements.lock"),
        parse_lock(PROJECT_ROOT / "docker" / "cuda" / "requirements.lock"),
    )


def test_the_cuda_lock_adds_exactly_the_platform_packages(locks):
    cpu, cuda = locks
    assert set(cpu) - set(cuda) == set()
    assert set(cuda) - set(cpu) == CUDA_ONLY


def test_every_shared_package_has_the_same_version(locks):
    cpu, cuda = locks
    differing = {name: (cpu[name], cuda[name]) for name in set(cpu) & set(cuda) if cpu[name] != cuda[name]}
    assert set(differing) == set(LOCAL_BUILD)
    for name, local in LOCAL_BUILD.items():
        assert cpu[name] == f"{cuda[name]}+{local}", differing[name]


def test_the_cuda_lock_has_the_cuda_build_of_torch(locks):
    _, cuda = locks
    assert "+" not in cuda["torch"]  # PyPI's torch wheel for Linux x86_64 is the CUDA build
    assert all(name.endswith("-cu13") for name in CUDA_ONLY if name.startswith("nvidia-") and "-cu1" in name)


def test_parse_lock_rejects_a_range(tmp_path):
    lock = tmp_path / "requirements.lock"
    lock.write_text("# header\ntorch>=2.13\n")
    with pytest.raises(ValueError, match=r"requirements.lock:2: not an exact pin: 'torch>=2.13'"):
        parse_lock(lock)
