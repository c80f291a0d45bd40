"""Random weights are the same bytes on every device (bench/assets/random_weights.py): each element is a pure
function of (seed, tensor name, index), computed here in plain Python integers and compared with what torch writes;
the chunk a device generates at once changes nothing; a device's tensor is checked against the CPU's; and a device
that fails leaves the CPU to write the same checkpoint."""

import hashlib
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bench.assets import prepare as prepare_module
from bench.assets import random_weights as rw
from bench.assets.prepare import prepare
from bench.matrix.profiles import load_workload

MASK = (1 << 64) - 1
GOLDEN_DIGEST = "b016513d0a7ba83f"
"""sha256 (first 16 hex digits) of a (300, 64) embedding's bf16 bytes, seed 0."""


def reference_value(seed: int, name: str, index: int, std: float) -> torch.Tensor:
    """The element's value from the generator's definition: SplitMix64 (unsigned, logical shifts) of the tensor's
    counter, its four 16-bit fields read as int16 and summed, centred, scaled in float32, rounded to bf16."""
    z = (rw.tensor_key(seed, name) + (index + 1) * 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    z ^= z >> 31
    fields = [(z >> (16 * k)) & 0xFFFF for k in range(4)]
    total = sum(f - 0x10000 if f >= 0x8000 else f for f in fields) + 2
    scale = torch.tensor(std / rw.SUM_STD, dtype=torch.float32)
    return (torch.tensor(float(total), dtype=torch.float32) * scale).to(torch.bfloat16)


def test_splitmix64_gives_its_published_first_outputs():
    state = torch.tensor([rw.GOLDEN, rw._int64((2 * 0x9E3779B97F4A7C15) & MASK)], dtype=torch.int64)
    out = state.clone()
    rw._mix(out, torch.empty_like(out), 30)
    out.mul_(rw.MIX1)
    rw._mix(out, torch.empty_like(out), 27)
    out.mul_(rw.MIX2)
    rw._mix(out, torch.empty_like(out), 31)
    assert [v & MASK for v in out.tolist()] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4]  # seed 0, the reference's


def test_every_element_is_the_definitions_value_wherever_it_is():
    name, std = "model.layers.0.mlp.up_proj.weight", 0.02
    tensor = rw.random_tensor(name, (40, 70), std, seed=3)
    flat = tensor.view(-1)
    for index in (0, 1, 2, 69, 70, 1234, 2799):
        assert torch.equal(flat[index], reference_value(3, name, index, std)), index
    far = torch.empty(5, dtype=torch.bfloat16)
    rw.fill_random(far, name, std, 3, start=3_000_000_000)  # past 2^31: the counter is 64-bit
    assert torch.equal(far[4], reference_value(3, name, 3_000_000_004, std))


def test_the_chunk_changes_no_byte(monkeypatch):
    whole = rw.random_tensor("w", (33, 100), 0.02, seed=0)
    monkeypatch.setitem(rw.CHUNKS, "cpu", 7)
    assert torch.equal(rw.random_tensor("w", (33, 100), 0.02, seed=0), whole)
    tail = torch.empty(1000, dtype=torch.bfloat16)
    rw.fill_random(tail, "w", 0.02, 0, start=2300)
    assert torch.equal(tail, whole.view(-1)[2300:])


def test_the_values_are_centred_scaled_and_bounded():
    values = rw.random_tensor("w", (1024, 1024), 0.02, seed=0).float()
    assert values.mean().item() == pytest.approx(0.0, abs=2e-4)
    assert values.std().item() == pytest.approx(0.02, rel=0.01)
    assert values.abs().max().item() <= 0.02 * 3.47  # Irwin-Hall of 4: at most sqrt(12) standard deviations
    assert torch.equal(rw.random_tensor("layer.bias", (8,), 0.02, 0), torch.zeros(8, dtype=torch.bfloat16))
    assert torch.equal(rw.random_tensor("norm.weight", (8,), 0.02, 0), torch.ones(8, dtype=torch.bfloat16))
    assert not torch.equal(rw.random_tensor("a", (4, 4), 0.02, 0), rw.random_tensor("b", (4, 4), 0.02, 0))
    assert not torch.equal(rw.random_tensor("a", (4, 4), 0.02, 0), rw.random_tensor("a", (4, 4), 0.02, 1))


def test_the_generators_bytes_are_held():
    """A change to any step changes these bytes: give the generator a new VERSION (a new asset folder)."""
    tensor = rw.random_tensor("model.embed_tokens.weight", (300, 64), 0.02, seed=0)
    digest = hashlib.sha256(tensor.view(torch.int16).numpy().tobytes()).hexdigest()
    assert (rw.VERSION, digest[:16]) == ("splitmix64-irwin-hall4-v1", GOLDEN_DIGEST)


def test_a_device_tensor_that_is_not_the_cpus_is_refused():
    name = "model.layers.1.self_attn.q_proj.weight"
    tensor = rw.random_tensor(name, (64, 64), 0.02, seed=0)
    rw.check_against_cpu(name, tensor, 0.02, 0)
    for index in (5, 64 * 64 - 3):  # a wrong element at either end
        wrong = tensor.clone()
        wrong.view(-1)[index] += 1
        with pytest.raises(RuntimeError, match="differ from the CPU's"):
            rw.check_against_cpu(name, wrong, 0.02, 0)


def _checkpoint_bytes(folder: Path) -> dict[str, bytes]:
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    tensors = {}
    for shard in sorted(set(index["weight_map"].values())):
        tensors |= load_file(str(folder / shard))
    return {name: t.view(torch.int16).numpy().tobytes() for name, t in sorted(tensors.items())}


def test_weights_asked_of_a_device_are_the_cpus_bytes_made_there_or_on_the_cpu(tmp_path, monkeypatch):
    """Through prepare: `cuda` in a process of its own (here, without a GPU, it fails and the CPU makes them, with a
    line saying so; on a GPU, the GPU makes them and checks them against the CPU's); `cpu` in this process."""
    monkeypatch.setattr(prepare_module, "LARGE_MODEL_PARAMS", 0)  # the tiny model through the large models' path
    workload = load_workload("tiny")
    lines: list[str] = []
    on_device = prepare(workload, tmp_path / "device", device="cuda", note=lines.append)
    on_cpu = prepare(workload, tmp_path / "cpu", device="cpu", note=lines.append)
    assert _checkpoint_bytes(Path(on_device.model)) == _checkpoint_bytes(Path(on_cpu.model))
    made_on = "cuda" if torch.cuda.is_available() else "cpu"
    assert any(f"model random on {made_on}" in line for line in lines if "ready in" in line), lines
    if made_on == "cpu":
        assert any("random weights on cuda failed" in line and "the same bytes" in line for line in lines), lines


def test_a_checkpoint_written_in_a_child_process_is_the_same(tmp_path):
    workload = load_workload("tiny")
    assert workload.model.config_file is not None
    prepare_module._in_child(workload.model.config_file.parent, tmp_path / "child", 0, "cpu")
    from transformers import AutoConfig

    rw.write_random_checkpoint(AutoConfig.from_pretrained(str(workload.model.config_file.parent)), tmp_path / "here", 0)
    assert _checkpoint_bytes(tmp_path / "child") == _checkpoint_bytes(tmp_path / "here")
