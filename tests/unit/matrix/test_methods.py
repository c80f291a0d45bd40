"""The method axis: one table entry per method, ids prefixed only where the method is not DPO, the reference-free
N/A rules read from the table, the matrix.yaml section that lists the other methods' cells, and --method."""

import pytest
from pydantic import ValidationError

from bench.errors import BenchError
from bench.matrix.axes import Method
from bench.matrix.cell import Cell
from bench.matrix.methods import METHODS, MethodSpec, method_spec
from bench.matrix.on_profile import CellOnProfile
from bench.matrix.scenario import (
    MatrixSpec,
    expand,
    load_matrix,
    not_applicable_reason,
    of_methods,
    parse_methods,
    rows_added,
)


def cell(method="sft", init="one_adapter", quant="nf4", backend="zero3", launcher="deepspeed", **kw) -> Cell:
    return Cell(method=method, init=init, quant=quant, backend=backend, launcher=launcher, **kw)


def test_every_method_has_one_entry_naming_its_trainer():
    assert set(METHODS) == set(Method)
    assert method_spec("sft").trainer == "trl.SFTTrainer" and method_spec(Method.KTO).reference
    assert [m for m, s in METHODS.items() if s.experimental] == [Method.ORPO, Method.SIMPO]
    assert {m for m, s in METHODS.items() if s.reference} == {Method.DPO, Method.KTO, Method.GRPO, Method.RLOO}
    assert {m for m, s in METHODS.items() if s.generates} == {Method.GRPO, Method.RLOO}
    assert method_spec("simpo").trainer_class == "CPOTrainer"


def test_ids_carry_the_method_only_where_it_is_not_dpo():
    assert cell().id == "sft-one_adapter-nf4-zero3"
    assert cell(method="dpo").id == "one_adapter-nf4-zero3"
    assert not cell().is_variant and cell(options=("precompute_ref",), method="kto").is_variant
    assert cell(method="kto", options=("precompute_ref",)).id == "kto-one_adapter-nf4-zero3+precompute_ref"


def test_every_dpo_id_of_the_matrix_is_unchanged_and_the_methods_come_after():
    cells = expand(load_matrix())
    methods = [c.method for c in cells]
    first_other = next(i for i, m in enumerate(methods) if m != Method.DPO)
    assert all(m == Method.DPO for m in methods[:first_other])
    assert all(m != Method.DPO for m in methods[first_other:])
    assert "one_adapter-none-ddp+mpirun" in {c.id for c in cells[:first_other]}
    others = {c.method for c in cells[first_other:]}
    assert others == set(Method) - {Method.DPO}


def _rows(cells, method):
    """(backend, launcher, ranks) rows and the init x quant pairs of one method's recipe cells without options."""
    mine = [c for c in cells if c.method == method and c.setup == "recipe" and not c.options]
    return {(c.backend, c.launcher, c.ranks) for c in mine}, {(c.init, c.quant) for c in mine}


@pytest.mark.parametrize("method", sorted(m for m in set(Method) - {Method.DPO} if not METHODS[m].generates))
def test_every_method_runs_on_every_backend_and_launcher_dpo_does(method):
    cells = expand(load_matrix())
    dpo_rows, dpo_inits = _rows(cells, Method.DPO)
    rows, inits = _rows(cells, method)
    assert dpo_rows <= rows, sorted(dpo_rows - rows)
    assert dpo_inits <= inits and ("full", "none") in inits
    if method == Method.KTO:  # DPO's precompute_ref rows: the other method with a reference has them too
        dpo_pre = {(c.init, c.backend) for c in cells if c.method == Method.DPO and "precompute_ref" in c.options}
        assert dpo_pre == {(c.init, c.backend) for c in cells if c.method == method and "precompute_ref" in c.options}


def test_dpo_has_no_full_cells_and_its_matrix_is_the_axes_and_variants():
    matrix = load_matrix()
    assert "full" not in matrix.axes.init
    assert not any(c.init == "full" for c in expand(matrix) if c.method == Method.DPO)


@pytest.mark.parametrize("method", [Method.SFT, Method.REWARD, Method.ORPO, Method.SIMPO])
def test_reference_free_methods_have_no_reference_to_hold_or_precompute(method, cpu_profile):
    two_models = not_applicable_reason(
        CellOnProfile(cell(method, "two_models", "none", "single", "python"), cpu_profile)
    )
    assert two_models.startswith("reference_free_init: ") and "separate reference model" in two_models
    assert two_models.endswith("; train its full weights on full")
    two_adapters = not_applicable_reason(
        CellOnProfile(cell(method, "two_adapters", "none", "single", "python"), cpu_profile)
    )
    assert "frozen `ref` copy" in two_adapters and two_adapters.endswith("; train its LoRA adapter on one_adapter")
    precompute = cell(method, "one_adapter", "none", "single", "python", options=("precompute_ref",))
    assert not_applicable_reason(CellOnProfile(precompute, cpu_profile)).startswith("reference_free_precompute: ")
    assert (
        not_applicable_reason(CellOnProfile(cell(method, "one_adapter", "none", "single", "python"), cpu_profile))
        is None
    )


@pytest.mark.parametrize("method", [Method.SFT, Method.REWARD, Method.ORPO, Method.SIMPO])
def test_a_reference_free_method_trains_its_full_weights_on_full(method, cpu_profile):
    assert not_applicable_reason(CellOnProfile(cell(method, "full", "none", "zero3", "deepspeed"), cpu_profile)) is None
    for quant in ("int8", "nf4"):
        reason = not_applicable_reason(CellOnProfile(cell(method, "full", quant, "zero3", "deepspeed"), cpu_profile))
        assert reason.startswith("quantized_full_finetune: ")


@pytest.mark.parametrize("method", [Method.DPO, Method.KTO])
def test_a_method_with_a_reference_has_none_on_full(method, cpu_profile):
    reason = not_applicable_reason(CellOnProfile(cell(method, "full", "none", "single", "python"), cpu_profile))
    assert reason.startswith("reference_needs_init: ") and "two_models" in reason
    precompute = cell(method, "full", "none", "single", "python", options=("precompute_ref",))
    assert not_applicable_reason(CellOnProfile(precompute, cpu_profile)).startswith("reference_needs_init: ")


def test_a_method_with_a_reference_keeps_every_init_mode_that_places_one(cpu_profile):
    for init in ("two_models", "one_adapter", "two_adapters"):
        assert not_applicable_reason(CellOnProfile(cell("kto", init, "none", "single", "python"), cpu_profile)) is None


def test_the_rules_read_the_table_not_the_method_names(monkeypatch, cpu_profile):
    monkeypatch.setitem(
        METHODS, Method.SFT, MethodSpec(Method.SFT, trainer="x.Y", reference=True, trainer_module="sft")
    )
    assert (
        not_applicable_reason(CellOnProfile(cell("sft", "two_models", "none", "single", "python"), cpu_profile)) is None
    )


def test_the_methods_section_lists_only_other_methods():
    with pytest.raises(ValidationError, match="dpo's cells are the axes"):
        MatrixSpec.model_validate(
            {
                "axes": {"init": ["one_adapter"], "quant": ["none"], "backend": ["single"]},
                "methods": [{"method": ["dpo"], "init": ["one_adapter"], "quant": ["none"], "backend": ["single"]}],
            }
        )


def test_a_methods_row_names_a_launcher_that_launches_its_backends_and_its_own_date():
    base = {"method": ["sft"], "init": ["one_adapter"], "quant": ["none"]}
    with pytest.raises(ValidationError, match="launcher mpirun cannot launch backend single"):
        MatrixSpec.model_validate(
            {
                "axes": {"init": ["one_adapter"], "quant": ["none"], "backend": ["single"]},
                "methods": [base | {"backend": ["single"], "launcher": "mpirun"}],
            }
        )
    matrix = MatrixSpec.model_validate(
        {
            "axes": {"init": ["one_adapter"], "quant": ["none"], "backend": ["single"]},
            "methods": [
                base | {"backend": ["single"]},
                base | {"backend": ["single", "zero2"], "added": "2026-11-27T00:00:00Z"},
                base | {"backend": ["zero2"], "launcher": "mpirun", "added": "2026-11-27T00:00:00Z"},
            ],
        }
    )
    assert [c.id for c in expand(matrix)] == [
        "one_adapter-none-single",
        "sft-one_adapter-none-single",
        "sft-one_adapter-none-zero2",
        "sft-one_adapter-none-zero2+mpirun",
    ]
    # a cell an undated row lists was there from the start
    assert sorted(rows_added(matrix)) == ["sft-one_adapter-none-zero2", "sft-one_adapter-none-zero2+mpirun"]


def test_method_option_picks_cells():
    assert parse_methods("dpo") == (Method.DPO,)
    assert parse_methods("sft, kto") == (Method.SFT, Method.KTO)
    assert parse_methods("all") == tuple(Method)
    with pytest.raises(BenchError, match=r"unknown method ppo; choose from dpo, sft, .*, all"):
        parse_methods("ppo")
    cells = expand(load_matrix())
    assert {c.method for c in of_methods(cells, parse_methods("orpo"))} == {Method.ORPO}


def test_a_cell_id_names_its_method_by_its_prefix_and_dpo_by_none():
    from bench.matrix.cell import method_of_id
    from bench.matrix.scenario import expand, load_matrix

    cells = expand(load_matrix())
    assert {c.method for c in cells} == set(Method)  # every method's ids are covered below
    assert all(method_of_id(c.id) == c.method for c in cells)


def test_disables_dropout_is_each_trainers_config_default():
    """MethodSpec.disables_dropout states what each TRL config defaults `disable_dropout` to (absent: no such field,
    dropout stays on)."""
    import dataclasses
    import importlib

    for method, spec in METHODS.items():
        module, name = spec.config.rsplit(".", 1)
        config = getattr(importlib.import_module(module), name)
        defaults = {f.name: f.default for f in dataclasses.fields(config)}
        assert spec.disables_dropout == defaults.get("disable_dropout", False), method
