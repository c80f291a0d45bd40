"""`work.layer_elementwise_bytes` against the bytes a real transformers decoder layer's elementwise ops read and
write: every aten op of one layer's forward that is not a matmul, the attention kernel or a view, its tensor
operands and results summed (a TorchDispatchMode), per token, in bf16 on the CPU; and under CUDA's autocast policy
where it differs from the CPU's (test_layer_saved._cuda_autocast_policy)."""

from dataclasses import replace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from bench.estimate.shapes import shapes_for
from bench.estimate.speed import work
from bench.matrix.profiles import load_workload
from tests.unit.estimate.test_layer_saved import HEADS, HIDDEN, INTERMEDIATE, _cuda_autocast_policy, _llama, _phi

TOKENS = 64
KERNELS = {"mm", "addmm", "bmm", "_unsafe_view", "_scaled_dot_product_flash_attention_for_cpu"}
"""The matmuls, the attention kernel (counted in FLOPs) and matmul's reshape of its output (no copy)."""


class ElementwiseBytes(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.total = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        view = any(r.alias_info is not None and not r.alias_info.is_write for r in func._schema.returns)
        if func.__name__.split(".")[0] not in KERNELS and not view:
            tensors = [t for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)]
            self.total += sum(t.numel() * t.element_size() for t in tensors)
        return out


def _measured(model) -> float:
    layer, x = model.model.layers[0], torch.randn(1, TOKENS, HIDDEN, dtype=torch.bfloat16)
    positions = torch.arange(TOKENS)[None]
    rotary = model.model.rotary_emb(x, positions)
    with torch.no_grad(), ElementwiseBytes() as counted:
        layer(x, position_embeddings=rotary, attention_mask=None, position_ids=positions)
    return counted.total / TOKENS


def _counted(layout: work.LayerLayout = work.LLAMA_LAYOUT) -> float:
    return work.layer_elementwise_bytes(HIDDEN, HIDDEN, HIDDEN, INTERMEDIATE, 2, layout=layout)


def _phi_layout(autocast: bool) -> work.LayerLayout:
    from bench.estimate.shapes import shapes_of

    with torch.device("meta"):
        shapes = shapes_of(_phi(1))
    return work.layout_of(shapes, 2, autocast)


def test_an_rmsnorm_swiglu_layer_moves_what_the_formula_counts():
    assert _measured(_llama(HEADS)(1)) == pytest.approx(_counted(), rel=0.02)


def test_a_layernorm_layer_with_a_partial_rotary_and_a_composite_gelu_moves_what_the_formula_counts():
    layout = _phi_layout(autocast=False)
    assert (layout.norms, layout.layer_norm, layout.norm_readers, layout.rotary_fraction) == (1, True, 4, 0.5)
    assert _measured(_phi(1)) == pytest.approx(_counted(layout), rel=0.02)
    assert _counted(layout) != pytest.approx(_counted(), rel=0.02)  # the Llama layout would not do


def test_under_cuda_autocast_its_fp32_norm_and_gelu_move_about_twice_as_much(monkeypatch):
    _cuda_autocast_policy(monkeypatch)
    layout = _phi_layout(autocast=True)
    assert _measured(_phi(1)) == pytest.approx(_counted(layout), rel=0.02)
    assert _counted(layout) > 1.9 * _counted(_phi_layout(autocast=False))


def test_the_default_layout_is_a_shipped_llamas():
    shapes = shapes_for(load_workload("llama-3.2-1b"))
    assert work.layout_of(shapes, 2, autocast=True) == replace(work.LLAMA_LAYOUT, autocast=True)
    assert work.layout_of(shapes, 2, autocast=False) == work.LLAMA_LAYOUT
