import json
import sys

import pytest
import yaml

from bench.assets.prepare import PreparedAssets
from bench.launchers import LAUNCHERS, rank_from_env
from bench.matrix.backends import BACKENDS
from bench.matrix.cell import Cell
from bench.matrix.plan import plan_for
from bench.matrix.profiles import load_profile, load_workload
from bench.run.launch import ACCELERATE_FILE, DEEPSPEED_FILE, SPEC_FILE, plan_launch, write_files
from bench.worker.spec import WorkerSpec


def plan(tmp_path, cpu_profile, backend, launcher, as_root=False, write=True, ranks=None):
    cell = Cell(init="one_adapter", quant="none", backend=backend, launcher=launcher, ranks=ranks)
    spec = WorkerSpec.from_plan(
        plan_for(cell, cpu_profile, load_workload("tiny")),
        PreparedAssets(model="m", tokenizer="t", dataset="d"),
        str(tmp_path / "out"),
    )
    launch = plan_launch(spec, tmp_path, port=29555, as_root=as_root)
    if write:
        write_files(launch, tmp_path)
    return launch


def test_planning_writes_nothing_and_write_files_writes_every_planned_file(tmp_path, cpu_profile):
    launch = plan(tmp_path, cpu_profile, "zero2", "accelerate", write=False)
    assert sorted(p.name for p in launch.files) == [ACCELERATE_FILE, DEEPSPEED_FILE, SPEC_FILE]
    assert list(tmp_path.iterdir()) == []
    write_files(launch, tmp_path)
    assert all(path.read_text() == text for path, text in launch.files.items())


def test_a_config_file_linked_to_a_users_file_is_replaced_not_written_through(tmp_path, tmp_path_factory, cpu_profile):
    """`configs/<cell>/deepspeed.json` a link to a user's file (or the folder a link): `--force` used to write the
    generated config into that file."""
    user = tmp_path_factory.mktemp("user")
    (user / "mine.json").write_text("the user's own")
    (user / SPEC_FILE).write_text("the user's spec")
    run_dir = tmp_path / "run"
    config_dir = run_dir / "configs" / "one_adapter-none-zero2+accelerate"
    config_dir.mkdir(parents=True)
    (config_dir / DEEPSPEED_FILE).symlink_to(user / "mine.json")
    launch = plan(config_dir, cpu_profile, "zero2", "accelerate", write=False)
    write_files(launch, run_dir)
    assert (user / "mine.json").read_text() == "the user's own"
    assert not (config_dir / DEEPSPEED_FILE).is_symlink()
    assert json.loads((config_dir / DEEPSPEED_FILE).read_text())["zero_optimization"] == {"stage": 2}

    config_dir.rename(run_dir / "old")
    config_dir.symlink_to(user, target_is_directory=True)
    write_files(launch, run_dir)
    assert sorted(p.name for p in user.iterdir()) == ["mine.json", SPEC_FILE]
    assert (user / SPEC_FILE).read_text() == "the user's spec"
    assert config_dir.is_dir() and not config_dir.is_symlink() and (config_dir / SPEC_FILE).is_file()


def test_single_runs_the_worker_module(tmp_path, cpu_profile):
    launch = plan(tmp_path, cpu_profile, "single", "python")
    assert launch.argv == [sys.executable, "-m", "bench.worker", str(tmp_path / SPEC_FILE)]
    assert launch.env["OMP_NUM_THREADS"] == "1" and launch.env["MASTER_PORT"] == "29555"
    assert WorkerSpec.read(tmp_path / SPEC_FILE).cell.id == "one_adapter-none-single"


def test_torchrun_starts_one_process_per_rank(tmp_path, cpu_profile):
    launch = plan(tmp_path, cpu_profile, "ddp", "torchrun")
    assert launch.argv[0].endswith("torchrun") and "--nproc_per_node=2" in launch.argv


def test_deepspeed_launcher_gets_a_zero_config_passed_to_the_trainer(tmp_path, cpu_profile):
    launch = plan(tmp_path, cpu_profile, "zero3", "deepspeed")
    config = json.loads((tmp_path / DEEPSPEED_FILE).read_text())
    assert config["zero_optimization"] == {"stage": 3} and "train_batch_size" not in config
    assert WorkerSpec.read(tmp_path / SPEC_FILE).deepspeed_config == str(tmp_path / DEEPSPEED_FILE)
    assert "--no_local_rank" in launch.argv and "--num_gpus=2" in launch.argv and "--master_port=29555" in launch.argv
    assert launch.argv[-3:] == ["--module", "bench.worker", str(tmp_path / SPEC_FILE)]


def test_zero3_offload_config_offloads_the_optimizer(tmp_path, cpu_profile):
    plan(tmp_path, cpu_profile, "zero3_offload", "deepspeed")
    config = json.loads((tmp_path / DEEPSPEED_FILE).read_text())
    assert config["zero_optimization"] == {"stage": 3, "offload_optimizer": {"device": "cpu"}}


def test_offload_backends_on_one_rank_offload_what_their_entry_says(tmp_path, cpu_profile):
    launch = plan(tmp_path, cpu_profile, "zero3_offload_param", "deepspeed", ranks=1)
    assert "--num_gpus=1" in launch.argv and launch.ranks == 1
    config = json.loads((tmp_path / DEEPSPEED_FILE).read_text())
    assert config["zero_optimization"] == {
        "stage": 3,
        "offload_optimizer": {"device": "cpu"},
        "offload_param": {"device": "cpu"},
    }
    plan(tmp_path, cpu_profile, "zero2_offload", "accelerate", ranks=1)
    assert yaml.safe_load((tmp_path / ACCELERATE_FILE).read_text())["num_processes"] == 1
    config = json.loads((tmp_path / DEEPSPEED_FILE).read_text())
    assert config["zero_optimization"] == {"stage": 2, "offload_optimizer": {"device": "cpu"}}
    plan(tmp_path, cpu_profile, "fsdp_offload", "accelerate", ranks=1)
    raw = yaml.safe_load((tmp_path / ACCELERATE_FILE).read_text())
    assert raw["fsdp_config"]["fsdp_offload_params"] is True and raw["num_processes"] == 1
    plan(tmp_path, cpu_profile, "fsdp", "accelerate")
    assert "fsdp_offload_params" not in yaml.safe_load((tmp_path / ACCELERATE_FILE).read_text())["fsdp_config"]


def test_accelerate_config_is_accelerates_own_format(tmp_path, cpu_profile):
    from accelerate.commands.config.config_args import load_config_from_file

    plan(tmp_path, cpu_profile, "zero2", "accelerate")
    loaded = load_config_from_file(str(tmp_path / ACCELERATE_FILE))
    assert loaded.distributed_type == "DEEPSPEED" and loaded.num_processes == 2
    assert loaded.deepspeed_config["deepspeed_config_file"] == str(tmp_path / DEEPSPEED_FILE)
    assert WorkerSpec.read(tmp_path / SPEC_FILE).deepspeed_config is None  # accelerate configures DeepSpeed itself
    raw = yaml.safe_load((tmp_path / ACCELERATE_FILE).read_text())
    assert raw["use_cpu"] is False  # use_cpu: true would silently start one process


def test_fsdp_config(tmp_path, cpu_profile):
    plan(tmp_path, cpu_profile, "fsdp", "accelerate")
    raw = yaml.safe_load((tmp_path / ACCELERATE_FILE).read_text())
    assert raw["distributed_type"] == "FSDP" and raw["fsdp_config"]["fsdp_version"] == 2
    # the recipe's RAM-efficient loading is for GPUs: on CPU FSDP2 runs as DDP and meta-device ranks had no weights
    assert "fsdp_cpu_ram_efficient_loading" not in raw["fsdp_config"]
    plan(tmp_path, load_profile("2xA10"), "fsdp", "accelerate")
    raw = yaml.safe_load((tmp_path / ACCELERATE_FILE).read_text())
    assert raw["fsdp_config"]["fsdp_cpu_ram_efficient_loading"] is True


def test_zero3_through_accelerate_builds_the_model_under_zero_init(tmp_path, cpu_profile):
    plan(tmp_path, cpu_profile, "zero3", "accelerate")
    raw = yaml.safe_load((tmp_path / ACCELERATE_FILE).read_text())
    assert raw["deepspeed_config"]["zero3_init_flag"] is True
    plan(tmp_path, cpu_profile, "zero2", "accelerate")
    assert "zero3_init_flag" not in yaml.safe_load((tmp_path / ACCELERATE_FILE).read_text())["deepspeed_config"]


def test_mpirun_exports_the_rendezvous_and_allows_root_only_as_root(tmp_path, cpu_profile):
    launch = plan(tmp_path, cpu_profile, "ddp", "mpirun")
    assert launch.argv[0].endswith("mpirun") and launch.argv[1:3] == ["-np", "2"] and "MASTER_PORT" in launch.argv
    assert "OMPI_ALLOW_RUN_AS_ROOT" not in launch.env
    assert plan(tmp_path, cpu_profile, "ddp", "mpirun", as_root=True).env["OMPI_ALLOW_RUN_AS_ROOT"] == "1"


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_every_supported_launcher_of_every_backend_plans(tmp_path, cpu_profile, backend):
    for launcher in BACKENDS[backend].launchers:
        launch = plan(tmp_path / launcher, cpu_profile, backend, launcher, write=False)
        assert str(tmp_path / launcher / SPEC_FILE) in launch.argv
        assert (tmp_path / launcher / DEEPSPEED_FILE in launch.files) == (BACKENDS[backend].deepspeed is not None)


def test_each_launcher_tells_ranks_who_they_are():
    assert rank_from_env("python", {"RANK": "3"}) == (0, 0, 1)
    assert rank_from_env("torchrun", {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"}) == (3, 1, 4)
    ompi = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "RANK": "9"}
    assert rank_from_env("mpirun", ompi) == (1, 1, 2)
    assert all(spec.multi_process == (spec.rank_env is not None) for spec in LAUNCHERS.values())


def test_a_venv_over_system_packages_runs_each_launcher_as_a_module_of_its_own_interpreter(tmp_path):
    """make setup WHEELHOUSE= makes a venv whose accelerate and torchrun are the box's: their scripts are not beside
    the venv's interpreter, and the box's would run the box's Python without the venv's packages."""
    from bench.launchers import LaunchInputs

    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    python = venv / "python"
    python.write_text("")
    inputs = LaunchInputs(python=str(python), processes=2, port=1, worker=("-m", "bench.worker", "s.json"),
                          accelerate_config="a.yaml")  # fmt: skip
    torchrun = LAUNCHERS["torchrun"].command(inputs, str(python))
    assert torchrun[:3] == [str(python), "-m", "torch.distributed.run"] and "--nproc_per_node=2" in torchrun
    accelerate = LAUNCHERS["accelerate"].command(inputs, str(python))
    assert accelerate[:4] == [str(python), "-m", "accelerate.commands.accelerate_cli", "launch"]
    deepspeed = LAUNCHERS["deepspeed"].command(inputs, str(python))
    assert deepspeed[:3] == [str(python), "-m", "deepspeed.launcher.runner"] and "--module" in deepspeed
    (venv / "deepspeed").write_text("")  # installed into the venv: its own script
    assert LAUNCHERS["deepspeed"].command(inputs, str(python))[0] == str(venv / "deepspeed")
    assert LAUNCHERS["mpirun"].command(inputs, str(python))[0] == "mpirun"  # a binary: no module to run


def test_offload_cells_on_a_gpu_share_the_hosts_cores_for_their_optimizer_step():
    from bench.matrix.backends import backend_spec
    from bench.run.launch import host_threads

    h100 = load_profile("1xH100")
    assert host_threads(backend_spec("zero3_offload"), h100, 1, 16) == 16
    assert host_threads(backend_spec("single"), h100, 1, 16) == h100.threads_per_process
    cpu = load_profile("cpu")
    assert host_threads(backend_spec("zero3_offload"), cpu, 2, 2) == cpu.threads_per_process


def test_every_cell_reads_only_local_files(tmp_path, cpu_profile):
    launch = plan(tmp_path, cpu_profile, "single", "python")
    assert {launch.env[k] for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")} == {"1"}
