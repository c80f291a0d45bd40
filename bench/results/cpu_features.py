"""What this CPU switches on in the libraries a cell runs (env.json `cpu_features`): the part of the environment that
changes memory on the same code and the same lock (docs/estimator.md, "CPUs").

Each fact from where the library itself decides: the instruction sets torch, oneDNN and bitsandbytes test for
(FLAGS); oneDNN as torch uses it (whether bf16 matmuls go to oneDNN, its ISA, the implementation a bf16 matmul gets
and what one primitive keeps, the ONEDNN_* / DNNL_* variables, IPEX); bitsandbytes' backend, native library, CPU
kernels and the operations an int8 and an nf4 training step dispatch. The library facts come from a child process
(`python -m bench.results.cpu_probe`: importing bitsandbytes would cost the runner ~110 MiB); a probe that fails
records its first line and never stops a run."""

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from bench.results.probe_cache import keep_output, kept_output, probe_key

FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512dq",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "amx_fp16",
)
"""/proc/cpuinfo flags the libraries test for: torch's kernel dispatch (AVX2, AVX-512), ATen's routing of bf16
matmuls to oneDNN (avx512bw/vl/dq), oneDNN's native bf16 and int8 kernels (avx512_bf16, VNNI, AMX), bitsandbytes'
int8 matmul (torch._int_mm with AVX-512) and fused 4-bit CPU kernel (avx512_bf16)."""

ONEDNN_ENV_PREFIXES = ("ONEDNN_", "DNNL_", "MKL_", "KMP_", "ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS")
"""Environment variables that change which kernels run or what they keep (ONEDNN_MAX_CPU_ISA,
ONEDNN_PRIMITIVE_CACHE_CAPACITY, ATEN_CPU_CAPABILITY, ...)."""

PROBE_TIMEOUT_S = 120


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class OneDnn(_Open):
    version: str | None = None
    isa: str | None = None
    """oneDNN's own description of the ISA it uses (`Intel AVX10.1 and Intel AMX with bfloat16 and 8-bit integer
    support`)."""
    bf16_matmul: str | None = None
    """The implementation oneDNN created for a bf16 matmul (`brg_matmul:avx10_1_512_amx`, `brg_matmul:
    avx512_core_bf16`, `gemm:jit:bf16`); None where torch does not send bf16 matmuls to oneDNN."""
    bf16_primitive_bytes: float | None = None
    """Measured: anonymous memory a bf16 matmul of a new shape keeps after it ran (oneDNN's primitive cache holds
    the JIT-compiled kernels of every shape seen), mean over fresh shapes of a LoRA adapter's three products."""
    env: dict[str, str] = {}
    """The variables of ONEDNN_ENV_PREFIXES set for the cells."""


class Bitsandbytes(_Open):
    version: str | None = None
    backend: str | None = None
    """bitsandbytes' BNB_BACKEND: CPU, CUDA, ROCm, XPU."""
    native_library: str | None = None
    """The native library it loaded (file name); None: running without one."""
    cpu_kernels: list[str] = []
    """Its operators with a CPU kernel registered on this CPU (some only with AVX-512 or AVX-512 BF16)."""
    training_ops: dict[str, list[str]] = {}
    """Per quantization, the operators one forward and backward of a quantized layer with an fp32 input dispatched
    (bitsandbytes' own, and matmuls with their dtype)."""
    errors: list[str] = []


class CpuFeatures(_Open):
    flags: list[str] = []
    """The FLAGS /proc/cpuinfo lists."""
    torch_cpu_capability: str | None = None
    """torch's kernel dispatch level (torch.backends.cpu.get_cpu_capability()): DEFAULT, AVX2, AVX512."""
    torch_onednn_bf16: bool | None = None
    """Whether torch sends bf16 matmuls to oneDNN (ATen mkldnn_bf16_device_check: AVX-512 BW, VL and DQ)."""
    onednn: OneDnn = Field(default_factory=OneDnn)
    ipex: str | None = None
    """intel_extension_for_pytorch's version where installed (never imported by the suite)."""
    bitsandbytes: Bitsandbytes | None = None
    probe_error: str | None = None
    """The first line of the probe's failure, where it failed."""
    probed_at: str | None = None
    """When the probe ran (UTC): a run on a machine and interpreter probed before reads that probe's answer."""

    def facts(self) -> dict[str, str]:
        """What compare holds equal between two runs, as shown to people."""
        bnb = self.bitsandbytes or Bitsandbytes()
        return {
            "CPU instruction sets": " ".join(self.flags) or "none listed",
            "torch CPU capability": str(self.torch_cpu_capability),
            "oneDNN ISA": str(self.onednn.isa),
            "oneDNN bf16 matmul": str(self.onednn.bf16_matmul),
            "oneDNN/MKL environment": " ".join(f"{k}={v}" for k, v in sorted(self.onednn.env.items())) or "none",
            "IPEX": str(self.ipex),
            "bitsandbytes backend": f"{bnb.backend} ({bnb.native_library})",
            "bitsandbytes CPU kernels": " ".join(bnb.cpu_kernels) or "none",
            "bitsandbytes training ops": "; ".join(f"{q}: {' '.join(ops)}" for q, ops in bnb.training_ops.items())
            or "none",
        }


class MeasuredAfter(_Open):
    """cpu_features for a run whose env.json predates them (CPU_FEATURES_AFTER_FILE beside it): measured afterwards
    on a machine of the same kind, with the evidence that it is one."""

    measured_at: str
    machine: str
    """The machine measured, and why it is of the run's kind."""
    evidence: list[str] = []
    """What of the run itself agrees (its env.json, its logs)."""
    cpu_features: CpuFeatures


def cpu_flags(cpuinfo: str) -> list[str]:
    """The FLAGS the first processor of /proc/cpuinfo lists, in FLAGS' order. Pure."""
    line = next((ln for ln in cpuinfo.splitlines() if ln.startswith("flags")), "")
    present = set(line.split(":", 1)[1].split()) if ":" in line else set()
    return [flag for flag in FLAGS if flag in present]


def library_env(environ: dict[str, str]) -> dict[str, str]:
    """The variables of ONEDNN_ENV_PREFIXES set in `environ`. Pure."""
    return {k: v for k, v in sorted(environ.items()) if k.startswith(ONEDNN_ENV_PREFIXES)}


def detect_cpu_features(python: str = sys.executable, timeout_s: float = PROBE_TIMEOUT_S) -> CpuFeatures:
    """This machine's CpuFeatures: the flags read here, the libraries' facts from a child process (or from the same
    probe kept for this machine and interpreter: bench/results/probe_cache.py)."""
    cpuinfo = Path("/proc/cpuinfo")
    text = cpuinfo.read_text() if cpuinfo.is_file() else ""
    flags, env = cpu_flags(text), library_env(dict(os.environ))
    key = probe_key(python, text, env)
    kept = kept_output(key) if key else None
    found = parse_probe(kept[0]) if kept else None
    if kept and found is not None:
        probed_at = kept[1]
    else:
        try:
            out = subprocess.run(
                [python, "-m", "bench.results.cpu_probe"],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                cwd=Path(__file__).resolve().parents[2],
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return CpuFeatures(flags=flags, onednn=OneDnn(env=env), probe_error=str(exc).splitlines()[0])
        found = parse_probe(out.stdout)
        if found is None:
            last = (out.stderr.strip().splitlines() or [f"exit code {out.returncode}"])[-1]
            return CpuFeatures(flags=flags, onednn=OneDnn(env=env), probe_error=f"probe: {last}")
        probed_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        if key:
            keep_output(key, out.stdout, probed_at)
    found.flags, found.onednn.env, found.probed_at = flags, env, probed_at
    return found


PROBE_PREFIX = "cpu_probe:"
"""The probe's one JSON line; every other line of its stdout is oneDNN's verbose output."""


def parse_probe(stdout: str) -> CpuFeatures | None:
    """The probe's CpuFeatures, with oneDNN's version, ISA and bf16 matmul implementation read from the verbose
    lines it printed (`onednn_verbose,v1,info,cpu,isa:...`, `...,create:cache_miss,cpu,matmul,<impl>,...`). Pure."""
    line = next((ln for ln in stdout.splitlines() if ln.startswith(PROBE_PREFIX)), None)
    if line is None:
        return None
    features = CpuFeatures.model_validate(json.loads(line[len(PROBE_PREFIX) :]))
    for verbose in stdout.splitlines():
        fields = verbose.split(",")
        if not verbose.startswith("onednn_verbose") or len(fields) < 4:
            continue
        if fields[2] == "info" and fields[3].startswith("oneDNN v"):
            features.onednn.version = fields[3].split()[1]
        elif fields[2] == "info" and fields[3] == "cpu" and len(fields) > 4 and fields[4].startswith("isa:"):
            features.onednn.isa = ",".join(fields[4:])[len("isa:") :]
        elif fields[2] == "primitive" and fields[3].startswith("create") and len(fields) > 6 and fields[5] == "matmul":
            features.onednn.bf16_matmul = features.onednn.bf16_matmul or fields[6]
    return features
