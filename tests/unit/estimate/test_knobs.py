"""Each knob moves the prediction the way its mechanism says (docs/estimator.md, "Knobs")."""

import pytest

from bench.estimate.knobs import Knobs
from bench.estimate.predict import predict_cell
from bench.matrix.axes import Backend, Init, Quant
from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.matrix.profiles import load_profile, load_workload


def cell(init, quant=Quant.NONE, backend=Backend.SINGLE):
    return Cell(init=init, quant=quant, backend=backend, launcher=backend_spec(backend).default_launcher)


def gpu(init=Init.ONE_ADAPTER, backend=Backend.SINGLE, quant=Quant.NONE, **knobs):
    return predict_cell(
        cell(init, quant, backend), load_profile("1xH100"), load_workload("llama-3.2-1b"), knobs=Knobs(**knobs)
    )


def test_defaults_are_the_cells():
    assert (
        gpu().train_bytes
        == predict_cell(cell(Init.ONE_ADAPTER), load_profile("1xH100"), load_workload("llama-3.2-1b")).train_bytes
    )


def test_gradient_checkpointing_off_holds_every_layer():
    on, off = gpu(gradient_checkpointing=True), gpu(gradient_checkpointing=False)
    assert off.terms["activations"] > 5 * on.terms["activations"]


def test_eager_attention_materialises_scores_on_a_gpu():
    assert (
        gpu(attention="eager", gradient_checkpointing=False).train_bytes > gpu(gradient_checkpointing=False).train_bytes
    )
    assert gpu(attention="flash_attention_2").train_bytes == gpu(attention="sdpa").train_bytes


def test_liger_saves_one_intermediate_per_layer():
    assert gpu(liger=True, gradient_checkpointing=False).train_bytes < gpu(gradient_checkpointing=False).train_bytes


def test_optimizers_on_a_full_fine_tune():
    full = {k: gpu(Init.TWO_MODELS, optimizer=k) for k in ("adamw_torch_fused", "adamw_8bit", "paged_adamw_8bit")}
    # bf16 states (zeros_like(param)) 4 bytes per element against 8-bit states with their absmax: ~2
    assert full["adamw_8bit"].terms["optimizer"] < 0.55 * full["adamw_torch_fused"].terms["optimizer"]
    paged = full["paged_adamw_8bit"]
    assert paged.paged_bytes > 0 and paged.terms.get("optimizer", 0) < full["adamw_8bit"].terms["optimizer"]
    assert paged.nvidia_smi_bytes - paged.reserved_bytes > paged.paged_bytes  # managed memory: nvidia-smi only
    assert paged.total_bytes == paged.nvidia_smi_bytes - paged.paged_bytes  # and it yields before an OOM
    factored = gpu(Init.TWO_MODELS, optimizer="adafactor")
    assert factored.terms["optimizer"] < full["adamw_8bit"].terms["optimizer"]


def test_optimizer_in_backward_keeps_one_gradient():
    plain = gpu(Init.TWO_MODELS, gradient_checkpointing=False, optimizer="adafactor")
    fused = gpu(Init.TWO_MODELS, gradient_checkpointing=False, optimizer="adafactor", optimizer_in_backward=True)
    assert fused.train_bytes <= plain.train_bytes


def test_parameter_offload_moves_weights_to_the_host():
    profile, workload = load_profile("8xA100-80G"), load_workload("llama-2-70b")
    on_device = predict_cell(cell(Init.ONE_ADAPTER, backend=Backend.ZERO3), profile, workload)
    offloaded = predict_cell(
        cell(Init.ONE_ADAPTER, backend=Backend.ZERO3), profile, workload, knobs=Knobs(offload_params=True)
    )
    assert "weights" not in offloaded.terms and offloaded.host_bytes >= on_device.terms["weights"]
    fsdp = predict_cell(
        cell(Init.ONE_ADAPTER, backend=Backend.FSDP), profile, workload, knobs=Knobs(offload_params=True)
    )
    assert "weights" not in fsdp.terms and fsdp.host_bytes > 0


def test_sft_has_no_reference_and_half_the_rows():
    dpo, sft = gpu(Init.TWO_MODELS), gpu(Init.TWO_MODELS, method="sft")
    assert "reference_model" in dpo.terms and "reference_model" not in sft.terms
    assert sft.terms["activations"] == pytest.approx(dpo.terms["activations"] / 2)
    assert "lm_head_backward" not in gpu(method="reward").terms


def test_materialised_logits_cost_more_than_the_fused_head():
    assert gpu(loss="full_fp32").train_bytes > gpu(loss="full").train_bytes > gpu().train_bytes


def test_padding_free_does_not_move_the_worst_case():
    assert gpu(padding_free=True).train_bytes == gpu().train_bytes


def test_an_unknown_knob_is_refused():
    with pytest.raises(ValueError):
        Knobs(optimiser="adamw_torch")


def cpu(init=Init.ONE_ADAPTER, options=(), **knobs):
    c = cell(init).model_copy(update={"options": options})
    return predict_cell(c, load_profile("cpu"), load_workload("small"), knobs=Knobs(**knobs))


def test_the_cells_liger_option_is_the_default():
    from bench.matrix.axes import Option

    with_option = cpu(options=(Option.LIGER,), gradient_checkpointing=False)
    assert with_option.terms["activations"] < cpu(gradient_checkpointing=False).terms["activations"]
    assert with_option.terms["activations"] == cpu(liger=True, gradient_checkpointing=False).terms["activations"]


def test_a_full_fine_tune_of_a_reward_model_steps_its_score_head_not_the_lm_head():
    # small: an untied 32768 x 256 LM head; a reward model has a 256 x 1 score head in its place, and AdamW's two
    # fp32 states cover every other parameter
    from bench.estimate.shapes import shapes_for

    total = shapes_for(load_workload("small")).total
    reward = cpu(Init.TWO_MODELS, method="reward")
    assert reward.terms["optimizer"] == 2 * 4 * (total - 32768 * 256 + 256)
    # llama-3.2-1b ties its LM head to the embedding, which stays trained: bf16 states over every parameter + 2048 x 1
    tied = gpu(Init.TWO_MODELS, method="reward")
    assert tied.terms["optimizer"] == 2 * 2 * (shapes_for(load_workload("llama-3.2-1b")).total + 2048)


def test_a_method_without_a_reference_keeps_one_adapter():
    # two_adapters' frozen `ref` copy exists only for a method with a reference
    assert cpu(Init.TWO_ADAPTERS, method="sft").terms["adapters"] == cpu(method="sft").terms["adapters"]
    assert cpu(Init.TWO_ADAPTERS).terms["adapters"] == 2 * cpu().terms["adapters"]


def test_a_paged_optimizer_on_the_cpu_keeps_ordinary_tensors():
    # bitsandbytes falls back to ordinary tensors without CUDA managed memory
    paged = cpu(Init.TWO_MODELS, optimizer="paged_adamw_8bit")
    assert paged.paged_bytes == 0 and "paged_optimizer_state" not in paged.terms
    assert paged.terms["optimizer"] == cpu(Init.TWO_MODELS, optimizer="adamw_8bit").terms["optimizer"]


def test_materialised_logits_of_a_full_fine_tune_add_the_heads_weight_gradient():
    # one 4096-token row pair of llama-3.2-1b (128256 x 2048 head, bf16), the loss in the compute dtype: 3 * 2 bytes
    # per logit; a full fine-tune also accumulates the head's weight gradient in bf16, an adapter does not
    long = {"loss": "full", "batch_size": 1, "max_length": 4096}
    logits = 2 * 4096 * 128256 * 3 * 2
    assert gpu(**long).terms["lm_head_backward"] == logits
    assert gpu(Init.TWO_MODELS, **long).terms["lm_head_backward"] == logits + 128256 * 2048 * 2


def test_the_defaults_are_what_the_suite_runs():
    # knobs.py has no code for mutmut to mutate: its defaults are pinned here. transformers 5 with torch >= 2.8
    # defaults to the fused AdamW (training_args.py `default_optim`); the suite sets no other memory setting.
    assert Knobs().model_dump() == {
        "optimizer": "adamw_torch_fused",
        "gradient_checkpointing": None,
        "attention": None,
        "padding_free": False,
        "liger": None,
        "offload_params": False,
        "method": None,
        "max_length": None,
        "batch_size": None,
        "loss": "fused",
        "optimizer_in_backward": False,
        "expandable_segments": False,
        "length_spread": None,
        "master_weights": True,
        "precision": None,
        "bnb_kept_inputs": "none",
        "quantized_head": False,
        "fp16_quant_state": False,
        "eager_clamp": False,
        "litgpt_model": False,
        "torch_compile": False,
    }
    with pytest.raises(ValueError):
        Knobs(max_length=7)  # the knob takes at least 8 tokens per row
    with pytest.raises(ValueError):
        Knobs(batch_size=0)


def test_optimizer_in_backward_holds_at_most_the_largest_gradient():
    # one 8-token row: a recomputed layer's backward sets the peak, beside one gradient, the largest LoRA matrix's
    # (r 16 x 2048, fp32 adapters) instead of every adapter's
    fused = gpu(optimizer_in_backward=True, max_length=8, batch_size=1)
    assert fused.terms["gradients"] == 16 * 2048 * 4


def test_the_foreach_adamw_step_can_set_the_peak():
    # adamw_torch's step allocates one more copy of exp_avg_sq: a full fine-tune then peaks in the optimizer step,
    # every bf16 gradient + that copy (llama-3.2-1b, 1,235,814,400 parameters)
    step = gpu(Init.TWO_MODELS, optimizer="adamw_torch")
    assert step.terms["gradients"] == step.terms["optimizer_step_temporaries"] == 1_235_814_400 * 2
    assert "lm_head_backward" not in step.terms and "recomputed_layer" not in step.terms


def test_without_checkpointing_no_layer_is_recomputed():
    # a full fine-tune holding every layer's activations and every gradient at the end of its backward
    p = gpu(Init.TWO_MODELS, gradient_checkpointing=False)
    assert "gradients" in p.terms and "recomputed_layer" not in p.terms


def test_ktos_kl_batch_stays_below_the_steps_own_peak_on_split_layers():
    # device_map splits the layers over 2 GPUs: the KL batch's forward holds one layer's working set and one logits
    # tile on one GPU, under the head's backward (every saved input, half on each GPU, and the head's buffers)
    kto = cell(Init.ONE_ADAPTER, backend=Backend.DEVICE_MAP).model_copy(update={"method": "kto"})
    p = predict_cell(kto, load_profile("2xA10"), load_workload("phi-2"))
    assert p.status == "predicted" and "kl_batch_forward" not in p.terms


def test_the_max_length_knob_bounds_an_online_methods_prompts():
    # GRPO on tiny: rows of a prompt of at most 14 tokens and 8 sampled; a 200-token bound holds 208-token rows
    grpo = cell(Init.ONE_ADAPTER).model_copy(update={"method": "grpo"})

    def activations(**knobs):
        return predict_cell(grpo, load_profile("cpu"), load_workload("tiny"), knobs=Knobs(**knobs)).terms["activations"]

    assert activations(max_length=200) == pytest.approx(activations() * 208 / 22)  # activations scale with a row


def test_eager_attention_grows_with_the_square_of_the_length():
    """Eager attention keeps each head's L x L scores and probabilities; sdpa's flash kernel keeps none."""
    short = {"max_length": 1024, "gradient_checkpointing": False}
    long = {"max_length": 4096, "gradient_checkpointing": False}
    extra_short = gpu(attention="eager", **short).train_bytes - gpu(attention="sdpa", **short).train_bytes
    extra_long = gpu(attention="eager", **long).train_bytes - gpu(attention="sdpa", **long).train_bytes
    assert extra_short > 0 and extra_long > 10 * extra_short  # 16x the scores; the rest of the step is linear


def test_liger_replaces_materialised_logits_with_its_fused_linear_cross_entropy():
    """A loss over the full vocabulary (transformers' causal-LM loss): Liger's fused linear cross-entropy holds one
    chunk of logits, about t * H, where the loss holds t * V in fp32; so small a head leaves the step's peak to a
    decoder layer's backward (every activation kept, its temporaries)."""
    from bench.estimate import terms

    long = {"loss": "full_fp32", "batch_size": 1, "max_length": 4096, "gradient_checkpointing": False}
    plain, liger = gpu(**long), gpu(**long, liger=True)
    assert "lm_head_backward" in plain.terms and "layer_backward" not in plain.terms
    assert "layer_backward" in liger.terms and not {"lm_head_backward", "liger_fused_linear_ce"} & set(liger.terms)
    chunk = terms.liger_fused_linear_ce(2 * 4096, 2048, 128256, 2)
    assert chunk < liger.terms["layer_backward"] < plain.terms["lm_head_backward"] / 4
    assert liger.train_bytes < plain.train_bytes


def test_torch_compile_drops_only_a_chunked_loss_fp32_log_softmax():
    assert gpu(torch_compile=True).terms == gpu().terms  # TRL's fused head: no compiled form traced
    assert gpu(torch_compile=True, loss="full_fp32").terms == gpu(loss="full_fp32").terms
    eager, compiled = gpu(loss="chunked_fp32"), gpu(loss="chunked_fp32", torch_compile=True)
    logits = eager.terms["lm_head_backward"] - compiled.terms["lm_head_backward"]
    assert logits > 0 and {k: v for k, v in compiled.terms.items() if k != "lm_head_backward"} == {
        k: v for k, v in eager.terms.items() if k != "lm_head_backward"
    }
    # an adapter's head has no weight gradient: 2 bytes a logit (the bf16 chunks) where eager keeps 2 + 4
    assert compiled.terms["lm_head_backward"] == pytest.approx(eager.terms["lm_head_backward"] / 3)


def test_bnb_kept_inputs_count_the_step_and_the_previous_steps_inputs():
    from bench.estimate import terms

    assert terms.bnb_kept_inputs(10, 4, 16, 2) == 10 * 2 * (3 * 4 + 16)
    base = gpu(quant=Quant.NF4, gradient_checkpointing=False)
    step = gpu(quant=Quant.NF4, gradient_checkpointing=False, bnb_kept_inputs="step")
    previous = gpu(quant=Quant.NF4, gradient_checkpointing=False, bnb_kept_inputs="previous_step")
    assert "bnb_kept_inputs" not in base.terms
    assert step.train_bytes - base.train_bytes == pytest.approx(step.terms["bnb_kept_inputs"])
    # the previous step's graph holds every 4-bit linear's input, as many as the step's own
    assert previous.terms["bnb_previous_step_inputs"] == step.terms["bnb_kept_inputs"]
    assert previous.train_bytes > step.train_bytes
    # under gradient checkpointing only a recomputed layer keeps them; an unquantized model keeps none
    checkpointed = gpu(quant=Quant.NF4, gradient_checkpointing=True, bnb_kept_inputs="previous_step")
    assert checkpointed.terms.get("bnb_kept_inputs", 0) < step.terms["bnb_kept_inputs"] / 8
    assert (
        gpu(gradient_checkpointing=False, bnb_kept_inputs="step").train_bytes
        == gpu(gradient_checkpointing=False).train_bytes
    )


def test_a_quantized_head_is_stored_in_4_bits_and_dequantised_whole():
    # phi-2's untied 51200 x 2560 head, larger than its largest decoder linear (10240 x 2560)
    def phi2(**knobs):
        nf4 = cell(Init.ONE_ADAPTER, Quant.NF4)
        return predict_cell(nf4, load_profile("1xH100"), load_workload("phi-2"), knobs=Knobs(**knobs))

    head = 51200 * 2560
    plain, quantized = phi2(), phi2(quantized_head=True)
    assert plain.terms["dequant_buffer"] == 10240 * 2560 * 2
    assert quantized.terms["dequant_buffer"] == head * 2
    assert plain.terms["weights"] - quantized.terms["weights"] == pytest.approx(head * (2 - 0.5 - 4 / 64))
    assert phi2(quantized_head=True, fp16_quant_state=True).terms["dequant_buffer"] == head * (2 + 2)
    assert gpu(quantized_head=True, fp16_quant_state=True).train_bytes == gpu().train_bytes  # not quantized


def test_a_4bit_layernorm_model_under_autocast_carries_an_fp32_residual_stream():
    # phi-2 (nn.LayerNorm, 32 layers, hidden 2560), 2 pairs of 1024-token rows per step: 4096 tokens
    def phi2(quant, **knobs):
        return predict_cell(
            cell(Init.ONE_ADAPTER, quant), load_profile("1xA10"), load_workload("phi-2"), knobs=Knobs(**knobs)
        )

    nf4 = phi2(Quant.NF4)
    assert nf4.terms["fp32_layer_inputs"] == 31 * 4096 * 2560 * (4 - 2)
    assert "fp32_layer_inputs" not in phi2(Quant.NONE).terms  # a bf16 Linear's output is bf16 under autocast
    assert "fp32_layer_inputs" not in phi2(Quant.NF4, precision="pure-bf16").terms  # no autocast
    assert "fp32_layer_inputs" not in gpu(quant=Quant.NF4).terms  # Llama's RMSNorm casts back


def test_a_fused_qkv_drops_its_input_once():
    """LitGPT's LoRAQKVLinear drops x once for query, key and value: where all three are adapted, two dropped copies
    (b) and two masks (1 byte) per token and layer fewer than three separate linears' (llama-3.2-1b: 16 layers,
    hidden 2048, SFT rows at max_length)."""
    from bench.estimate.predict import FUSED_QKV, _lora_inputs
    from bench.estimate.shapes import Linear

    adapted = [Linear(f"layers.0.attn.{n}", 64, 64, False) for n in ("q_proj", "v_proj")]
    adapted += [Linear("layers.0.mlp.up_proj", 64, 256, False)]
    assert _lora_inputs(adapted, ()) == 192 and _lora_inputs(adapted, FUSED_QKV) == 128
    workload = load_workload("llama-3.2-1b")
    dropped = workload.model_copy(update={"lora": workload.lora.model_copy(update={"dropout": 0.05})})
    train = workload.train

    def copies(fused: bool) -> float:
        sft = cell(Init.ONE_ADAPTER).model_copy(update={"method": "sft"})
        knobs = Knobs(litgpt_model=fused, gradient_checkpointing=False)
        return predict_cell(sft, load_profile("1xH100"), dropped, knobs=knobs).terms["lora_input_copies"]

    assert {"q_proj", "k_proj", "v_proj"} <= set(workload.lora.target_modules)
    tokens = train.per_device_train_batch_size * train.max_length
    assert copies(False) - copies(True) == pytest.approx(16 * 2 * 2048 * (2 + 1) * tokens)
