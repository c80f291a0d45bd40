"""What one oneDNN bf16 matmul primitive keeps, per ISA oneDNN may pick: the measurement behind
bench/estimate/cpu_kernels.py (docs/estimator.md, "CPUs").

For each ISA cap (ONEDNN_MAX_CPU_ISA; `default`: oneDNN's pick on this CPU) a child runs bf16 matmuls of SHAPES new
shapes of each of a LoRA adapter's three products and reports the growth of its anonymous memory per shape and the
implementation oneDNN created. A cap above this CPU's ISA measures nothing new: run it on the CPU in question.

    python -m bench selfbench onednn-primitives [--caps default AVX512_CORE_BF16 AVX512_CORE AVX2] [--shapes 100]

Prints one JSON object: per cap, the implementation and KiB per primitive for each product, and their mean."""

import argparse
import json
import os
import subprocess
import sys
from typing import Any

CAPS = ("default", "AVX512_CORE_BF16", "AVX512_CORE", "AVX2")
HIDDEN, RANK = 64, 8
"""The tiny workload's adapters (q/k/v/o, hidden 64, rank 8); the figure barely moves with the shape (64 x 256,
64 x 64 within 10 %)."""


def child(shapes: int, hidden: int, rank: int) -> dict[str, Any]:
    import torch

    from bench.results.cpu_probe import bf16_products

    torch.set_num_threads(1)
    kept = bf16_products(torch, shapes, hidden, rank)
    sys.stdout.flush()
    with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON_CREATION):
        torch.mm(torch.randn(997, hidden, dtype=torch.bfloat16), torch.randn(hidden, rank, dtype=torch.bfloat16))
    return {name: value / 1024 for name, value in kept.items()}


def measure(cap: str, shapes: int, hidden: int, rank: int) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("ONEDNN_MAX_CPU_ISA", None)
    if cap != "default":
        env["ONEDNN_MAX_CPU_ISA"] = cap
    argv = [sys.executable, "-m", "bench.selfbench.onednn_primitives", "--child", "--shapes", str(shapes)]
    argv += ["--hidden", str(hidden), "--rank", str(rank)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=True)
    lines = done.stdout.splitlines()
    figures = json.loads(next(ln for ln in lines if ln.startswith("{")))
    created = [ln.split(",") for ln in lines if ",create:" in ln and ",matmul," in ln]
    return {
        "implementation": created[0][6] if created else None,
        "kib_per_primitive": {k: round(v, 1) for k, v in figures.items()},
        "mean_kib": round(sum(figures.values()) / len(figures), 1),
    }


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--caps", nargs="*", default=list(CAPS))
    parser.add_argument("--shapes", type=int, default=100)
    parser.add_argument("--hidden", type=int, default=HIDDEN)
    parser.add_argument("--rank", type=int, default=RANK)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    if args.child:
        found = child(args.shapes, args.hidden, args.rank)
        print(json.dumps(found), flush=True)
        return 0
    result = {cap: measure(cap, args.shapes, args.hidden, args.rank) for cap in args.caps}
    print(json.dumps(result, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    """The tool as a process of its own: the measuring child `measure` starts per ISA cap."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="python -m bench.selfbench.onednn_primitives", description=__doc__.splitlines()[0]
    )
    arguments(parser)
    args = parser.parse_args(argv)
    args.argv = argv
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
