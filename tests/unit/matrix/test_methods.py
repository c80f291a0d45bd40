"""The method axis: one table entry per method, ids prefixed only where the method is not DPO, the reference-free
N/A rules read from the table, the matrix.yaml section that lists the other methods' cells, and --method."""

import pytest
from pydantic import ValidationError

from bench.errors import BenchError
from bench.matrix.axes import Method
from bench.matrix.cell import Cell
from bench.matrix.methods import METHODS, MethodSpec, method_spec
from bench.matrix.scenario import (
    MatrixSpec,
    expand,
    load_matrix,
    not_applicable_reason,
    of_methods,
    parse_methods,
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
    offline = [c for c in cells[first_other:] if not METHODS[c.method].generates]
    assert {c.backend for c in offline} == {"single", "ddp"}


@pytest.mark.parametrize("method", [Method.SFT, Method.REWARD, Method.ORPO, Method.SIMPO])
def test_reference_free_methods_have_no_reference_to_hold_or_precompute(method, cpu_profile):
    two_models = not_applicable_reason(cell(method, "two_models", "none", "single", "python"), cpu_profile)
    assert two_models.startswith("reference_free_init: ") and "separate reference model" in two_models
    two_adapters = not_applicable_reason(cell(method, "two_adapters", "none", "single", "python"), cpu_profile)
    assert "frozen `ref` copy" in two_adapters
    precompute = cell(method, "one_adapter", "none", "single", "python", options=("precompute_ref",))
    assert not_applicable_reason(precompute, cpu_profile).startswith("reference_free_precompute: ")
    assert not_applicable_reason(cell(method, "one_adapter", "none", "single", "python"), cpu_profile) is None


def test_a_method_with_a_reference_keeps_every_init_mode(cpu_profile):
    for init in ("two_models", "one_adapter", "two_adapters"):
        assert not_applicable_reason(cell("kto", init, "none", "single", "python"), cpu_profile) is None


def test_the_rules_read_the_table_not_the_method_names(monkeypatch, cpu_profile):
    monkeypatch.setitem(METHODS, Method.SFT, MethodSpec(Method.SFT, trainer="x.Y", reference=True, stage="sft"))
    assert not_applicable_reason(cell("sft", "two_models", "none", "single", "python"), cpu_profile) is None


def test_the_methods_section_lists_only_other_methods():
    with pytest.raises(ValidationError, match="dpo's cells are the axes"):
        MatrixSpec.model_validate(
            {
                "axes": {"init": ["one_adapter"], "quant": ["none"], "backend": ["single"]},
                "methods": [{"method": ["dpo"], "init": ["one_adapter"], "quant": ["none"], "backend": ["single"]}],
            }
        )


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
