"""The child process of bench/results/cpu_features.py: what torch, oneDNN and bitsandbytes do on this CPU.

Prints one line `cpu_probe:<json>` (a CpuFeatures without the flags and environment, which the parent reads itself)
and, before it, oneDNN's verbose lines for one bf16 matmul (its version, ISA and the implementation it picked).

    python -m bench.results.cpu_probe
"""

import importlib.metadata
import json
import sys
from typing import Any

from bench.results.cpu_features import PROBE_PREFIX

SHAPES = 16
"""Fresh shapes measured per product: enough pages to average over (one primitive keeps ~0.01-0.7 MiB)."""
HIDDEN, RANK = 64, 8
"""A LoRA adapter's shape (hidden 64, rank 8): what the quantized cells' bf16 matmuls are."""


def anon_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def routes_bf16_to_onednn(capabilities: dict[str, Any]) -> bool:
    """ATen's mkldnn_bf16_device_check (aten/src/ATen/native/mkldnn/Utils.h): bf16 matmuls go to oneDNN on x86
    only with AVX-512 BW, VL and DQ. Pure."""
    return all(capabilities.get(name) for name in ("avx512_bw", "avx512_vl", "avx512_dq"))


def bf16_products(torch: Any, shapes: int = SHAPES, hidden: int = HIDDEN, rank: int = RANK) -> dict[str, float]:
    """Anonymous memory kept per bf16 matmul of a new shape, for each of the three products an adapter's step makes
    ([M, in] x [in, r] forward, [M, r] x [r, in] for the input's gradient, [r, M] x [M, in] for the weight's):
    `shapes` new M each (each a new oneDNN primitive, JIT-compiled and cached), after one warm-up shape."""
    big = torch.randn(16 + 8 * (shapes + 1), max(hidden, rank), dtype=torch.bfloat16)
    products = {
        "forward": lambda m: torch.mm(big[:m, :hidden], big[:hidden, :rank]),
        "input_grad": lambda m: torch.mm(big[:m, :rank], big[:rank, :hidden]),
        "weight_grad": lambda m: torch.mm(big[:m, :rank].t(), big[:m, :hidden]),
    }
    kept = {}
    for name, product in products.items():
        product(8)
        before = anon_bytes()
        for i in range(shapes):
            product(16 + 8 * i)
        kept[name] = (anon_bytes() - before) / shapes
    return kept


def training_ops(torch: Any, bnb: Any) -> tuple[dict[str, list[str]], list[str]]:
    """The operators one forward and backward of an int8 and of an nf4 64x64 layer dispatch with an fp32 input that
    needs a gradient (as under LoRA): bitsandbytes' own and the matmuls, with their dtype."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Trace(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = str(func.overloadpacket)
            if name.startswith("bitsandbytes.") or name in ("aten.mm", "aten.addmm", "aten.bmm", "aten._int_mm"):
                dtypes = sorted({str(a.dtype).removeprefix("torch.") for a in args if isinstance(a, torch.Tensor)})
                self.ops.append(f"{name}[{','.join(dtypes)}]" if name.startswith("aten.") else name)
            return func(*args, **(kwargs or {}))

    weight = torch.randn(64, 64)
    layers = {
        "int8": lambda: bnb.nn.Linear8bitLt(64, 64, bias=False, has_fp16_weights=False),
        "nf4": lambda: bnb.nn.Linear4bit(64, 64, bias=False, compute_dtype=torch.float32, quant_type="nf4"),
    }
    params = {
        "int8": lambda: bnb.nn.Int8Params(weight.clone(), requires_grad=False, has_fp16_weights=False),
        "nf4": lambda: bnb.nn.Params4bit(weight.clone(), requires_grad=False, quant_type="nf4"),
    }
    found: dict[str, list[str]] = {}
    errors: list[str] = []
    for quant, make in layers.items():
        try:
            layer = make()
            layer.weight = params[quant]()
            layer = layer.to("cpu").train()
            x = torch.randn(5, 64, requires_grad=True)
            with Trace() as trace:
                layer(x).sum().backward()
            found[quant] = list(dict.fromkeys(trace.ops))
        except Exception as exc:  # a probe records what failed, never stops the run
            errors.append(f"{quant}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    return found, errors


def bitsandbytes_facts(torch: Any) -> dict[str, Any] | None:
    try:
        version = importlib.metadata.version("bitsandbytes")
    except importlib.metadata.PackageNotFoundError:
        return None
    try:
        import bitsandbytes as bnb
        from bitsandbytes import cextension
    except Exception as exc:
        return {"version": version, "errors": [f"import: {type(exc).__name__}: {exc}".splitlines()[0]]}
    library = getattr(getattr(cextension.lib, "_lib", None), "_name", None)
    kernels = [
        name.removeprefix("bitsandbytes::")
        for name in sorted(torch._C._dispatch_get_all_op_names())
        if name.startswith("bitsandbytes::") and torch._C._dispatch_has_kernel_for_dispatch_key(name, "CPU")
    ]
    ops, errors = training_ops(torch, bnb)
    return {
        "version": version,
        "backend": cextension.BNB_BACKEND,
        "native_library": library.rsplit("/", 1)[-1] if library else None,
        "cpu_kernels": kernels,
        "training_ops": ops,
        "errors": errors,
    }


def probe() -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    capabilities = torch.cpu.get_capabilities() if hasattr(torch.cpu, "get_capabilities") else {}
    routed = routes_bf16_to_onednn(capabilities)
    try:
        ipex = importlib.metadata.version("intel_extension_for_pytorch")
    except importlib.metadata.PackageNotFoundError:
        ipex = None
    onednn: dict[str, Any] = {}
    if routed and torch.backends.mkldnn.is_available():
        kept = bf16_products(torch)
        onednn["bf16_primitive_bytes"] = sum(kept.values()) / len(kept)
        sys.stdout.flush()
        with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON_CREATION):
            torch.mm(torch.randn(997, HIDDEN, dtype=torch.bfloat16), torch.randn(HIDDEN, RANK, dtype=torch.bfloat16))
    return {
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_onednn_bf16": routed,
        "onednn": onednn,
        "ipex": ipex,
        "bitsandbytes": bitsandbytes_facts(torch),
    }


def main() -> int:
    found = probe()
    sys.stdout.flush()
    print(PROBE_PREFIX + json.dumps(found), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
