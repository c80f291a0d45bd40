"""The worker's observation of offload: where the optimizer state and the parameters' own storage really are, and
what the engine says it offloads (real FSDP2 on a one-rank gloo group; DeepSpeed's engine seen through its API)."""

import socket
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from bench.worker.engage import _optimizer_state_devices, _param_offload, _param_storage_bytes, _stepping_optimizer


@pytest.fixture
def one_rank_group(monkeypatch):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def trained(model: torch.nn.Module) -> torch.optim.Optimizer:
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(3, 8)).sum().backward()
    optimizer.step()
    return optimizer


@pytest.mark.parametrize("offload", [False, True])
def test_fsdp2_cpu_offload_policy_is_what_the_modules_report(one_rank_group, offload):
    from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
    policy = {"offload_policy": CPUOffloadPolicy(pin_memory=False)} if offload else {}
    for layer in model:
        fully_shard(layer, **policy)
    fully_shard(model, **policy)
    optimizer = trained(model)
    assert _param_offload(model) == ("cpu" if offload else None)
    assert _param_storage_bytes(model) == {"cpu": (8 * 8 + 8 + 8 * 2 + 2) * 4}  # each shard's local tensor
    assert _optimizer_state_devices(_stepping_optimizer(optimizer)) == ["cpu"]


def test_the_stepping_optimizer_is_found_under_its_wrappers():
    model = torch.nn.Linear(8, 2)
    adamw = trained(model)
    zero = SimpleNamespace(optimizer=adamw)  # DeepSpeed's ZeRO optimizer keeps the basic one as .optimizer
    assert _stepping_optimizer(SimpleNamespace(optimizer=zero)) is adamw
    assert _optimizer_state_devices(adamw) == ["cpu"]
    assert _optimizer_state_devices(None) == []
    fresh = torch.optim.AdamW(torch.nn.Linear(2, 2).to("meta").parameters())
    assert _optimizer_state_devices(fresh) == []  # nothing real to place


def test_zero3_partitions_count_where_their_ds_tensor_lives():
    model = torch.nn.Linear(8, 2, bias=False)
    model.weight.ds_tensor = torch.empty(4, dtype=torch.bfloat16)  # the rank's partition, not the placeholder
    assert _param_storage_bytes(model) == {"cpu": 8}


def test_deepspeed_param_offload_is_read_from_the_engine_only_when_its_optimizer_runs_it():
    device = SimpleNamespace(value="cpu")
    engine = SimpleNamespace(
        optimizer=SimpleNamespace(offload_param=True), zero_offload_param=lambda: SimpleNamespace(device=device)
    )
    assert _param_offload(engine) == "cpu"
    engine.optimizer.offload_param = False  # a config that names it but an optimizer that does not run it
    assert _param_offload(engine) is None
