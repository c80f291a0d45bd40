"""How much logits-sized memory the losses hold at their peak on the CPU, measured on TRL's own code: the fused LM
head (the torch fallback of trl/kernels/chunked_logprob.py: DPO, SFT, KTO) in tiles of min(rows, 4096) x vocab
fp32, the estimator's `cpu_head_backward` (bench/estimate/terms.py); and the full-logits losses of the experimental
ORPO and CPO/SimPO trainers in [R, L, V] logits units, the estimator's MethodSpec.logits_units (matrix/methods.py).

    python -m bench selfbench head-tiles [--rows 512] [--vocab 32768] [--hidden 256]

VmHWM is reset (/proc/self/clear_refs) before each pass and the peak's rise over the resident size is divided by the
unit. The fused head is measured on its second application (the allocator warm), each full-logits loss in a fresh
process on its first. What it measured: docs/evidence/selfbench.md."""

import argparse
import subprocess
import sys
from pathlib import Path


def _status_bytes(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def measure(rows: int, vocab: int, hidden: int) -> tuple[float, float]:
    """(forward, backward) peak in tiles, the second of two identical applications."""
    import torch
    from trl.kernels.chunked_logprob import TOKEN_CHUNK_SIZE, ChunkedLogProbFunction

    torch.manual_seed(0)
    states = torch.randn(rows, hidden, requires_grad=True)
    weight = torch.randn(vocab, hidden) * 0.02
    targets = torch.randint(0, vocab, (rows,))
    tile = min(rows, TOKEN_CHUNK_SIZE) * vocab * 4
    peaks = (0.0, 0.0)
    for _ in range(2):
        Path("/proc/self/clear_refs").write_text("5")
        start = _status_bytes("VmRSS")
        out = ChunkedLogProbFunction.apply(states, weight, None, targets, 1.0, vocab, None, 1.0, ("log_probs",))
        forward = _status_bytes("VmHWM") - start
        Path("/proc/self/clear_refs").write_text("5")
        start = _status_bytes("VmRSS")
        out[0].sum().backward()
        backward = _status_bytes("VmHWM") - start
        states.grad = None
        peaks = (forward / tile, backward / tile)
    return peaks


def measure_full_logits(method: str, rows: int = 4, length: int = 128, vocab: int = 32768, hidden: int = 256) -> float:
    """Peak rise in [rows, length, vocab] fp32 units over one forward + backward of `method`'s loss on the logits
    (`orpo` or `simpo`), first pass in this process."""
    import torch
    import torch.nn.functional as F
    from trl.experimental.cpo import CPOTrainer
    from trl.experimental.orpo import ORPOTrainer

    torch.manual_seed(0)
    states = torch.randn(rows, length, hidden, requires_grad=True)
    weight = torch.randn(vocab, hidden) * 0.02
    labels = torch.randint(0, vocab, (rows, length))
    labels[:, : length // 8] = -100  # the prompt
    half = rows // 2
    Path("/proc/self/clear_refs").write_text("5")
    start = _status_bytes("VmRSS")
    logits = states @ weight.t()
    if method == "orpo":
        chosen = logits[:half][..., :-1, :].contiguous().view(-1, vocab)
        nll = F.cross_entropy(chosen, labels[:half][..., 1:].contiguous().view(-1))
        logps = ORPOTrainer.get_batch_logps(logits, labels, average_log_prob=True)
    else:
        nll = logits.new_zeros(())
        logps = CPOTrainer.get_batch_logps(logits, labels, average_log_prob=True)
    loss = nll - F.logsigmoid(2.0 * (logps[:half] - logps[half:]) - 0.5).mean()
    loss.backward()
    return (_status_bytes("VmHWM") - start) / (rows * length * vocab * 4)


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--full-logits", choices=["orpo", "simpo"], default=None, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(1)
    if args.full_logits:
        print(f"{args.full_logits}: {measure_full_logits(args.full_logits, vocab=args.vocab):.2f} [R, L, V] units")
        return 0
    forward, backward = measure(args.rows, args.vocab, args.hidden)
    print(f"fused head, rows {args.rows}, vocab {args.vocab}: forward {forward:.2f} tiles, backward {backward:.2f}")
    for method in ("orpo", "simpo"):  # a fresh process each: the first pass, as in a training step
        argv = [sys.executable, "-m", "bench.selfbench.head_tiles", "--full-logits", method, "--vocab", str(args.vocab)]
        print(subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1])
    return 0


def main(argv: list[str] | None = None) -> int:
    """The tool as a process of its own: a full-logits loss measured in a fresh process, its first pass."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m bench.selfbench.head_tiles", description=__doc__.splitlines()[0])
    arguments(parser)
    args = parser.parse_args(argv)
    args.argv = argv
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
