"""The recipes (scenarios/recipes.yaml): what they resolve to, that every generated config of every cell on every GPU
profile follows them, the newcomer rows, and the version check."""

import datetime as dt
import json

import pytest
import torch
import yaml

from bench.assets.prepare import PreparedAssets
from bench.errors import BenchError
from bench.judge.classify import classify
from bench.matrix.axes import Backend, Option, Quant, Setup
from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.matrix.on_profile import CellOnProfile
from bench.matrix.plan import plan_for
from bench.matrix.profiles import HardwareProfile, load_profile, load_workload
from bench.matrix.recipes import (
    AppliedRecipe,
    Recipe,
    RecipesFile,
    RecipeVersionError,
    Requirement,
    Settings,
    load_recipes,
    recipes,
    resolve,
    verify_installed,
    version_problems,
)
from bench.matrix.scenario import expand, load_matrix, not_applicable_reason, rows_added
from bench.paths import SCENARIOS_DIR
from bench.report.matrix_table import NOT_RUN_YET, render
from bench.results.runs import latest_complete_run, rows_for_run, run_dirs
from bench.results.schema import ErrorClass, ResultRecord, Status
from bench.results.store import load_results
from bench.results.tracked import tracked_results
from bench.run.launch import ACCELERATE_FILE, SPEC_FILE, plan_launch
from bench.worker import models
from bench.worker.models import device_map_setting, quantization_kwargs, torch_dtype
from bench.worker.spec import WorkerSpec
from bench.worker.trainer_args import trainer_arguments
from tests.unit.results.test_results import record

ASSETS = PreparedAssets(model="m", tokenizer="t", dataset="d")
GPU_PROFILES = sorted(
    p.stem for p in (SCENARIOS_DIR / "hardware").glob("*.yaml") if load_profile(p.stem).device == "cuda"
)
CELLS = expand(load_matrix())
NEWCOMER_IDS = {
    "one_adapter-nf4-single+newcomer",
    "one_adapter-int8-ddp+newcomer",
    "one_adapter-nf4-zero3+newcomer",
    "one_adapter-nf4-fsdp+newcomer",
    "two_models-none-zero2+newcomer",
    "two_models-none-device_map+newcomer",
    "one_adapter-none-device_map+newcomer",
}


def spec_of(cell: Cell, profile: HardwareProfile) -> WorkerSpec:
    return WorkerSpec.from_plan(plan_for(cell, profile, load_workload("tiny")), ASSETS, "/tmp/cell")


def cell(init: str, quant: str, backend: str, setup: Setup = Setup.RECIPE, launcher: str | None = None) -> Cell:
    default = backend_spec(backend).default_launcher
    return Cell(init=init, quant=quant, backend=backend, launcher=launcher or default, setup=setup)


# ---------------------------------------------------------------- the file


def test_every_recipe_has_sources_and_matches_some_cell_of_the_matrix():
    entries = load_recipes()
    assert entries == recipes() and len(entries) >= 5
    devices = {"cpu", "cuda"}
    for entry in entries:
        assert all(link.startswith("https://") for link in entry.sources)
        assert any(entry.when.holds(c, d) for c in CELLS for d in devices), f"{entry.id} matches no cell"


def test_a_malformed_recipe_is_a_one_line_error(tmp_path):
    bad = tmp_path / "recipes.yaml"
    bad.write_text(
        "recipes:\n  - {id: x, when: {}, settings: {device_map: everywhere}, sources: [https://a], note: n}\n"
    )
    with pytest.raises(BenchError, match="device_map"):
        load_recipes(bad)
    bad.write_text(
        "recipes:\n  - {id: x, when: {}, settings: {}, requires: {trl: '=>1'}, sources: [https://a], note: n}"
    )
    with pytest.raises(BenchError, match="PEP 440"):
        load_recipes(bad)


def test_two_entries_may_not_set_the_same_field_of_one_cell():
    entries = RecipesFile.model_validate(
        {
            "recipes": [
                {"id": "a", "when": {}, "settings": {"device_map": "auto"}, "sources": ["https://a"], "note": "n"},
                {
                    "id": "b",
                    "when": {"quant": ["nf4"]},
                    "settings": {"device_map": "none"},
                    "sources": ["https://b"],
                    "note": "n",
                },
            ]
        }
    ).recipes
    assert resolve(cell("one_adapter", "none", "single"), "cuda", entries).settings.device_map == "auto"
    with pytest.raises(ValueError, match="recipes a and b both set device_map"):
        resolve(cell("one_adapter", "nf4", "single"), "cuda", entries)


# ---------------------------------------------------------------- what the recipes say


def test_documented_settings_per_cell_pattern():
    nf4_zero3 = resolve(cell("one_adapter", "nf4", "zero3"), "cuda")
    assert nf4_zero3.settings == Settings(
        bnb_4bit_quant_storage="compute_dtype", device_map="none", zero3_init_flag=True
    )
    assert {r.package for r in nf4_zero3.requires} == {"bitsandbytes", "accelerate", "transformers", "peft"}
    fsdp = resolve(cell("two_adapters", "nf4", "fsdp"), "cuda").settings
    assert fsdp == Settings(
        bnb_4bit_quant_storage="compute_dtype", device_map="none", fsdp_cpu_ram_efficient_loading=True
    )
    for backend in ("single", "ddp", "zero2"):
        assert resolve(cell("one_adapter", "int8", backend), "cuda").settings.device_map == "local_rank"
    assert resolve(cell("two_models", "none", "zero2"), "cpu").settings.reference == "precomputed"
    assert resolve(cell("one_adapter", "none", "ddp"), "cuda") == AppliedRecipe()


def test_the_newcomer_leaves_the_recipe_out():
    newcomer = resolve(cell("one_adapter", "nf4", "zero3", Setup.NEWCOMER), "cuda")
    assert newcomer.settings == Settings() and newcomer.requires == () and newcomer.setup == Setup.NEWCOMER
    assert resolve(cell("one_adapter", "int8", "ddp", Setup.NEWCOMER), "cuda").settings == Settings(device_map="auto")


def test_newcomer_rows_exist_where_a_recipe_setting_makes_the_difference():
    ids = {c.id for c in CELLS if c.setup == Setup.NEWCOMER}
    assert ids == NEWCOMER_IDS
    two_gpus, cpu = load_profile("2xA10"), load_profile("cpu")
    for c in CELLS:
        if c.setup == Setup.NEWCOMER:
            assert not_applicable_reason(CellOnProfile(c, two_gpus)) is None, c.id
    # on CPU the placement recipes set nothing: those rows would repeat their recipe row
    reason = not_applicable_reason(CellOnProfile(cell("one_adapter", "int8", "ddp", Setup.NEWCOMER), cpu))
    assert reason and "would repeat one_adapter-int8-ddp" in reason
    assert not_applicable_reason(CellOnProfile(cell("two_models", "none", "zero2", Setup.NEWCOMER), cpu)) is None


def test_cell_ids_of_recipe_rows_are_unchanged_and_newcomer_rows_are_suffixed():
    assert cell("one_adapter", "nf4", "zero3").id == "one_adapter-nf4-zero3"
    assert cell("one_adapter", "none", "zero3", launcher="accelerate").id == "one_adapter-none-zero3+accelerate"
    assert cell("one_adapter", "nf4", "zero3", Setup.NEWCOMER).id == "one_adapter-nf4-zero3+newcomer"
    plus_option = Cell(
        init="two_models",
        quant="none",
        backend="ddp",
        launcher="torchrun",
        options=(Option.PRECOMPUTE_REF,),
        setup=Setup.NEWCOMER,
    )
    assert plus_option.id == "two_models-none-ddp+precompute_ref+newcomer" and plus_option.is_variant


# ---------------------------------------------------------------- generated configs follow the recipe


@pytest.mark.parametrize("hw", GPU_PROFILES)
def test_every_generated_config_of_every_cell_follows_its_recipe(tmp_path, hw):
    profile = load_profile(hw)
    dtype = torch_dtype(profile.precision, quantized=True)  # what the quantized cells load and compute in
    checked = 0
    for c in CELLS:
        if not_applicable_reason(CellOnProfile(c, profile)) is not None:
            continue
        spec = spec_of(c, profile)
        settings = resolve(c, profile.device).settings
        assert spec.recipe.settings == settings
        folder = tmp_path / c.id
        files = plan_launch(spec, folder, port=29555).files
        assert json.loads(files[folder / SPEC_FILE])["recipe"]["settings"] == settings.model_dump(mode="json")
        if folder / ACCELERATE_FILE in files:
            accelerate = yaml.safe_load(files[folder / ACCELERATE_FILE])
            fsdp, deepspeed = accelerate.get("fsdp_config") or {}, accelerate.get("deepspeed_config") or {}
            assert fsdp.get("fsdp_cpu_ram_efficient_loading") == settings.fsdp_cpu_ram_efficient_loading
            assert deepspeed.get("zero3_init_flag") == settings.zero3_init_flag
        bnb = quantization_kwargs(c.quant, dtype, settings) or {}
        expected_storage = dtype if settings.bnb_4bit_quant_storage == "compute_dtype" else None
        assert bnb.get("bnb_4bit_quant_storage") == expected_storage
        if backend_spec(c.backend).splits_layers:
            # the recipe puts the LM head on the first GPU, the newcomer's device_map="auto" does not
            assert device_map_setting(spec) == settings.device_map
            assert settings.device_map == ("auto" if c.setup == Setup.NEWCOMER else "balanced_io_first")
        else:
            assert device_map_setting(spec) == (None if settings.device_map in (None, "none") else settings.device_map)
        precompute = Option.PRECOMPUTE_REF in c.options or settings.reference == "precomputed"
        assert trainer_arguments(spec)["precompute_ref_log_probs"] == precompute
        checked += 1
    assert checked > 0


@pytest.mark.parametrize("hw", GPU_PROFILES)
def test_gpu_placement_follows_the_guides(hw):
    profile = load_profile(hw)
    for backend in Backend:
        c = cell("one_adapter", "nf4", backend)
        if not_applicable_reason(CellOnProfile(c, profile)) is not None or backend_spec(backend).splits_layers:
            continue
        placed = device_map_setting(spec_of(c, profile))
        # per-rank placement for data parallelism; none under ZeRO-3 and FSDP (PEFT's guides load without one)
        spec = backend_spec(backend)
        assert placed == (None if spec.zero_stage == 3 or spec.fsdp_version else "local_rank"), backend


def test_nf4_storage_is_the_compute_dtype_under_zero3_and_not_for_its_newcomer():
    profile = load_profile("2xA10")
    recipe = spec_of(cell("one_adapter", "nf4", "zero3"), profile)
    newcomer = spec_of(cell("one_adapter", "nf4", "zero3", Setup.NEWCOMER), profile)
    assert (
        quantization_kwargs(Quant.NF4, torch.bfloat16, recipe.recipe.settings)["bnb_4bit_quant_storage"]
        is torch.bfloat16
    )
    assert "bnb_4bit_quant_storage" not in quantization_kwargs(Quant.NF4, torch.bfloat16, newcomer.recipe.settings)
    assert (
        models.quantization_config(Quant.NF4, torch.bfloat16, recipe.recipe.settings).bnb_4bit_quant_storage
        == torch.bfloat16
    )


def test_the_precomputed_reference_replaces_the_reference_model(monkeypatch):
    loaded: list[str] = []
    monkeypatch.setattr(models, "load_causal_lm", lambda spec: loaded.append(spec.cell.id) or object())
    cpu = load_profile("cpu")
    built = models.build_models(spec_of(cell("two_models", "none", "zero2"), cpu))
    assert built.ref_model is None and len(loaded) == 1
    built = models.build_models(spec_of(cell("two_models", "none", "zero2", Setup.NEWCOMER), cpu))
    assert built.ref_model is not None and len(loaded) == 3


def test_spec_json_round_trips_with_its_recipe(tmp_path):
    spec = spec_of(cell("one_adapter", "nf4", "zero3"), load_profile("2xA10"))
    path = tmp_path / "spec.json"
    path.write_text(spec.model_dump_json())
    assert WorkerSpec.read(path) == spec and WorkerSpec.read(path).recipe == spec.recipe


# ---------------------------------------------------------------- versions


REQUIRES = (
    Requirement(package="bitsandbytes", specifier=">=0.43.3", recipe="zero3-qlora", link="https://guide"),
    Requirement(package="peft", specifier=">0.13.0", recipe="zero3-qlora", link="https://guide"),
)


def test_version_problems_name_package_installed_and_required_versions_and_the_link():
    assert version_problems(REQUIRES, {"bitsandbytes": "0.50.2", "peft": "0.21.2"}) == []
    problems = version_problems(REQUIRES, {"bitsandbytes": "0.43.1", "peft": None})
    assert problems == [
        "recipe zero3-qlora needs bitsandbytes>=0.43.3, installed: 0.43.1 (https://guide)",
        "recipe zero3-qlora needs peft>0.13.0, installed: none (https://guide)",
    ]
    assert version_problems(REQUIRES[:1], {"bitsandbytes": "not-a-version"})


def test_a_recipe_on_other_versions_is_refused_before_any_model_loads(monkeypatch):
    applied = AppliedRecipe(requires=REQUIRES)
    with pytest.raises(RecipeVersionError, match=r"bitsandbytes>=0.43.3, installed: 0.43.1"):
        verify_installed(applied, {"bitsandbytes": "0.43.1", "peft": "0.21.2"})
    verify_installed(applied, {"bitsandbytes": "0.43.3", "peft": "0.14.0"})

    from bench.matrix import recipes as recipes_module

    monkeypatch.setattr(recipes_module, "installed_versions", lambda packages: dict.fromkeys(packages, "0.0.1"))
    monkeypatch.setattr(models, "load_causal_lm", lambda spec: pytest.fail("loaded a model"))
    with pytest.raises(RecipeVersionError, match=r"recipe zero3-qlora needs transformers>4\.44\.2, installed: 0\.0\.1"):
        models.build_models(spec_of(cell("one_adapter", "nf4", "zero3"), load_profile("cpu")))


def test_the_installed_stack_meets_every_recipe():
    for entry in recipes():
        verify_installed(AppliedRecipe(requires=resolve_requires(entry)))


def resolve_requires(entry: Recipe) -> tuple[Requirement, ...]:
    return tuple(
        Requirement(package=p, specifier=s, recipe=entry.id, link=entry.link) for p, s in entry.requires.items()
    )


def test_a_version_mismatch_is_its_own_error_class():
    message = "RecipeVersionError: recipe zero3-qlora needs bitsandbytes>=0.43.3, installed: 0.43.1 (https://guide)"
    verdict = classify(exit_code=1, timed_out=False, error_texts=[message + "\nTraceback ..."], log_tail="")
    assert (verdict.status, verdict.error_class) == (Status.ERROR, ErrorClass.VERSION)
    assert verdict.message == message


# ---------------------------------------------------------------- runs that predate a row


def test_rows_added_after_a_run_started_are_not_required_of_it():
    added = rows_added(load_matrix())
    assert {c for c in added if c.endswith("+newcomer")} == NEWCOMER_IDS
    assert all(when.tzinfo is not None for when in added.values())
    ids = ["a", "b+newcomer"]
    at = dt.datetime(2026, 11, 23, 11, tzinfo=dt.UTC)
    assert rows_for_run(ids, {"b+newcomer": at}, at - dt.timedelta(hours=3)) == ["a"]
    assert rows_for_run(ids, {"b+newcomer": at}, at + dt.timedelta(seconds=1)) == ids
    assert rows_for_run(ids, {"b+newcomer": at}, None) == ids


@pytest.mark.parametrize("hw", ["cpu", "cpu-budget"])
def test_committed_runs_stay_complete_and_their_cell_ids_still_match(hw):
    hardware_dir = tracked_results() / hw
    if not (hardware_dir / "MATRIX.md").is_file():
        pytest.skip(f"no committed matrix for {hw}")
    ids = [c.id for c in CELLS if c.method == "dpo"]
    run_dir = latest_complete_run(hardware_dir, ids, rows_added(load_matrix()))
    committed = {r.cell_id for r in load_results(run_dir).records}
    assert committed <= {c.id for c in CELLS}
    # a run of the other methods (their MATRIX.md sections) is complete for the methods it ran
    for run_dir in run_dirs(hardware_dir):
        records = load_results(run_dir).records
        methods = {r.method for r in records} - {"dpo"}
        if methods and len(records) > 1:
            method_ids = [c.id for c in CELLS if c.method in methods]
            assert {r.cell_id for r in records} <= set(method_ids) | set(ids)


def test_the_matrix_lists_a_row_this_run_predates_as_not_run_yet():
    records = [record("one_adapter-nf4-zero3").model_copy(update={"quant": "nf4", "backend": "zero3"})]
    text = render(records, "cpu", [], pending=["one_adapter-nf4-zero3+newcomer"])
    assert f"| one_adapter-nf4-zero3+newcomer |  |  |  | {NOT_RUN_YET} |" in text
    newcomer = record("two_models-none-zero2+newcomer").model_copy(
        update={"init": "two_models", "backend": "zero2", "launcher": "deepspeed", "setup": "newcomer"}
    )
    assert "| two_models-none-zero2+newcomer | deepspeed |  | newcomer |" in render([newcomer], "cpu", [])


def test_records_know_their_setup():
    legacy = record("x").model_dump(mode="json")
    legacy.pop("setup")
    assert ResultRecord.model_validate(legacy).setup == "recipe"  # records from before setups are recipe rows


def test_emulation_caps_every_device_a_newcomer_auto_model_spreads_over(monkeypatch):
    from bench.worker import build

    capped: list[bool] = []
    monkeypatch.setattr(build, "apply_memory_cap", lambda all_devices, launcher: capped.append(all_devices))
    monkeypatch.setattr(build, "trl_trainer", lambda spec, callbacks: "trl")
    two_gpus = load_profile("2xA10")
    build.build_trainer(spec_of(cell("one_adapter", "nf4", "single", Setup.NEWCOMER), two_gpus), [])
    build.build_trainer(spec_of(cell("one_adapter", "nf4", "single"), two_gpus), [])
    assert capped == [True, False]


def test_a_package_without_its_dist_info_is_still_seen_at_its_modules_version(tmp_path, monkeypatch):
    """bitsandbytes copied in without its dist-info (a trimmed install): the recipe gate reads its __version__."""
    from bench.matrix.packages import installed_versions

    (tmp_path / "copied_package").mkdir()
    (tmp_path / "copied_package" / "__init__.py").write_text('__version__ = "0.50.2"\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    assert installed_versions(("copied-package", "no-such-package")) == {
        "copied-package": "0.50.2",
        "no-such-package": None,
    }
