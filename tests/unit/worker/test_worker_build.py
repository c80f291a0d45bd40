"""The worker's trainer paths (TRL, Gaudi) and the plain-TRL baseline share one set of trainer arguments and one
model-building module; placement follows the backend descriptions; no worker module imports in a circle."""

import ast
import dataclasses
import graphlib
import subprocess
import sys
import types

import pytest

from bench.assets.prepare import PreparedAssets
from bench.errors import BenchError
from bench.matrix.axes import Backend, Init, Option, Quant
from bench.matrix.backends import BACKENDS, backend_spec
from bench.matrix.cell import Cell
from bench.matrix.plan import plan_for
from bench.matrix.profiles import load_profile, load_workload
from bench.matrix.scenario import Axes, MatrixSpec, Variant
from bench.paths import PROJECT_ROOT
from bench.selfbench import plain_dpo
from bench.worker import build, hpu, models
from bench.worker.spec import WorkerSpec
from bench.worker.trainer_args import trainer_arguments
from bench.worker.trainers import dpo

ASSETS = PreparedAssets(model="m", tokenizer="t", dataset="d")
OPTION_SETS = [(), (Option.NO_GRADIENT_CHECKPOINTING,), (Option.PRECOMPUTE_REF,), (Option.LIGER,), tuple(Option)]


def spec_for(
    options: tuple[Option, ...] = (),
    backend: Backend = Backend.SINGLE,
    quant: Quant = Quant.NONE,
    hw: str = "cpu",
    out_dir: str = "/tmp/cell",
) -> WorkerSpec:
    cell = Cell(
        init=Init.ONE_ADAPTER,
        quant=quant,
        backend=backend,
        launcher=backend_spec(backend).default_launcher,
        options=options,
    )
    return WorkerSpec.from_plan(plan_for(cell, load_profile(hw), load_workload("tiny")), ASSETS, out_dir)


class Stop(Exception):
    """Raised by a stand-in trainer: the test has what it needs before any model is loaded."""


def plain_spec(monkeypatch: pytest.MonkeyPatch, options: tuple[Option, ...]) -> WorkerSpec:
    """The spec `python -m bench selfbench plain-dpo --cell <id>` hands the worker's TRL trainer, for a matrix
    whose only
    cell is one_adapter-none-single with `options`."""
    axes = Axes(init=[Init.ONE_ADAPTER], quant=[Quant.NONE], backend=[Backend.SINGLE])
    variants = (
        [Variant(init=axes.init, quant=axes.quant, backend=axes.backend, options=list(options))] if options else []
    )
    matrix = MatrixSpec(axes=axes, variants=variants)
    seen: list[WorkerSpec] = []

    def trainer(spec: WorkerSpec, callbacks: list) -> None:
        seen.append(spec)
        raise Stop

    monkeypatch.setattr(plain_dpo, "load_matrix", lambda: matrix)
    monkeypatch.setattr(plain_dpo, "prepare", lambda workload: ASSETS)
    monkeypatch.setattr(plain_dpo, "cell_dataset", lambda dataset, folder: dataset)  # ASSETS are names only
    monkeypatch.setattr(plain_dpo.torch, "set_num_threads", lambda threads: None)
    monkeypatch.setattr(plain_dpo, "trl_trainer", trainer)
    with pytest.raises(Stop):
        plain_dpo.main(["--cell", spec_for(options).cell.id, "--hw", "cpu"])
    return seen[0]


@pytest.mark.parametrize("options", OPTION_SETS, ids=lambda options: "+".join(options) or "base")
def test_trl_gaudi_and_plain_paths_get_the_same_trainer_arguments(monkeypatch, options):
    from trl import DPOConfig

    spec = spec_for(options)
    expected = trainer_arguments(spec)
    switches = (
        Option.NO_GRADIENT_CHECKPOINTING not in options,
        Option.PRECOMPUTE_REF in options,
        Option.LIGER in options,
    )
    names = ("gradient_checkpointing", "precompute_ref_log_probs", "use_liger_kernel")
    assert tuple(expected[name] for name in names) == switches

    config = dpo.config(spec)
    assert config.to_dict() == DPOConfig(**expected).to_dict()
    assert tuple(getattr(config, name) for name in names) == switches

    assert hpu.gaudi_arguments(spec) == expected | {"use_habana": True, "use_lazy_mode": True}

    plain = trainer_arguments(plain_spec(monkeypatch, options))
    assert plain.pop("output_dir") != expected.pop("output_dir")  # a temporary folder of its own
    assert plain == expected


def test_plain_baseline_runs_only_single_backend_cells_of_the_matrix():
    with pytest.raises(BenchError, match="cells of the single backend only"):
        plain_dpo.main(["--cell", "one_adapter-none-ddp"])
    with pytest.raises(BenchError, match="unknown cell 'one_adapter-none-single\\+no_such_option'"):
        plain_dpo.main(["--cell", "one_adapter-none-single+no_such_option"])


def test_gaudi_arguments_go_to_the_arguments_class_or_the_trainer():
    from transformers import TrainingArguments
    from trl import DPOConfig

    arguments = hpu.gaudi_arguments(spec_for((Option.PRECOMPUTE_REF,)))
    switches = frozenset(hpu.GAUDI_SWITCHES)
    dpo_fields = frozenset(field.name for field in dataclasses.fields(DPOConfig)) | switches
    assert hpu.gaudi_split(arguments, dpo_fields) == (arguments, {})

    training_fields = frozenset(field.name for field in dataclasses.fields(TrainingArguments)) | switches
    for_class, for_trainer = hpu.gaudi_split(arguments, training_fields)
    assert for_trainer == {"beta": 0.1, "max_length": arguments["max_length"], "precompute_ref_log_probs": True}
    assert for_class | for_trainer == arguments


def test_gaudi_refuses_an_option_its_arguments_cannot_take_and_drops_one_that_is_off():
    arguments = hpu.gaudi_arguments(spec_for((Option.LIGER,)))
    without_liger = frozenset(arguments) - {"use_liger_kernel"}
    with pytest.raises(ValueError, match="use_liger_kernel=True is not supported"):
        hpu.gaudi_split(arguments, without_liger)
    for_class, for_trainer = hpu.gaudi_split(arguments | {"use_liger_kernel": False}, without_liger)
    assert "use_liger_kernel" not in for_class | for_trainer


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_placement_and_memory_cap_follow_the_backend_description(monkeypatch, backend):
    spec = spec_for(backend=backend)
    splits = backend_spec(backend).splits_layers
    assert models.device_map(spec) == ("balanced" if splits else None)

    capped: list[bool] = []
    monkeypatch.setattr(build, "apply_memory_cap", lambda all_devices, launcher: capped.append(all_devices))
    monkeypatch.setattr(build, "trl_trainer", lambda spec, callbacks: "trl")
    assert build.build_trainer(spec, []) == "trl"
    assert capped == [splits]


def test_quantized_cells_on_a_gpu_are_placed_on_their_rank_device(monkeypatch):
    import accelerate

    monkeypatch.setattr(accelerate, "PartialState", lambda: types.SimpleNamespace(local_process_index=1))
    assert models.device_map(spec_for(quant=Quant.NF4, hw="1xH100")) == {"": 1}
    assert models.device_map(spec_for(quant=Quant.INT8, backend=Backend.DDP, hw="2xA10")) == {"": 1}
    assert models.device_map(spec_for(hw="1xH100")) is None
    assert models.device_map(spec_for(quant=Quant.NF4)) is None  # cpu
    # ZeRO-3 and FSDP partition the model themselves: PEFT's guides load it without a device_map
    for backend in (Backend.ZERO3, Backend.FSDP):
        assert models.device_map(spec_for(quant=Quant.NF4, backend=backend, hw="2xA10")) is None


def test_hpu_profiles_take_the_gaudi_path(monkeypatch):
    monkeypatch.setattr(build, "build_gaudi_trainer", lambda spec, callbacks: "gaudi")
    monkeypatch.setattr(build, "trl_trainer", lambda spec, callbacks: "trl")
    assert build.build_trainer(spec_for(hw="8xGaudi2"), []) == "gaudi"


def worker_import_graph() -> dict[str, set[str]]:
    """bench.worker module -> the bench.worker modules it imports anywhere (function bodies included)."""
    folder = PROJECT_ROOT / "bench" / "worker"
    names = {path.stem for path in folder.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in folder.glob("*.py"):
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module == "bench.worker":
                imported |= {f"bench.worker.{alias.name}" for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
        graph[path.stem] = ({name.removeprefix("bench.worker.") for name in imported} & names) - {path.stem}
    return graph


def test_no_worker_module_imports_in_a_circle():
    graph = worker_import_graph()
    assert "build" in graph["__main__"] and "hpu" in graph["build"]  # the graph sees function-level imports
    graphlib.TopologicalSorter(graph).prepare()  # CycleError on a circle


@pytest.mark.parametrize("order", [("hpu", "build"), ("build", "hpu")])
def test_hpu_and_build_import_in_either_order(order):
    code = "; ".join(f"import bench.worker.{name}" for name in order)
    done = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize(
    ("method", "init", "ref_model", "peft"),
    [
        ("sft", Init.FULL, False, False),
        ("dpo", Init.TWO_MODELS, True, False),
        ("sft", Init.ONE_ADAPTER, False, True),
    ],
)
def test_each_init_mode_builds_what_it_trains_and_its_reference(method, init, ref_model, peft):
    cell = Cell(method=method, init=init, quant=Quant.NONE, backend=Backend.SINGLE, launcher="python")
    base = spec_for()
    spec = WorkerSpec.from_plan(plan_for(cell, base.profile, base.workload), base.assets, base.out_dir)
    loaded: list[object] = []

    def load(spec: WorkerSpec) -> object:
        loaded.append(object())
        return loaded[-1]

    built = models.build_models(spec, load=load)
    assert built.model is loaded[0] and len(loaded) == 1 + ref_model
    assert (built.ref_model is not None) == ref_model and (built.peft_config is not None) == peft
