"""Random weights that are the same bytes on every device: a sharded bf16 safetensors checkpoint of a config.json,
generated tensor by tensor on the CPU or on a GPU.

torch's generators differ by device (CUDA's Philox stream even by SM count), so a checkpoint made with them would
name its device. Here every element is a pure function of (seed, tensor name, index): SplitMix64 of a counter in
int64, its four 16-bit fields summed (Irwin-Hall: about normal, bounded at ±3.46 sd), converted to float32 exactly,
scaled once and rounded to bf16; each step is exact or correctly rounded, so every device writes the same bytes.
`python -m bench.assets.random_weights CONFIG_DIR OUT --seed N --device cuda` runs it in a process of its own (the
preparing process never holds a CUDA context) and checks each tensor's first and last elements against the CPU's."""

import argparse
import hashlib
import json
from pathlib import Path
from typing import Any

from bench.units import GiB

VERSION = "splitmix64-irwin-hall4-v1"
"""Names the generator. A change to how a value is made changes it, and with it the asset folder (prepare.py)."""
SHARD_BYTES = 2 * GiB
CHUNKS = {"cpu": 1 << 15, "other": 1 << 24}
"""Elements generated at once. CPU: a 256 KiB int64 block, in cache, and at torch's grain size, so one thread does
it (measured on a loaded 2-core VM: 23 s per 1.24B elements at 2^15-2^17 with one thread, ~350 s at 2^17 with two
threads and 55 s at 2^24); a GPU: large blocks, few kernel launches."""
SAMPLE = 1024
"""Elements at each end of a tensor that a device other than the CPU checks against the CPU's."""
FIELDS = 4
SUM_STD = ((2**32 - 1) * FIELDS / 12) ** 0.5
"""The sum's standard deviation: FIELDS x the variance (65536² - 1) / 12 of a uniform 16-bit field."""
CENTRE = FIELDS // 2
"""Minus the sum's mean: a signed 16-bit field averages -1/2."""


def _int64(value: int) -> int:
    """A 64-bit constant as the signed int64 torch holds."""
    return value - (1 << 64) if value >= 1 << 63 else value


GOLDEN = _int64(0x9E3779B97F4A7C15)
MIX1 = _int64(0xBF58476D1CE4E5B9)
MIX2 = _int64(0x94D049BB133111EB)


def tensor_key(seed: int, name: str) -> int:
    """Where one tensor's counter starts: the seed and its name, hashed (no two tensors share a stream)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "little", signed=True)


class _Workspace:
    """The temporaries of one chunk, allocated once per tensor: a fresh 128 MiB buffer per operation costs more in
    page faults than the operation."""

    def __init__(self, count: int, device: str) -> None:
        import torch

        self.state = torch.empty(count, dtype=torch.int64, device=device)
        self.shifted = torch.empty_like(self.state)
        self.total = torch.empty(count, dtype=torch.int32, device=device)
        self.field = torch.empty_like(self.total)
        self.values = torch.empty(count, dtype=torch.float32, device=device)


def _mix(state: Any, shifted: Any, bits: int) -> None:
    """state ^= state >>> bits (a logical shift: torch's `>>` on int64 copies the sign bit)."""
    import torch

    torch.bitwise_right_shift(state, bits, out=shifted)
    shifted.bitwise_and_((1 << (64 - bits)) - 1)
    state.bitwise_xor_(shifted)


def _fill_chunk(out: Any, key: int, start: int, scale: float, work: _Workspace) -> None:
    """Elements start .. start + len(out) of the tensor whose key is `key`, written into `out` (bf16)."""
    import torch

    count = out.numel()
    state, total, field = work.state[:count], work.total[:count], work.field[:count]
    torch.arange(start + 1, start + count + 1, out=state)
    state.mul_(GOLDEN).add_(key)  # SplitMix64's state after start + 1 steps, then its output function
    _mix(state, work.shifted[:count], 30)
    state.mul_(MIX1)
    _mix(state, work.shifted[:count], 27)
    state.mul_(MIX2)
    _mix(state, work.shifted[:count], 31)
    lanes = state.view(torch.int16).view(count, FIELDS)  # little-endian on every host and GPU torch runs on
    total.copy_(lanes[:, 0])
    for lane in range(1, FIELDS):
        field.copy_(lanes[:, lane])
        total.add_(field)
    total.add_(CENTRE)
    values = work.values[:count]
    values.copy_(total)
    values.mul_(scale)
    out.copy_(values)


def fill_random(out: Any, name: str, std: float, seed: int, start: int = 0) -> None:
    """Fill the bf16 tensor `out` (any device) with elements start .. of parameter `name`'s values."""
    import torch

    flat = out.view(-1)
    chunk = CHUNKS["cpu" if out.device.type == "cpu" else "other"]
    work = _Workspace(min(chunk, flat.numel()), str(out.device))
    scale = torch.tensor(std / SUM_STD, dtype=torch.float32).item()  # a float32 value: float or double math agree
    key = tensor_key(seed, name)
    for offset in range(0, flat.numel(), chunk):
        _fill_chunk(flat[offset : offset + chunk], key, start + offset, scale, work)


def random_tensor(name: str, shape: tuple[int, ...], std: float, seed: int, device: str = "cpu") -> Any:
    """One parameter as the checkpoint holds it (bf16, on `device`): matrices random, biases 0, norm weights 1."""
    import torch

    if len(shape) < 2:
        return (torch.zeros if name.endswith("bias") else torch.ones)(shape, dtype=torch.bfloat16, device=device)
    out = torch.empty(shape, dtype=torch.bfloat16, device=device)
    fill_random(out, name, std, seed)
    return out


def check_against_cpu(name: str, tensor: Any, std: float, seed: int) -> None:
    """Raise when `tensor`'s first and last SAMPLE elements differ from the CPU's: the device does not give the
    same bytes."""
    import torch

    flat = tensor.detach().view(-1)
    for start in sorted({0, max(0, flat.numel() - SAMPLE)}):
        expected = torch.empty(min(SAMPLE, flat.numel() - start), dtype=torch.bfloat16)
        fill_random(expected, name, std, seed, start)
        if not torch.equal(flat[start : start + expected.numel()].cpu(), expected):
            raise RuntimeError(f"{name}: elements {start}.. generated on {tensor.device} differ from the CPU's")


def meta_model(config: Any) -> Any:
    """The architecture with every tensor on the meta device: shapes and names, no memory."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def parameter_count(config: Any) -> int:
    return sum(p.numel() for p in meta_model(config).parameters())


def shard_groups(model: Any, shard_bytes: int) -> list[list[tuple[str, tuple[int, ...]]]]:
    """The parameters to write, (name, shape), in shards of at most `shard_bytes` of bf16.

    Tied weights are written once (from_pretrained ties them again); non-persistent buffers (rotary tables) are
    rebuilt by the model at load. Persistent buffers are not written: none of the shipped architectures has one."""
    parameters = {id(p) for p in model.parameters()}
    groups: list[list[tuple[str, tuple[int, ...]]]] = [[]]
    group_bytes, seen = 0, set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in seen or id(tensor) not in parameters:
            continue
        seen.add(id(tensor))
        size = tensor.numel() * 2
        if groups[-1] and group_bytes + size > shard_bytes:
            groups.append([])
            group_bytes = 0
        groups[-1].append((name, tuple(tensor.shape)))
        group_bytes += size
    return groups


def write_random_checkpoint(
    config: Any, out: Path, seed: int, device: str = "cpu", shard_bytes: int = SHARD_BYTES
) -> None:
    """A sharded bf16 safetensors checkpoint of `config` with random weights, generated on `device` one tensor at a
    time and written shard by shard: host memory holds one shard."""
    import torch
    from safetensors.torch import save_file

    std = getattr(config, "initializer_range", None) or getattr(config, "init_std", 0.02)
    out.mkdir(parents=True, exist_ok=True)
    groups = shard_groups(meta_model(config), shard_bytes)
    weight_map, total = {}, 0
    for index, group in enumerate(groups, start=1):
        filename = f"model-{index:05d}-of-{len(groups):05d}.safetensors"
        shard = {}
        for name, shape in group:
            tensor = random_tensor(name, shape, std, seed, device)
            if tensor.device.type != "cpu":
                check_against_cpu(name, tensor, std, seed)
            shard[name] = tensor.cpu()
            del tensor
        save_file(shard, str(out / filename), metadata={"format": "pt"})
        total += sum(t.numel() * t.element_size() for t in shard.values())
        weight_map |= dict.fromkeys(shard, filename)
        del shard
    index_file = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index_file, indent=2))
    config.dtype = torch.bfloat16
    config.save_pretrained(str(out))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.assets.random_weights", description=__doc__)
    parser.add_argument("config_dir", help="the folder of the config.json")
    parser.add_argument("out", help="the checkpoint's folder")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="where the values are generated: cpu, cuda, cuda:1, ...")
    args = parser.parse_args(argv)
    from transformers import AutoConfig

    write_random_checkpoint(AutoConfig.from_pretrained(args.config_dir), Path(args.out), args.seed, args.device)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
