"""vLLM's memory where it generates: colocated, its share of every training card (or its need where larger, and
said); served, GPUs of its own named and none of the training card; without vLLM, transformers' KV cache on the
training card. Figures by hand from the formula in docs/evidence/vllm.md."""

import pytest

from bench.advise.target import TargetRequest, resolve_target
from bench.estimate import vllm_terms
from bench.estimate.predict import predict_cell
from bench.matrix.cell import Cell
from bench.units import GB

WEIGHTS, KV_PER_TOKEN, SEQUENCE, CARD = 15.2e9, 57_344, 3_072, 80e9
"""A 7B in bf16 (Qwen2.5-7B: 28 layers x 2 x 4 KV heads x 128 dims x 2 bytes = 57,344 bytes per token), P + C."""


def test_colocated_vllm_reserves_its_share_of_each_training_card():
    found = vllm_terms.vllm_terms(vllm_terms.VllmUse("colocate", 0.3), CARD, WEIGHTS, KV_PER_TOKEN, SEQUENCE)
    assert found.device == {"vllm_reserved": pytest.approx(0.3 * 80e9)}
    assert found.server_gpus == 0 and "0.3 of each card (24.0 GB)" in found.notes[0]


def test_a_share_below_the_engines_need_is_charged_at_the_need_and_said():
    found = vllm_terms.vllm_terms(vllm_terms.VllmUse("colocate", 0.1), CARD, WEIGHTS, KV_PER_TOKEN, SEQUENCE)
    need = 15.2e9 + 57_344 * 3_072  # weights + one full sequence's KV: 15.376 GB
    assert found.device["vllm_reserved"] == pytest.approx(need)
    assert "would not start" in found.notes[1] and "0.2 of the card" in found.notes[1]


def test_a_vllm_server_holds_nothing_on_the_training_cards_and_names_its_gpus():
    found = vllm_terms.vllm_terms(vllm_terms.VllmUse("server", 0.9), CARD, WEIGHTS, KV_PER_TOKEN, SEQUENCE)
    assert found.device == {} and found.server_gpus == 1
    big = vllm_terms.vllm_terms(vllm_terms.VllmUse("server", 0.9), CARD, 145e9, KV_PER_TOKEN, SEQUENCE)
    assert big.server_gpus == 4  # 145.2 GB over 72 GB per GPU: 2.02 GPUs, a power of two: 4
    assert "--tensor_parallel_size 4" in big.notes[0]


def test_who_generates_follows_the_flag_else_the_cells_vllm_option():
    _, workload = resolve_target(TargetRequest(gpu="H100:1", model="qwen2.5-7b"))
    plain = Cell(method="grpo", init="one_adapter", quant="none", backend="single", launcher="python")
    with_vllm = plain.model_copy(update={"options": ("vllm",)})
    assert vllm_terms.vllm_use(plain, workload) is None
    assert vllm_terms.vllm_use(with_vllm, workload) == vllm_terms.VllmUse("colocate", 0.3)
    served = workload.model_copy(update={"generation": workload.generation.model_copy(update={"vllm": "server"})})
    assert vllm_terms.vllm_use(plain, served) == vllm_terms.VllmUse("server", 0.9)


def _with(workload, **generation):
    return workload.model_copy(update={"generation": workload.generation.model_copy(update=generation)})


def test_the_prediction_carries_vllms_share_in_place_of_transformers_kv_cache():
    profile, workload = resolve_target(TargetRequest(gpu="H100:1", model="qwen2.5-7b"))
    workload = _with(workload, num_generations=16)  # generation's KV cache sets the peak, not a layer's backward
    cell = Cell(method="grpo", init="one_adapter", quant="none", backend="single", launcher="python")
    plain = predict_cell(cell, profile, workload)
    colocated = predict_cell(cell, profile, _with(workload, vllm="colocate"))
    served = predict_cell(cell, profile, _with(workload, vllm="server"))
    card = profile.memory_per_device_gb * GB
    assert "kv_cache" in plain.terms and "vllm_reserved" not in plain.terms
    assert colocated.terms["vllm_reserved"] == pytest.approx(0.3 * card) and "kv_cache" not in colocated.terms
    assert "vllm_reserved" not in served.terms and "kv_cache" not in served.terms
    assert any(n.startswith("vLLM server: 1 more GPU") for n in served.notes)
    left_out = predict_cell(cell.model_copy(update={"options": ("vllm",)}), profile, _with(workload, vllm="none"))
    assert left_out.status == "not_applicable" and left_out.reason.startswith("--vllm none")
