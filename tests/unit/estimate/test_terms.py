"""Each memory term against hand arithmetic on small made-up shapes."""

from dataclasses import replace

import pytest

from bench.estimate import terms


def test_nf4_and_int8_storage():
    assert terms.nf4_bytes(64) == 64 * 0.5 + 4  # 4 bits each + one fp32 absmax per 64-block
    assert terms.int8_bytes(1000, 10) == 1000 + 40  # 1 byte each + one fp32 scale per row


@pytest.mark.parametrize(
    ("quant", "expected"),
    [("none", 100 * 2 + 50 * 2), ("nf4", 100 * 0.5625 + 50 * 2), ("int8", 100 + 4 * 10 + 50 * 2)],
)
def test_weight_bytes_keeps_other_params_in_compute_dtype(quant, expected):
    assert terms.weight_bytes(100, 10, 50, quant, 2) == pytest.approx(expected)


def test_weight_bytes_upcast_of_unquantized_params():
    assert terms.weight_bytes(100, 10, 50, "nf4", 2, unquantized_bytes=4) == pytest.approx(100 * 0.5625 + 50 * 4)


def test_placement():
    assert terms.placed(80, "replicated", 4, 2) == 80
    assert terms.placed(80, "sharded", 4, 2) == 20
    assert terms.placed(80, "cpu_offloaded", 4, 2) == 0  # on the host instead:
    assert terms.offloaded(80, "cpu_offloaded", 4) == 20 and terms.offloaded(80, "sharded", 4) == 0
    assert terms.placed(80, "split", 4, 2) == 40


def test_buckets():
    assert terms.ddp_buckets(1000, 2) == 2000
    assert terms.zero_buckets(1000, 2, 2, touched_only=True) == 2000
    assert terms.zero_buckets(1000, 2, 2, touched_only=False) == 500_000_000 * 2
    assert terms.zero_buckets(1000, 2, 3, touched_only=False) == 550_000_000 * 2
    assert terms.zero_buckets(0, 2, 3, touched_only=False) == 0


def test_head_tile_is_capped_by_the_fused_head():
    assert terms.head_tile(512, 32768) == 512 * 32768
    assert terms.head_tile(8192, 128256) == 4096 * 32768


def test_head_backward_on_gpu_allocates_a_whole_chunk_wide_buffer():
    # Triton folds the tile in place: one [min(t, 4096), 32768] buffer in b, even for a 1000-entry vocabulary
    accumulators = 512 * 64 * 4
    assert terms.gpu_head_backward(512, 64, 1000, 2, head_trainable=False) == 512 * 32768 * 2 + accumulators
    assert terms.gpu_head_backward(512, 64, 1000, 2, head_trainable=True) == (
        512 * 32768 * 2 + accumulators + 1000 * 64 * 4
    )


def test_head_backward_on_cpu_keeps_eight_fp32_tiles_and_a_mask():
    # torch fallback: projection buffer (b) + 7 fp32 temporaries + the bool target mask, over the touched columns;
    # measured 8.25 tiles in fp32 (docs/estimator.md)
    tile = 512 * 1000
    assert terms.cpu_head_backward(512, 64, 1000, 4, head_trainable=False) == tile * 33 + 512 * 64 * 4
    tiles = (terms.cpu_head_backward(512, 64, 1000, 4, False) - terms.head_accumulators(512, 64, 1000, False)) / tile
    assert tiles / 4 == 8.25


def test_activations_with_and_without_checkpointing():
    frozen = terms.LayerSaved(norms=2, norm_bytes=4, mlp_bytes=3 * 2, trained_inputs=0)
    per_layer = terms.layer_activations(10, 2, 5, 8, 8, 16, 2, 2, "fused", frozen)
    assert per_layer == 10 * (2 * 8 * 4 + 2 * (2 * 8 + 2 * 8 + 3 * 16))
    with_scores = terms.layer_activations(10, 2, 5, 8, 8, 16, 2, 2, "math", frozen)
    assert with_scores - per_layer == 2 * 2 * 5 * 5 * 2 * 2
    trained = terms.layer_activations(10, 2, 5, 8, 8, 16, 2, 2, "fused", replace(frozen, trained_inputs=4 * 8 + 16))
    assert trained - per_layer == 10 * 2 * (4 * 8 + 16)  # a trained linear keeps its input
    # at the LM head's backward a checkpointed model holds only each layer's input
    assert terms.saved_activations(3, per_layer, 10, 8, 2, checkpointing=True) == 3 * 10 * 8 * 2
    assert terms.saved_activations(3, per_layer, 10, 8, 2, checkpointing=False) == 3 * per_layer


def test_litgpt_attention_keeps_the_fused_output_through_v_or_copies_grouped_k_and_v():
    assert terms.litgpt_attention(10, 8, 8, 0, 2) == 10 * 2 * (8 + 8)  # v a view of all H + 2kv
    assert terms.litgpt_attention(10, 8, 2, 0, 2) == 10 * 2 * 2 * (8 - 2)  # k, v expanded to H each
    assert terms.litgpt_attention(10, 8, 8, 16, 2) - terms.litgpt_attention(10, 8, 8, 0, 2) == 10 * 2 * 16


def test_materialised_logits_by_loss():
    assert terms.logits_bytes_per_element("full_fp32", 2) == 14
    assert terms.logits_bytes_per_element("full", 2) == 6
    assert terms.logits_bytes_per_element("chunked_fp32", 2) == 6
    assert terms.logits_bytes_per_element("chunked", 2) == 4
    assert terms.logits_bytes_per_element("chunked_fp32", 2, compiled=True) == 2
    assert terms.logits_bytes_per_element("full_fp32", 2, compiled=True) == 14  # no compiled form traced


def test_optimizer_states_by_optimizer():
    big, small = (1000, 1000), (10, 10)  # 1e6 elements (8-bit, paged), 100 (32-bit, resident)
    adam = terms.optimizer_state("adamw_torch", [big, small], 4)
    assert adam.resident == 2 * 1_000_100 * 4 and adam.step_temporaries == 1_000_100 * 4 and adam.paged == 0
    assert terms.optimizer_state("adamw_torch_fused", [big], 2).step_temporaries == 0
    eight = terms.optimizer_state("adamw_8bit", [big, small], 4)
    assert eight.resident == 2 * 1_000_000 + 2 * 4 * 3907 + 8 * 100  # 256-element blocks, fp32 below 4096
    paged = terms.optimizer_state("paged_adamw_8bit", [big, small], 4)
    assert paged.paged == 2 * 1_000_000 + 2 * 4 * 3907 and paged.resident == 8 * 100
    assert terms.optimizer_state("paged_adamw_8bit", [big], 4, device="cpu").paged == 0  # no managed memory on CPU
    assert terms.optimizer_state("paged_adamw_32bit", [big], 4).paged == 8 * 1_000_000
    factored = terms.optimizer_state("adafactor", [big, (50, 1)], 4)
    assert factored.resident == (2000 + 50) * 4 and factored.step_temporaries == 2 * 1_000_000 * 4


def test_fsdp_gather():
    assert terms.fsdp_gather(100, 2) == 400


def test_deepspeed_cpu_shm_buffer_only_with_the_deepspeed_launcher():
    from bench.estimate.terms import deepspeed_cpu_shm

    assert deepspeed_cpu_shm("cpu", "deepspeed", 2, True, 10) == 66 * 2**20  # 2 x 1 MiB + 2 x 32 MiB (shm.cpp)
    assert deepspeed_cpu_shm("cpu", "accelerate", 2, True, 10) == deepspeed_cpu_shm("cpu", "mpirun", 2, True, 10) == 0
    assert (
        deepspeed_cpu_shm("cpu", "deepspeed", 1, True, 10) == deepspeed_cpu_shm("cuda", "deepspeed", 2, True, 10) == 0
    )
    # RSS counts only the pages the allreduces touch; the cgroup was charged the whole write()
    assert deepspeed_cpu_shm("cpu", "deepspeed", 2, False, 10) == 10


def test_zero2_states_split_into_resident_and_gradient_partitions():
    # 1000 trainable over 2 ranks: master 4 + Adam 8 resident; bf16 grads 2 + their fp32 copy 4 after backward.
    assert terms.zero2_resident_states(1000, 2) == 6000
    assert terms.zero2_gradient_partitions(1000, 2, 2) == 3000
    assert terms.zero2_gradient_partitions(1000, 4, 2) == 2000  # fp32 grads need no fp32 copy
    assert terms.zero2_model_states(500, 1000, 2, 2) == 500 + 6000 + 3000


def test_zero3_states_with_the_optimizer_offloaded_stay_off_the_device():
    # 1000 params over 2 ranks in bf16, largest layer 10: the partition 1000 * 2 / 2 + the gathered layer 2 * 2 * 10
    assert terms.zero3_model_states(2000, 1000, 2, 10, 2, offload=True) == 1000 + 40
    assert terms.zero3_model_states(2000, 1000, 2, 10, 2) == 1000 + 40 + 16 * 1000 / 2
    assert terms.zero_offloaded_host(1000, 2) == 16 * 1000 / 2  # fp32 grads 4 + master 4 + Adam 8, per rank


def test_zero3_with_parameters_offloaded_keeps_only_the_gathered_layer():
    # DeepSpeed's estimate_zero3_model_states_mem_needs with offload_param: 4 * LL per GPU (bf16 params + grads)
    assert terms.zero3_model_states(2000, 1000, 2, 10, 2, offload=True, offload_params=True) == 40


def test_a_forward_without_gradient_holds_one_layer_and_one_head_tile():
    # 512 tokens of a 1000-entry vocabulary in bf16: one [512, 1000] logits tile beside the layer's working set
    assert terms.no_grad_forward(300.0, 512, 1000, 2) == 300 + 512 * 1000 * 2


def test_bitsandbytes_thresholds_are_inclusive():
    # bitsandbytes 0.50 optim/optimizer.py: 32-bit states only when numel < min_8bit_size (4096), ordinary tensors
    # only when numel < 1e5 (get_state_buffer): 4096 elements take 8-bit states, 1e5 elements go to managed memory
    at_4096 = terms.optimizer_state("adamw_8bit", [(64, 64)], 4)
    assert at_4096 == terms.OptimizerState(2 * 4096 + 2 * 4 * 16, 0.0, 0.0)
    two_paged = terms.optimizer_state("paged_adamw_32bit", [(1000, 100), (1000, 100)], 4)
    assert two_paged == terms.OptimizerState(0.0, 2 * 8 * 100_000, 0.0)


def test_adafactor_factors_every_matrix_and_has_no_paged_state():
    # a 10 x 2 matrix is factored into 10 + 2 statistics; nothing trainable: no state, no step temporaries
    assert terms.optimizer_state("adafactor", [(10, 2)], 4) == terms.OptimizerState(12 * 4, 0.0, 2 * 20 * 4)
    assert terms.optimizer_state("adafactor", [], 4) == terms.OptimizerState(0, 0.0, 0)


def test_lora_input_copies_by_adapter_dtype_and_dropout():
    def copies(adapter_bytes, dropout):
        return terms.lora_input_copies(10, 100, 60, 16, adapter_bytes, 2, dropout)

    # fp32 adapters under bf16 autocast: PEFT casts x up, autocast casts it back and lora_A saves that bf16 copy
    assert copies(4, False) == 10 * (100 * 2 + 16 * 2)
    # adapters in the activations' dtype, no dropout: lora_A saves x itself, once per distinct input (the frozen
    # base linear keeps none)
    assert copies(2, False) == 10 * (60 * 2 + 16 * 2)
    # a dropout above 0: its output (b) and its bool mask (1 byte)
    assert copies(2, True) == copies(4, True) == 10 * (100 * 3 + 32)
