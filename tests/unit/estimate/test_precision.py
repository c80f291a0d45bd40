"""The precision knob's memory terms (bench/matrix/precision.py): pure bf16 drops the fp32 master copy, fp16-mixed
holds fp32 weights, gradients and optimizer state where fp16 weights would be half."""

from bench.estimate.knobs import Knobs
from bench.estimate.predict import predict_cell
from bench.matrix.axes import Backend, Init, Quant
from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.matrix.profiles import load_profile, load_workload


def predicted(init, backend=Backend.SINGLE, hardware="1xH100", **knobs):
    cell = Cell(init=init, quant=Quant.NONE, backend=backend, launcher=backend_spec(backend).default_launcher)
    return predict_cell(cell, load_profile(hardware), load_workload("llama-3.2-1b"), knobs=Knobs(**knobs))


def test_fp16_mixed_holds_fp32_weights_gradients_and_optimizer_state():
    mixed, fp16 = predicted(Init.TWO_MODELS, precision="mixed"), predicted(Init.TWO_MODELS, precision="fp16-mixed")
    for term in ("weights", "gradients", "optimizer", "reference_model"):
        assert fp16.terms[term] == 2 * mixed.terms[term], term
    assert fp16.terms["activations"] == mixed.terms["activations"]  # fp16 autocast: 2 bytes, as bf16
    assert any(n.startswith("precision fp16-mixed:") for n in fp16.notes)


def test_a_t4_trains_fp16_mixed_by_default():
    # the T4 has no bf16: its profile's precision is fp16, which loads fp32 weights
    t4 = predicted(Init.TWO_MODELS, hardware="1xT4")
    assert t4.terms["weights"] == predicted(Init.TWO_MODELS, precision="fp16-mixed").terms["weights"]


def test_deepspeed_fp16_casts_the_weights_and_keeps_its_master_copy_in_the_optimizer():
    stage2 = {"init": Init.TWO_MODELS, "backend": Backend.ZERO2, "hardware": "8xA100-80G"}
    assert predicted(**stage2, precision="fp16-mixed").terms["weights"] == predicted(**stage2).terms["weights"]


def test_pure_bf16_drops_the_fp32_master_copy():
    fsdp = {"init": Init.TWO_MODELS, "backend": Backend.FSDP, "hardware": "8xA100-80G"}
    mixed, pure = predicted(**fsdp), predicted(**fsdp, precision="pure-bf16")
    assert pure.terms["weights"] == mixed.terms["weights"] / 2
    assert pure.train_bytes < mixed.train_bytes
    adapters = predicted(Init.ONE_ADAPTER, precision="pure-bf16").terms["adapters"]
    assert adapters == predicted(Init.ONE_ADAPTER).terms["adapters"] / 2  # PEFT's fp32 adapters kept in bf16
    assert (
        predicted(Init.ONE_ADAPTER, precision="pure-bf16").terms
        == predicted(Init.ONE_ADAPTER, master_weights=False).terms
    )


def test_the_default_precision_says_nothing_and_a_named_one_is_said():
    assert not [n for n in predicted(Init.ONE_ADAPTER).notes if n.startswith("precision")]
    assert any(n.startswith("precision mixed:") for n in predicted(Init.ONE_ADAPTER, precision="mixed").notes)
