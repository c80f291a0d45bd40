import pytest

from bench.errors import BenchError
from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.matrix.methods import method_spec
from bench.matrix.on_profile import CellOnProfile
from bench.matrix.profiles import load_profile
from bench.matrix.scenario import (
    Backend,
    Init,
    Launcher,
    MatrixSpec,
    Method,
    Option,
    Quant,
    expand,
    load_matrix,
    not_applicable_reason,
    rows_added,
    select,
)


def test_shipped_matrix_expands_to_every_base_cell_plus_variants():
    cells = expand(load_matrix())
    ids = [c.id for c in cells]
    assert len(ids) == len(set(ids))
    base = [c for c in cells if not c.is_variant and c.method == "dpo"]
    # DPO's init modes are the ones that place a reference: `full` (no reference) is the other methods'
    assert len(base) == (len(Init) - 1) * len(Quant) * len(Backend)
    offline = [m for m in Method if m != "dpo" and not method_spec(m).generates]
    others = [c for c in cells if not c.is_variant and c.method in offline]
    assert len(others) == len(offline) * len(Init) * len(Quant) * len(Backend)
    assert "one_adapter-none-ddp+mpirun" in ids
    assert "one_adapter-none-zero2+mpirun" in ids


def test_cell_ids_are_stable_and_name_only_non_default_choices():
    cell = Cell(init="one_adapter", quant="nf4", backend="zero3", launcher="deepspeed")
    assert cell.id == "one_adapter-nf4-zero3"
    variant = Cell(init="two_models", quant="none", backend="ddp", launcher="mpirun", options=("precompute_ref",))
    assert variant.id == "two_models-none-ddp+mpirun+precompute_ref"


def test_quantized_full_finetune_is_not_applicable(cpu_profile):
    cell = Cell(init="two_models", quant="int8", backend="single", launcher="python")
    assert "need adapters" in not_applicable_reason(CellOnProfile(cell, cpu_profile))
    adapter = cell.model_copy(update={"init": Init.ONE_ADAPTER})
    assert not_applicable_reason(CellOnProfile(adapter, cpu_profile)) is None


def test_device_map_needs_two_devices(cpu_profile):
    cell = Cell(init="one_adapter", quant="none", backend="device_map", launcher="python")
    assert ">=2 devices" in not_applicable_reason(CellOnProfile(cell, cpu_profile))
    two_gpus = cpu_profile.model_copy(update={"device_count": 2})
    assert not_applicable_reason(CellOnProfile(cell, two_gpus)) is None


def test_multi_process_backends_need_two_processes(cpu_profile):
    cell = Cell(init="one_adapter", quant="none", backend="zero3", launcher="deepspeed")
    one = cpu_profile.model_copy(update={"processes": 1})
    assert "needs >=2 processes" in not_applicable_reason(CellOnProfile(cell, one))
    assert CellOnProfile(cell, cpu_profile).world == 2
    assert CellOnProfile(cell.model_copy(update={"backend": Backend.SINGLE}), cpu_profile).world == 1


@pytest.mark.parametrize("backend", ["zero2", "zero3", "fsdp", "ddp"])
def test_sharding_backends_at_world_size_one_say_what_offload_is_for(backend):
    one_gpu = load_profile("1xH100")
    cell = Cell(init="one_adapter", quant="none", backend=backend, launcher="accelerate")
    reason = not_applicable_reason(CellOnProfile(cell, one_gpu))
    assert reason.startswith(f"backend_needs_processes: {backend} needs >=2 processes")
    if backend != "ddp":
        assert "saves nothing" in reason and "offload" in reason


@pytest.mark.parametrize("backend", ["zero2_offload", "zero3_offload", "zero3_offload_param", "fsdp_offload"])
def test_offload_backends_run_on_one_gpu(backend):
    cell = Cell(init="one_adapter", quant="nf4", backend=backend, launcher=backend_spec(backend).default_launcher)
    one_gpu = load_profile("1xH100")
    assert not_applicable_reason(CellOnProfile(cell, one_gpu)) is None and CellOnProfile(cell, one_gpu).world == 1


def test_a_one_rank_row_runs_on_one_rank_and_is_not_repeated_where_that_is_the_profile(cpu_profile):
    row = Cell(init="one_adapter", quant="none", backend="zero3_offload", launcher="deepspeed", ranks=1)
    assert row.id == "one_adapter-none-zero3_offload+1rank" and row.is_variant
    assert CellOnProfile(row, cpu_profile).world == 1 and not_applicable_reason(CellOnProfile(row, cpu_profile)) is None
    assert "would repeat one_adapter-none-zero3_offload" in not_applicable_reason(
        CellOnProfile(row, load_profile("1xH100"))
    )
    three = row.model_copy(update={"ranks": 3})
    assert "asks for 3 ranks; profile cpu has 2" in not_applicable_reason(CellOnProfile(three, cpu_profile))


def test_ranks_rows_are_checked_against_the_backend_table(scenario_copy):
    path = scenario_copy / "matrix.yaml"
    axes = "axes: {init: [one_adapter], quant: [none], backend: [single]}\n"
    for row, message in (
        ("backend: [zero2], ranks: 1", "ranks 1 for zero2: at world size 1 ZeRO shards"),
        ("backend: [single], ranks: 1", "ranks applies to multi-process backends; single runs one process"),
    ):
        path.write_text(axes + f"variants:\n  - {{init: [one_adapter], quant: [none], {row}}}\n")
        with pytest.raises(BenchError, match=message):
            load_matrix(path)


def test_backends_added_to_the_axes_date_their_rows(scenario_copy):
    path = scenario_copy / "matrix.yaml"
    path.write_text(
        "axes: {init: [one_adapter], quant: [none], backend: [single, zero2_offload]}\n"
        "added:\n  - {backend: [zero2_offload], at: 2026-11-24T00:00:00Z}\n"
        "variants:\n  - {init: [one_adapter], quant: [none], backend: [zero2_offload], ranks: 1,"
        " added: 2026-11-25T00:00:00Z}\n"
    )
    added = {cell: str(when) for cell, when in rows_added(load_matrix(path)).items()}
    assert added == {
        "one_adapter-none-zero2_offload": "2026-11-24 00:00:00+00:00",
        "one_adapter-none-zero2_offload+1rank": "2026-11-25 00:00:00+00:00",
    }
    path.write_text(
        "axes: {init: [one_adapter], quant: [none], backend: [single]}\n"
        "added:\n  - {backend: [zero2_offload], at: 2026-11-24T00:00:00Z}\n"
    )
    with pytest.raises(BenchError, match=r"added backend zero2_offload is not in axes\.backend"):
        load_matrix(path)


def test_precompute_with_two_adapters_is_not_applicable(cpu_profile):
    cell = Cell(
        init="two_adapters", quant="none", backend="single", launcher="python", options=(Option.PRECOMPUTE_REF,)
    )
    assert "precompute_ref" in not_applicable_reason(CellOnProfile(cell, cpu_profile))


def test_variant_with_a_launcher_that_cannot_launch_the_backend_is_rejected(scenario_copy):
    path = scenario_copy / "matrix.yaml"
    path.write_text(
        "axes: {init: [one_adapter], quant: [none], backend: [single]}\n"
        "variants:\n  - {init: [one_adapter], quant: [none], backend: [fsdp], launcher: mpirun}\n"
    )
    with pytest.raises(BenchError, match=r"matrix.yaml: key 'variants.0': launcher mpirun cannot launch backend fsdp"):
        load_matrix(path)


def test_newcomer_rows_are_dated_variants_and_a_variant_must_change_something(scenario_copy):
    path = scenario_copy / "matrix.yaml"
    path.write_text(
        "axes: {init: [one_adapter], quant: [none], backend: [single]}\n"
        "variants:\n  - {init: [one_adapter], quant: [nf4], backend: [zero3], setup: newcomer,"
        " added: 2026-11-23T11:00:00Z}\n"
    )
    matrix = load_matrix(path)
    assert [c.id for c in expand(matrix)] == ["one_adapter-none-single", "one_adapter-nf4-zero3+newcomer"]
    assert [str(when) for when in rows_added(matrix).values()] == ["2026-11-23 11:00:00+00:00"]
    path.write_text(
        "axes: {init: [one_adapter], quant: [none], backend: [single]}\n"
        "variants:\n  - {init: [one_adapter], quant: [none], backend: [ddp], setup: recipe}\n"
    )
    with pytest.raises(BenchError, match="a variant needs a launcher, ranks, options or setup: newcomer"):
        load_matrix(path)


def test_unknown_axis_value_names_file_key_and_allowed_values(scenario_copy):
    path = scenario_copy / "matrix.yaml"
    path.write_text("axes: {init: [one_adapter], quant: [int3], backend: [single]}\n")
    with pytest.raises(BenchError) as err:
        load_matrix(path)
    message = str(err.value)
    assert "matrix.yaml" in message and "axes.quant.0" in message and "'int3'" in message
    assert "'none', 'int8' or 'nf4'" in message


def test_filter_globs_and_no_match():
    cells = expand(
        MatrixSpec.model_validate(
            {"axes": {"init": ["one_adapter"], "quant": ["none", "nf4"], "backend": ["single", "ddp"]}}
        )
    )
    assert [c.id for c in select(cells, "*-nf4-*")] == ["one_adapter-nf4-single", "one_adapter-nf4-ddp"]
    assert len(select(cells, "one_adapter-none-single, *-ddp")) == 3
    with pytest.raises(BenchError, match="matches no cell"):
        select(cells, "nothing*")


@pytest.mark.parametrize("pattern", ["", " ", ",", " , ,"])
def test_an_empty_filter_is_refused_not_taken_as_every_cell(pattern):
    """`--filter "$CELLS"` with an empty variable once started a 103-cell run without a word."""
    cells = expand(load_matrix())
    with pytest.raises(BenchError, match=r"^--filter .* names no cell pattern: leave --filter out to take every cell"):
        select(cells, pattern)
    assert select(cells, None) == cells  # no --filter at all: every cell


def test_default_launchers():
    cells = {c.backend: c.launcher for c in expand(load_matrix()) if not c.is_variant}
    assert cells[Backend.DDP] == Launcher.TORCHRUN
    assert cells[Backend.ZERO3] == Launcher.DEEPSPEED
    assert cells[Backend.FSDP] == Launcher.ACCELERATE
