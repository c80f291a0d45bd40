"""How a CPU process's measured figure charges its weights and its own state (bench/estimate/cpu_terms.py)."""

import pytest

from bench.estimate import cpu_terms
from bench.estimate.predict import cpu_copies_placed_models, predict_cell
from bench.matrix.axes import Backend, Init, Method, Option, Quant
from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.matrix.profiles import load_profile, load_workload
from bench.units import MiB


def cell(init, quant, backend, **fields):
    return Cell(init=init, quant=quant, backend=backend, launcher=backend_spec(backend).default_launcher, **fields)


def test_memory_kind_follows_the_budget():
    assert cpu_terms.memory_kind(None) == "rss"
    assert cpu_terms.memory_kind(2**30) == "cgroup"


def test_mapped_weights_cost_a_cgroup_nothing_until_written():
    assert cpu_terms.weights_charged(100.0, 80.0, 0.0, "rss") == 100.0  # RSS counts touched file pages
    assert cpu_terms.weights_charged(100.0, 80.0, 0.0, "cgroup") == 20.0  # only the anonymous part
    assert cpu_terms.weights_charged(100.0, 80.0, 80.0, "cgroup") == 100.0  # written: private copies
    assert cpu_terms.weights_charged(100.0, 80.0, 500.0, "cgroup") == 100.0  # never more than was mapped


def test_process_terms_by_kind_and_engine():
    plain = cpu_terms.process_terms("cgroup", deepspeed_imported_first=False, zero_stage=None)
    assert "library_pages" not in plain and "zero3_engine_state" not in plain
    rss = cpu_terms.process_terms("rss", deepspeed_imported_first=True, zero_stage=3)
    assert rss["library_pages"] == cpu_terms.LIBRARY_PAGES
    assert rss["zero3_engine_state"] == cpu_terms.ZERO3_ENGINE_STATE
    assert plain["trainer_state"] - rss["trainer_state"] == cpu_terms.DEEPSPEED_IMPORT


def test_small_adapter_cell_under_a_budget_charges_no_mapped_weights():
    workload = load_workload("small")
    single = predict_cell(cell(Init.ONE_ADAPTER, Quant.NONE, Backend.SINGLE), load_profile("cpu-budget"), workload)
    assert single.memory_kind == "cgroup" and "weights" not in single.terms
    # the same cell measured by RSS counts every mapped page
    rss = predict_cell(cell(Init.ONE_ADAPTER, Quant.NONE, Backend.SINGLE), load_profile("cpu"), workload)
    assert rss.memory_kind == "rss" and rss.terms["weights"] == pytest.approx(single_weights(workload))


def single_weights(workload) -> float:
    from bench.estimate.shapes import shapes_for

    return shapes_for(workload).total * 4


def test_ddp_copies_and_a_full_fine_tune_writes_the_mapped_weights():
    workload, budget = load_workload("small"), load_profile("cpu-budget")
    ddp = predict_cell(cell(Init.ONE_ADAPTER, Quant.NONE, Backend.DDP), budget, workload)
    assert ddp.terms["weights"] == pytest.approx(single_weights(workload))  # each rank's copy on "cpu:0"
    full = predict_cell(cell(Init.TWO_MODELS, Quant.NONE, Backend.SINGLE), load_profile("cpu-budget-4g"), workload)
    assert full.terms["weights"] == pytest.approx(single_weights(workload))  # the optimizer writes them
    assert "reference_model" not in full.terms  # a frozen mapping of the same file
    # under DDP the reference is copied as the policy is, although nothing trains or broadcasts into it
    full_ddp = predict_cell(cell(Init.TWO_MODELS, Quant.NONE, Backend.DDP), load_profile("cpu-budget-4g"), workload)
    assert full_ddp.terms["reference_model"] == pytest.approx(single_weights(workload))
    assert full_ddp.terms["weights"] == pytest.approx(single_weights(workload))


def test_a_reward_model_is_charged_where_ddp_copies_it():
    workload, budget = load_workload("small"), load_profile("cpu-budget")

    def online(backend):
        grpo = cell(Init.TWO_MODELS, Quant.NONE, backend, method=Method.GRPO, options=[Option.REWARD_MODEL])
        return predict_cell(grpo, budget, workload).terms

    assert "reward_model" not in online(Backend.SINGLE)  # mapped, never written
    assert online(Backend.DDP)["reward_model"] > 0


def test_only_ddp_on_several_ranks_copies_placed_models():
    assert cpu_copies_placed_models(Backend.DDP, 2)
    assert not cpu_copies_placed_models(Backend.DDP, 1)
    assert not cpu_copies_placed_models(Backend.ZERO2, 2)
    assert not cpu_copies_placed_models(Backend.SINGLE, 1)


def test_the_deepspeed_shm_buffer_is_whole_in_a_cgroup_and_touched_pages_in_rss():
    workload = load_workload("small")
    zero = cell(Init.ONE_ADAPTER, Quant.NONE, Backend.ZERO2)
    cgroup = predict_cell(zero, load_profile("cpu-budget-4g"), workload)
    rss = predict_cell(zero, load_profile("cpu"), workload)
    assert cgroup.terms["deepspeed_shm_allreduce"] == 66 * MiB
    assert rss.terms["deepspeed_shm_allreduce"] < 1 * MiB  # the adapters' gradients only


def test_process_terms_are_the_measured_figures():
    # bench/selfbench/memory_phases.py on tiny and small (docs/estimator.md, "CPU process terms")
    assert cpu_terms.process_terms("cgroup", deepspeed_imported_first=False, zero_stage=2) == {
        "trainer_state": 25.3 * MiB,
        "model_and_data_objects": 3.8 * MiB,
        "heap_retention": 20 * MiB,
    }
    assert cpu_terms.process_terms("rss", deepspeed_imported_first=True, zero_stage=3) == {
        "trainer_state": pytest.approx((25.3 - 11.8) * MiB),
        "model_and_data_objects": 3.8 * MiB,
        "heap_retention": 20 * MiB,
        "zero3_engine_state": 9 * MiB,
        "library_pages": 24 * MiB,
    }
