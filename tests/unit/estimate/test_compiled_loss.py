"""What a compiled chunk of torchtune's CEWithChunkedOutputLoss keeps for backward, traced through the real Inductor:
the bytes per logit `terms.logits_bytes_per_element` counts for chunked_fp32, eager and compiled."""

import pytest
import torch
import torch.nn.functional as F

from bench.estimate import terms

TOKENS, VOCAB = 64, 2048


def compute_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """torchtune's CEWithChunkedOutputLoss.compute_cross_entropy (the function its compile_loss compiles)."""
    return F.cross_entropy(logits.float(), labels, ignore_index=-100, reduction="sum")


def saved_for_backward(loss: torch.Tensor) -> list[torch.Tensor]:
    """Every tensor the loss's autograd graph keeps, deduplicated by storage."""
    found, seen, nodes = {}, set(), [loss.grad_fn]
    while nodes:
        node = nodes.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for name in dir(node):
            if name.startswith("_saved_") or name == "saved_tensors":
                value = getattr(node, name)
                for tensor in value if isinstance(value, tuple) else (value,):
                    if isinstance(tensor, torch.Tensor):
                        found[tensor.untyped_storage().data_ptr()] = tensor
        nodes += [parent for parent, _ in node.next_functions]
    return list(found.values())


@pytest.fixture(scope="module")
def chunk():
    torch.manual_seed(0)
    logits = torch.randn(TOKENS, VOCAB, dtype=torch.bfloat16, requires_grad=True)
    return logits, torch.randint(0, VOCAB, (TOKENS,))


def logit_bytes_kept(saved: list[torch.Tensor]) -> float:
    """Bytes per logit of the saved tensors as large as the chunk (per-row statistics apart)."""
    return sum(t.numel() * t.element_size() for t in saved if t.numel() == TOKENS * VOCAB) / (TOKENS * VOCAB)


def test_eager_keeps_the_chunks_fp32_log_softmax(chunk):
    saved = saved_for_backward(compute_cross_entropy(*chunk))
    # the chunk itself stays alive as the model's output: b; the loss adds its fp32 log_softmax
    assert 2 + logit_bytes_kept(saved) == terms.logits_bytes_per_element("chunked_fp32", 2) == 6


def test_inductor_keeps_the_bf16_chunk_and_two_numbers_a_row(chunk):
    logits, labels = chunk
    loss = torch.compile(compute_cross_entropy, backend="inductor", fullgraph=True)(logits, labels)
    saved = saved_for_backward(loss)
    large = [t for t in saved if t.numel() == TOKENS * VOCAB]
    assert [t.dtype for t in large] == [torch.bfloat16]
    assert large[0].untyped_storage().data_ptr() == logits.untyped_storage().data_ptr()  # the chunk, not a copy
    per_row = sum(t.numel() * t.element_size() for t in saved if t.numel() != TOKENS * VOCAB and t.is_floating_point())
    assert per_row == TOKENS * 8
    assert logit_bytes_kept(large) == terms.logits_bytes_per_element("chunked_fp32", 2, compiled=True) == 2
    loss.backward()
    expected = torch.autograd.grad(compute_cross_entropy(logits, labels), logits)[0]
    torch.testing.assert_close(logits.grad, expected)
