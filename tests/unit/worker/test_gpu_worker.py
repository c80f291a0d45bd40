"""The worker's GPU paths, checked on CPU against the installed libraries: rank variables under mpirun, the device
map of a split model, the load dtype keyword, which devices a rank times and reads, and how FSDP's RAM-efficient
loading leaves a separate reference model (issue 32). torch.cuda is faked where a GPU would be needed."""

import os
import subprocess
import sys
import types

import pytest
import torch

from bench.assets.prepare import PreparedAssets
from bench.launchers import torch_rank_env
from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.matrix.plan import plan_for
from bench.matrix.profiles import load_profile, load_workload
from bench.paths import PROJECT_ROOT, SCENARIOS_DIR
from bench.run.launch import free_port
from bench.worker import memory, models
from bench.worker.measure import StepRecorder
from bench.worker.placement import cell_devices, device_map_setting, process_devices, splits_layers
from bench.worker.spec import WorkerSpec

OMPI_RANK_1 = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}


def spec(init: str, quant: str, backend: str, hw: str = "2xA10", setup: str = "recipe", model: str = "m") -> WorkerSpec:
    cell = Cell(init=init, quant=quant, backend=backend, launcher=backend_spec(backend).default_launcher, setup=setup)
    return WorkerSpec.from_plan(
        plan_for(cell, load_profile(hw), load_workload("phi-2")),
        PreparedAssets(model=model, tokenizer="t", dataset="d"),
        "/tmp/cell",
    )


# ---------------------------------------------------------------- mpirun ranks (item 3)


def test_mpirun_ranks_get_torchs_rank_variables_and_others_are_left_alone():
    assert torch_rank_env("mpirun", OMPI_RANK_1) == {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"}
    assert torch_rank_env("mpirun", OMPI_RANK_1 | {"LOCAL_RANK": "0"}) == {}  # set already: never overridden
    assert torch_rank_env("mpirun", {}) == {}  # not under mpirun after all
    assert torch_rank_env("torchrun", {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"}) == {}
    assert torch_rank_env("python", OMPI_RANK_1) == {}


def test_the_rank_variables_are_set_on_accelerators_only():
    from bench.worker.__main__ import rank_env_for

    gpu = spec("one_adapter", "none", "ddp").model_copy(
        update={"cell": Cell(init="one_adapter", quant="none", backend="ddp", launcher="mpirun")}
    )
    assert rank_env_for(gpu, OMPI_RANK_1) == {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"}
    cpu = gpu.model_copy(update={"profile": load_profile("cpu")})
    assert rank_env_for(cpu, OMPI_RANK_1) == {}  # accelerate's own CPU path reads OMPI_COMM_WORLD_*


def test_on_gpus_accelerate_forms_a_group_only_from_torchs_variables(monkeypatch):
    """accelerate's own decision (PartialState._prepare_backend), with CUDA faked available: mpirun's variables
    alone give no distributed type, so every rank would train alone; mapped, they give MULTI_GPU."""
    from accelerate.state import PartialState

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in OMPI_RANK_1.items():
        monkeypatch.setenv(name, value)
    assert str(PartialState._prepare_backend(None, cpu=False)[1]) == "DistributedType.NO"
    for name, value in torch_rank_env("mpirun", dict(os.environ)).items():
        monkeypatch.setenv(name, value)
    assert PartialState._prepare_backend(None, cpu=False) == ("nccl", "MULTI_GPU")


def test_the_worker_imports_no_torch_before_it_has_set_the_rank_variables():
    code = "import sys, bench.worker.__main__; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


# ---------------------------------------------------------------- devices per cell (item 2)


def test_only_split_models_and_multi_process_cells_see_several_gpus():
    assert cell_devices(spec("one_adapter", "none", "single")) == 1
    assert cell_devices(spec("one_adapter", "nf4", "single")) == 1  # the recipe: device_map={"": local_rank}
    assert cell_devices(spec("one_adapter", "nf4", "single", setup="newcomer")) == 2  # device_map="auto" spreads it
    assert cell_devices(spec("two_models", "none", "ddp")) == 2
    assert cell_devices(spec("two_models", "none", "device_map")) == 2
    assert cell_devices(spec("one_adapter", "none", "single", hw="cpu")) == 0


def test_an_offload_row_on_one_rank_gets_one_gpu_on_a_two_gpu_profile():
    one_rank = spec("two_models", "none", "zero3_offload")
    assert cell_devices(one_rank) == 2
    one_rank.cell = one_rank.cell.model_copy(update={"ranks": 1})
    assert cell_devices(one_rank) == 1  # the deepspeed launcher turns the visible devices into its ranks
    assert process_devices(split=True, device_count=2, current=0) == [0, 1]
    assert process_devices(split=False, device_count=2, current=1) == [1]


# ---------------------------------------------------------------- device_map (item 5)


def test_the_device_map_recipe_puts_the_embedding_and_the_lm_head_on_the_first_gpu():
    split = {"model.embed_tokens": 0, "model.layers.0": 0, "model.layers.1": 1, "model.norm": 1, "lm_head": 1}
    pinned = models.io_first(split, 0, ["model.embed_tokens", "lm_head"])
    assert pinned == split | {"lm_head": 0} and split["lm_head"] == 1  # pure
    with pytest.raises(ValueError, match="as part of model"):
        models.io_first({"model": 0, "lm_head": 1}, 0, ["model.embed_tokens"])
    assert device_map_setting(spec("two_models", "none", "device_map")) == "balanced_io_first"
    assert device_map_setting(spec("two_models", "none", "device_map", setup="newcomer")) == "auto"
    assert splits_layers(spec("two_models", "none", "device_map"))


def test_phi2_split_over_two_a10s_keeps_its_io_on_gpu_0():
    """accelerate's real balanced split of the phi-2 architecture (meta device, the A10's memory given), as the
    worker computes it on the GPUs."""
    model = str(SCENARIOS_DIR / "workloads" / "phi-2")
    a10 = 22 * 2**30
    split = models.balanced_io_first_map(model, torch.bfloat16, max_memory={0: a10, 1: a10, "cpu": 64 * 2**30})
    assert split["lm_head"] == 0 and split["model.embed_tokens"] == 0
    layers = {device for name, device in split.items() if ".layers." in name}
    assert layers == {0, 1}  # still split: the cell measures a model over two GPUs


# ---------------------------------------------------------------- the load dtype on Gaudi (item 11)


def test_from_pretrained_gets_the_dtype_by_the_keyword_its_transformers_takes(monkeypatch):
    assert models.dtype_keyword("4.55.4") == "torch_dtype"  # optimum-habana's pinned releases
    assert models.dtype_keyword("4.56.0") == "dtype" and models.dtype_keyword("5.23.0") == "dtype"
    import transformers

    seen: dict = {}
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda ref, **kw: seen.update(kw))
    monkeypatch.setattr(transformers, "__version__", "4.51.3")
    models.load_causal_lm(spec("one_adapter", "none", "single", hw="cpu"))
    assert seen["torch_dtype"] is torch.float32 and "dtype" not in seen


# ---------------------------------------------------------------- timing and memory on GPUs (item 11)


class FakeCuda:
    """The torch.cuda calls the recorder and memory readings make, on two devices."""

    def __init__(self) -> None:
        self.synced: list[int | None] = []
        self.allocated = {0: 5 * 2**30, 1: 7 * 2**30}
        self.reset: list[int] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in ("is_available", "is_initialized"):
            monkeypatch.setattr(torch.cuda, name, lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: self.synced.append(device))
        monkeypatch.setattr(torch.cuda, "memory_allocated", lambda i: self.allocated[i])
        monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda i: self.allocated[i])
        monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda i: self.allocated[i] + 2**30)
        monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda i: self.reset.append(i))


def test_a_split_model_is_synchronised_on_every_gpu_it_runs_on(monkeypatch):
    cuda = FakeCuda()
    cuda.install(monkeypatch)
    split = StepRecorder(devices=[0, 1])
    split.trainer = types.SimpleNamespace(_total_train_tokens=0)
    split.on_train_begin(None, None, None)
    split.on_step_end(None, None, None)
    assert cuda.synced == [0, 1, 0, 1] and split.memory_now == [7 * 2**30]
    rank = StepRecorder(devices=[1])
    rank.trainer = split.trainer
    rank.on_step_end(None, None, None)
    assert cuda.synced[4:] == [1] and rank.memory_now == [7 * 2**30]
    assert memory.cuda_peaks([0]) == (5 * 2**30, 6 * 2**30)  # a rank's own device, not its peer's


def test_the_gpu_load_peak_is_read_when_training_begins(monkeypatch):
    """DeepSpeed and FSDP place the model in trainer.train(): the load ends when training begins."""
    cuda = FakeCuda()
    cuda.install(monkeypatch)
    recorder = StepRecorder(devices=[0])
    order: list[str] = []
    recorder.on_train_start = lambda: order.append(f"load ends, start={recorder.train_start}")
    recorder.on_train_begin(None, None, None)
    assert order == ["load ends, start=None"] and recorder.train_start is not None


# ---------------------------------------------------------------- FSDP's RAM-efficient loading (item 6)


def test_fsdp_ram_efficient_loading_leaves_weights_on_every_rank(tmp_path, monkeypatch):
    """The recipe sets fsdp_cpu_ram_efficient_loading; accelerate broadcasts rank 0's weights to the policy only,
    TRL shards a separate reference as it is (trl/models/utils.py prepare_fsdp). transformers 5.23 special-cases
    ranks other than 0 for missing keys only (modeling_utils.py `_move_missing_keys_from_meta_to_device`): a rank
    that is not local rank 0 still reads every weight of the checkpoint, so the reference has them."""
    import torch.distributed as dist
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.distributed.fsdp import is_fsdp_enabled
    from transformers.distributed.utils import is_local_dist_rank_0

    config = LlamaConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4
    )
    torch.manual_seed(0)
    saved = LlamaForCausalLM(config)
    saved.save_pretrained(tmp_path / "model")
    for name, value in {
        "LOCAL_RANK": "1",  # the rank that would get the meta device
        "ACCELERATE_USE_FSDP": "true",
        "FSDP_CPU_RAM_EFFICIENT_LOADING": "true",
    }.items():
        monkeypatch.setenv(name, value)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        assert is_fsdp_enabled() and not is_local_dist_rank_0()  # the branch under test is taken
        reference = models.load_causal_lm(spec("two_models", "none", "fsdp", hw="cpu", model=str(tmp_path / "model")))
    finally:
        dist.destroy_process_group()
    for (name, loaded), original in zip(reference.state_dict().items(), saved.state_dict().values(), strict=True):
        assert loaded.device.type == "cpu" and torch.equal(loaded, original), name


def test_fsdp2_offload_is_read_from_either_attribute_torch_has_had():
    """torch >= 2.12 keeps a list `_fsdp_param_groups`; 2.11 (the lent GPU machines' torch) one `_fsdp_param_group`."""
    from types import SimpleNamespace

    from bench.worker.engage import fsdp_param_groups

    group = SimpleNamespace(offload_policy=None)
    assert fsdp_param_groups(SimpleNamespace(_fsdp_param_groups=[group, group])) == [group, group]
    assert fsdp_param_groups(SimpleNamespace(_fsdp_param_group=group)) == [group]
    assert fsdp_param_groups(SimpleNamespace(_fsdp_param_group=None)) == []
    assert fsdp_param_groups(None) == []
