"""What each precision mode loads and computes in (bench/matrix/precision.py), and why fp16 loads fp32: a GradScaler
cannot unscale fp16 gradients. The step is run on the CPU, whose autocast and GradScaler take fp16 as a GPU's do."""

import pytest

from bench.matrix.precision import COMPUTE_DTYPE, in_effect, load_dtype, mode_of


def test_modes():
    assert [mode_of(p) for p in ("fp32", "bf16", "fp16")] == ["fp32", "mixed", "fp16-mixed"]
    assert mode_of("bf16", master_weights=False) == "pure-bf16"
    assert in_effect("pure-bf16", "fp16", True) == ("bf16", False)
    assert in_effect("fp16-mixed", "bf16", True) == ("fp16", True)
    assert in_effect(None, "bf16", False) == ("bf16", False)
    assert (load_dtype("fp16"), COMPUTE_DTYPE["fp16"]) == ("float32", "float16")
    assert (load_dtype("fp16", quantized=True), load_dtype("bf16"), load_dtype("fp32")) == (
        "float16",
        "bfloat16",
        "float32",
    )


def _steps(load_dtype: str) -> list[float]:
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2)  # fmt: skip
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).to(getattr(torch, load_dtype))
    optimizer, scaler = torch.optim.AdamW(model.parameters(), lr=1e-2), torch.amp.GradScaler("cpu")
    tokens, losses = torch.randint(0, 64, (2, 16)), []
    for _ in range(3):
        with torch.autocast("cpu", dtype=getattr(torch, COMPUTE_DTYPE["fp16"])):
            loss = model(input_ids=tokens, labels=tokens).loss
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def test_fp16_mixed_trains_where_fp16_weights_fail():
    losses = _steps(load_dtype("fp16"))
    assert losses[-1] < losses[0]
    with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients"):
        _steps("float16")
