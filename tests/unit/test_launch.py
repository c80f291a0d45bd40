import json
import sys

import yaml

from bench.assets import PreparedAssets
from bench.launch import plan_launch
from bench.profiles import load_workload
from bench.scenario import Cell
from bench.worker.spec import WorkerSpec


def plan(tmp_path, cpu_profile, backend, launcher):
    cell = Cell(init="one_adapter", quant="none", backend=backend, launcher=launcher)
    spec = WorkerSpec(
        cell=cell,
        profile=cpu_profile,
        workload=load_workload("tiny"),
        assets=PreparedAssets(model="m", tokenizer="t", dataset="d"),
        out_dir=str(tmp_path / "out"),
    )
    return plan_launch(spec, tmp_path / "spec.json", tmp_path)


def test_single_runs_the_worker_module(tmp_path, cpu_profile):
    launch, _ = plan(tmp_path, cpu_profile, "single", "python")
    assert launch.argv == [sys.executable, "-m", "bench.worker", str(tmp_path / "spec.json")]
    assert launch.env["OMP_NUM_THREADS"] == "1"
    assert WorkerSpec.read(tmp_path / "spec.json").cell.id == "one_adapter-none-single"


def test_torchrun_starts_one_process_per_rank(tmp_path, cpu_profile):
    launch, _ = plan(tmp_path, cpu_profile, "ddp", "torchrun")
    assert launch.argv[0].endswith("torchrun") and "--nproc_per_node=2" in launch.argv


def test_deepspeed_launcher_gets_a_zero_config_passed_to_the_trainer(tmp_path, cpu_profile):
    launch, spec = plan(tmp_path, cpu_profile, "zero3", "deepspeed")
    config = json.loads((tmp_path / "deepspeed.json").read_text())
    assert config["zero_optimization"]["stage"] == 3 and "train_batch_size" not in config
    assert spec.deepspeed_config == str(tmp_path / "deepspeed.json")
    assert "--no_local_rank" in launch.argv and "--num_gpus=2" in launch.argv


def test_accelerate_config_is_accelerates_own_format(tmp_path, cpu_profile):
    from accelerate.commands.config.config_args import load_config_from_file

    _, spec = plan(tmp_path, cpu_profile, "zero2", "accelerate")
    loaded = load_config_from_file(str(tmp_path / "accelerate.yaml"))
    assert loaded.distributed_type == "DEEPSPEED" and loaded.num_processes == 2
    assert loaded.deepspeed_config["deepspeed_config_file"] == str(tmp_path / "deepspeed.json")
    assert spec.deepspeed_config is None  # accelerate configures DeepSpeed itself
    raw = yaml.safe_load((tmp_path / "accelerate.yaml").read_text())
    assert raw["use_cpu"] is False  # use_cpu: true would silently start one process


def test_fsdp_config(tmp_path, cpu_profile):
    plan(tmp_path, cpu_profile, "fsdp", "accelerate")
    raw = yaml.safe_load((tmp_path / "accelerate.yaml").read_text())
    assert raw["distributed_type"] == "FSDP" and raw["fsdp_config"]["fsdp_version"] == 2


def test_mpirun_exports_the_rendezvous(tmp_path, cpu_profile):
    launch, _ = plan(tmp_path, cpu_profile, "ddp", "mpirun")
    assert launch.argv[:3] == ["mpirun", "-np", "2"] and "MASTER_PORT" in launch.argv
