"""Check the cuda image, with or without a GPU: `python check_image.py [--lock FILE] [--build-op ARCH]`.

Run inside the image (`make check-cuda-image` mounts it; docs/docker.md). Without a GPU it proves the CUDA build
is complete: torch's CUDA build imports, every installed distribution is the lock's, bitsandbytes' CUDA library
for torch's CUDA version loads, DeepSpeed finds nvcc through CUDA_HOME, and with --build-op nvcc really compiles
DeepSpeed's FusedAdam CUDA op for that architecture (e.g. 8.6) and the extension imports. With `--gpus` it also
runs a matmul on every visible GPU and reads the driver through NVML. Exit status 1 when a check fails.
"""

import argparse
import ctypes
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

LOCK = Path("/opt/dpo-bench/requirements.lock")
INSTALLER = {"pip"}  # the venv's own pip: the installer, not a pin
failures: list[str] = []


def check(name: str, run: Callable[[], str]) -> None:
    try:
        print(f"ok    {name}: {run()}", flush=True)
    except Exception as exc:  # every failure is reported, then the next check runs
        failures.append(name)
        print(f"FAIL  {name}: {type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]}", flush=True)


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_matches(lock: Path) -> str:
    pinned = {}
    for line in lock.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.strip().split("==")
            pinned[normalize(name)] = version
    installed = {normalize(d.metadata["Name"]): d.version for d in metadata.distributions()}
    extra = sorted(set(installed) - set(pinned) - INSTALLER)
    missing = sorted(set(pinned) - set(installed))
    shared = set(pinned) & set(installed)
    wrong = sorted(f"{n} {installed[n]} != {pinned[n]}" for n in shared if installed[n] != pinned[n])
    if extra or missing or wrong:
        raise AssertionError(f"not installed: {missing}; not in the lock: {extra}; other versions: {wrong}")
    return f"{len(pinned)} distributions, exactly the lock's pins"


def torch_build() -> str:
    import torch

    assert torch.version.cuda, f"torch {torch.__version__} is not a CUDA build"
    arches = torch._C._cuda_getArchFlags()  # compiled-in kernels; needs no GPU, unlike torch.cuda.get_arch_list()
    return (
        f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, "
        f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, kernels for {arches}, "
        f"cuda available: {torch.cuda.is_available()} ({torch.cuda.device_count()} devices)"
    )


def bitsandbytes_cuda() -> str:
    import bitsandbytes
    import torch

    folder = Path(bitsandbytes.__file__).parent
    library = folder / f"libbitsandbytes_cuda{torch.version.cuda.replace('.', '')}.so"
    assert library.is_file(), f"{library.name} missing; there are {sorted(p.name for p in folder.glob('*.so'))}"
    ctypes.CDLL(str(library))  # its CUDA dependencies (cudart, cublas, cusparse) resolve from torch's wheels
    return f"bitsandbytes {bitsandbytes.__version__}: {library.name} loads"


def bitsandbytes_report() -> str:
    done = subprocess.run([sys.executable, "-m", "bitsandbytes"], capture_output=True, text=True, timeout=300)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    print("\n".join(f"      | {line}" for line in lines[-25:]))
    assert done.returncode == 0, f"python -m bitsandbytes exited {done.returncode}"
    return "python -m bitsandbytes exit 0 (output above)"


def nvcc() -> str:
    from torch.utils.cpp_extension import CUDA_HOME

    assert CUDA_HOME, "torch finds no CUDA_HOME"
    compiler = Path(CUDA_HOME) / "bin" / "nvcc"
    release = subprocess.run([str(compiler), "--version"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"release ([\d.]+)", release)
    import torch

    assert found and found[1] == torch.version.cuda, f"nvcc {found and found[1]} != torch's CUDA {torch.version.cuda}"
    assert (Path(CUDA_HOME) / "include" / "cuda_runtime.h").is_file(), "no cuda_runtime.h under CUDA_HOME/include"
    return f"CUDA_HOME={CUDA_HOME}, nvcc {found[1]}"


def deepspeed_builders() -> str:
    from deepspeed.accelerator import get_accelerator
    from deepspeed.ops.op_builder import CPUAdamBuilder  # the accelerator's: DeepSpeed picks cpu without a GPU
    from deepspeed.ops.op_builder.fused_adam import FusedAdamBuilder  # the CUDA builder, whatever the accelerator

    compatible = {b.NAME: b().is_compatible(verbose=True) for b in (CPUAdamBuilder, FusedAdamBuilder)}
    assert all(compatible.values()), f"not compatible: {compatible}"
    return f"accelerator {get_accelerator().device_name()}, compatible: {compatible}"


def ds_report() -> str:
    """DeepSpeed's own report as a GPU machine gets it (DS_ACCELERATOR=cuda: CUDA ops, nvcc and torch's CUDA)."""
    env = os.environ | {"DS_ACCELERATOR": "cuda"}
    done = subprocess.run(["ds_report"], capture_output=True, text=True, timeout=300, env=env)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout)
    keep = re.compile(r"^(fused_adam|cpu_adam|torch (version|cuda version)|nvcc version|deepspeed info) ")
    print("\n".join(f"      | {line}" for line in plain.splitlines() if keep.search(line)))
    assert done.returncode == 0, f"ds_report exited {done.returncode}: {done.stderr.strip()[-200:]}"
    versions = dict(re.findall(r"^(torch cuda|nvcc) version \.+ (\S+)", plain, re.M))
    assert versions.get("nvcc") == versions.get("torch cuda"), f"ds_report: {versions}"
    return f"ds_report (DS_ACCELERATOR=cuda) exit 0, nvcc {versions['nvcc']} = torch's CUDA"


def prebuilt_cpu_adam() -> str:
    """DeepSpeedCPUAdam (zero3_offload) was built into the image as the cuda accelerator loads it: loading it now,
    with DS_ACCELERATOR=cuda as on a GPU, finds it instead of compiling it again (which takes minutes)."""
    folder = Path(os.environ["TORCH_EXTENSIONS_DIR"])
    built = sorted(folder.glob("*/cpu_adam/cpu_adam.so"))
    assert built, f"no cpu_adam.so under {folder}"
    before = built[0].stat().st_mtime_ns
    code = "from deepspeed.accelerator import get_accelerator as a; a().create_op_builder('CPUAdamBuilder').load()"
    started = time.monotonic()
    env = os.environ | {"DS_ACCELERATOR": "cuda"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr.strip()[-300:]
    assert built[0].stat().st_mtime_ns == before, f"the load rebuilt {built[0].name} ({took:.0f} s)"
    return f"{built[0].relative_to(folder)} loads as the cuda accelerator's in {took:.0f} s, no rebuild"


def build_fused_adam(arch: str) -> str:
    """What DeepSpeed's jit_load does, minus its switch to a CPU-only build when torch sees no GPU."""
    from deepspeed.ops.op_builder.fused_adam import FusedAdamBuilder
    from torch.utils.cpp_extension import load

    os.environ["TORCH_CUDA_ARCH_LIST"] = arch
    builder = FusedAdamBuilder()
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as build_dir:
        module = load(
            name="fused_adam_check",
            sources=[os.path.abspath(builder.deepspeed_src_path(p)) for p in builder.sources()],
            extra_include_paths=[os.path.abspath(builder.deepspeed_src_path(p)) for p in builder.include_paths()],
            extra_cflags=builder.strip_empty_entries(builder.cxx_args()),
            extra_cuda_cflags=builder.strip_empty_entries(builder.nvcc_args()),
            build_directory=build_dir,
            with_cuda=True,
        )
        assert hasattr(module, "multi_tensor_adam"), "the built extension has no multi_tensor_adam"
    return f"FusedAdam compiled by nvcc for sm {arch} and imported in {time.monotonic() - started:.0f} s"


def nvml() -> str:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return f"pynvml {metadata.version('nvidia-ml-py')} imports; no driver here ({exc})"
    count = pynvml.nvmlDeviceGetCount()
    names = [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
    return f"driver {pynvml.nvmlSystemGetDriverVersion()}, CUDA {pynvml.nvmlSystemGetCudaDriverVersion()}, {names}"


def gpu_matmul() -> str:
    import torch

    done = []
    for index in range(torch.cuda.device_count()):
        x = torch.randn(1024, 1024, device=f"cuda:{index}", dtype=torch.bfloat16)
        torch.cuda.synchronize(index)
        done.append(f"{torch.cuda.get_device_name(index)}: {float((x @ x).float().abs().mean()):.1f}")
    return "; ".join(done)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lock", type=Path, default=LOCK, help="the lock the image was built from")
    parser.add_argument("--build-op", metavar="ARCH", help="compile DeepSpeed's FusedAdam for this arch, e.g. 8.6")
    args = parser.parse_args()
    check("lock", lambda: lock_matches(args.lock))
    check("torch", torch_build)
    check("bitsandbytes cuda library", bitsandbytes_cuda)
    check("bitsandbytes report", bitsandbytes_report)
    check("nvcc", nvcc)
    check("deepspeed op builders", deepspeed_builders)
    check("ds_report", ds_report)
    check("deepspeed cpu_adam prebuilt", prebuilt_cpu_adam)
    if args.build_op:
        check("deepspeed cuda op build", lambda: build_fused_adam(args.build_op))
    check("nvml", nvml)
    import torch

    if torch.cuda.is_available():
        check("gpu matmul", gpu_matmul)
    print(f"{len(failures)} checks failed: {', '.join(failures)}" if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
