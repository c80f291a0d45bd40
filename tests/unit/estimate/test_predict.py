"""predict_cell on the shipped profiles and workloads: structure, reference placement, verdicts, speed."""

import time

import pytest

from bench.estimate.predict import predict_cell
from bench.estimate.shapes import shapes_from_config
from bench.matrix.axes import Backend, Init, Option, Quant, Setup
from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.matrix.profiles import load_profile, load_workload
from bench.paths import SCENARIOS_DIR


def cell(init, quant, backend, options=()):
    return Cell(
        init=init, quant=quant, backend=backend, launcher=backend_spec(backend).default_launcher, options=options
    )


def test_small_shapes_by_hand():
    s = shapes_from_config(str(SCENARIOS_DIR / "workloads/small/config.json"))
    assert s.embeddings == s.lm_head == 32768 * 256
    per_layer = 4 * 256 * 256 + 3 * 256 * 688
    assert s.linear_weights == 2 * per_layer
    assert s.total == 2 * 32768 * 256 + 2 * per_layer + 5 * 256  # + 2 norms per layer + final norm
    assert s.lora_params(8, ["q_proj", "k_proj", "v_proj", "o_proj"]) == 2 * 4 * 8 * (256 + 256)


def test_reference_placement_follows_backend():
    profile, workload = load_profile("2xA10"), load_workload("phi-2")
    ddp = predict_cell(cell(Init.TWO_MODELS, Quant.NONE, Backend.DDP), profile, workload)
    zero2 = predict_cell(
        cell(Init.TWO_MODELS, Quant.NONE, Backend.ZERO2).model_copy(update={"setup": Setup.NEWCOMER}), profile, workload
    )
    zero3 = predict_cell(cell(Init.TWO_MODELS, Quant.NONE, Backend.ZERO3), profile, workload)
    assert ddp.terms["reference_model"] == zero2.terms["reference_model"] == pytest.approx(2 * 2_779_683_840)
    # ZeRO-2's recipe precomputes the reference log-probs and keeps no reference model (scenarios/recipes.yaml)
    recipe = predict_cell(cell(Init.TWO_MODELS, Quant.NONE, Backend.ZERO2), profile, workload)
    assert "reference_model" not in recipe.terms
    assert zero3.terms["reference_model"] == pytest.approx(2_779_683_840)
    adapter = predict_cell(cell(Init.ONE_ADAPTER, Quant.NONE, Backend.DDP), profile, workload)
    assert "reference_model" not in adapter.terms


def test_two_adapters_hold_a_second_adapter_copy():
    profile, workload = load_profile("1xL4"), load_workload("llama-3.2-1b")
    one = predict_cell(cell(Init.ONE_ADAPTER, Quant.NONE, Backend.SINGLE), profile, workload)
    two = predict_cell(cell(Init.TWO_ADAPTERS, Quant.NONE, Backend.SINGLE), profile, workload)
    assert two.terms["adapters"] == pytest.approx(2 * one.terms["adapters"])


def test_quantized_weights_are_smaller_and_verdicts_present():
    profile, workload = load_profile("1xL4"), load_workload("llama-3.2-1b")
    sizes = {
        q: predict_cell(cell(Init.ONE_ADAPTER, q, Backend.SINGLE), profile, workload).terms["weights"] for q in Quant
    }
    assert sizes[Quant.NF4] < sizes[Quant.INT8] < sizes[Quant.NONE]
    p = predict_cell(cell(Init.ONE_ADAPTER, Quant.NF4, Backend.SINGLE), profile, workload)
    assert p.verdict == "fits" and p.margin_bytes == pytest.approx(p.usable_bytes - p.total_bytes)
    assert p.train_bytes == pytest.approx(sum(p.terms.values()))


def test_not_applicable_and_cpu_fsdp_fallback():
    profile, workload = load_profile("cpu-budget"), load_workload("small")
    na = predict_cell(cell(Init.TWO_MODELS, Quant.NF4, Backend.SINGLE), profile, workload)
    assert na.status == "not_applicable" and na.verdict is None
    fsdp = predict_cell(cell(Init.ONE_ADAPTER, Quant.NONE, Backend.FSDP), profile, workload)
    assert fsdp.backend_run == "ddp" and fsdp.notes


def test_precompute_ref_keeps_a_passed_reference_model():
    profile, workload = load_profile("1xH100"), load_workload("llama-3.2-1b")
    p = predict_cell(cell(Init.TWO_MODELS, Quant.NONE, Backend.SINGLE, (Option.PRECOMPUTE_REF,)), profile, workload)
    assert p.terms["reference_model"] > 0


def test_the_largest_workloads_answer_in_seconds():
    start = time.monotonic()
    for hw, wl in (("8xA100-80G", "llama-2-70b"), ("8xA100-80G", "mixtral-8x7b")):
        p = predict_cell(cell(Init.TWO_MODELS, Quant.NONE, Backend.ZERO3), load_profile(hw), load_workload(wl))
        assert p.status == "predicted"
    assert time.monotonic() - start < 30


def test_zero2_peak_is_the_larger_phase_not_every_state_at_once():
    # CPU, small, fp32 full fine-tune over 2 ranks: at the LM head's backward only the master copy and Adam (12 T/N)
    # are resident; the gradient partitions and the (untouched) reduce bucket come later, and are smaller here.
    profile, workload = load_profile("cpu-budget-4g"), load_workload("small")
    p = predict_cell(cell(Init.TWO_MODELS, Quant.NONE, Backend.ZERO2), profile, workload)
    total = shapes_from_config(str(SCENARIOS_DIR / "workloads/small/config.json")).total
    assert p.terms["optimizer_master"] == pytest.approx(12 * total / 2)
    assert "lm_head_backward" in p.terms and "zero_buckets" not in p.terms
    assert "zero2_end_of_backward" not in p.terms
    # On a GPU the bucket (5e8 elements) is allocated at backward's start: part of the head phase.
    gpu = predict_cell(cell(Init.TWO_MODELS, Quant.NONE, Backend.ZERO2), load_profile("2xA10"), load_workload("phi-2"))
    assert gpu.terms.get("zero_buckets", gpu.terms.get("zero2_end_of_backward")) >= 500_000_000 * 2


def test_offload_moves_state_to_a_separate_host_term_on_one_gpu():
    # phi-2 full DPO on one 24 GB card: out of memory as it is, fits with its state in host memory
    profile, workload = load_profile("1xL4"), load_workload("phi-2")
    params = shapes_from_config(str(SCENARIOS_DIR / "workloads/phi-2/config.json")).total
    single = predict_cell(cell(Init.TWO_MODELS, Quant.NONE, Backend.SINGLE), profile, workload)
    assert single.verdict != "fits" and single.total_bytes > single.usable_bytes
    assert single.host_terms == {} and single.host_bytes == 0
    infinity = predict_cell(cell(Init.TWO_MODELS, Quant.NONE, Backend.ZERO3_OFFLOAD_PARAM), profile, workload)
    assert infinity.verdict == "fits" and infinity.world_size == 1
    assert infinity.host_terms == pytest.approx(
        {"params": 2 * params, "optimizer_states": 16 * params, "reference_model": 2 * params}
    )
    assert infinity.host_bytes == pytest.approx(sum(infinity.host_terms.values()))
    assert not {"weights", "reference_model", "grads_optimizer_master"} & set(infinity.terms)
    zero2 = predict_cell(cell(Init.TWO_MODELS, Quant.NONE, Backend.ZERO2_OFFLOAD), profile, workload)
    assert zero2.terms["weights"] == pytest.approx(2 * params) and "optimizer_master" not in zero2.terms
    # the recipe precomputes the reference; ZeRO-Offload stages gradients through a buffer of the largest tensor
    shapes = shapes_from_config(str(SCENARIOS_DIR / "workloads/phi-2/config.json"))
    largest = max(r * c for r, c in shapes.full_tensors())
    assert zero2.host_terms == pytest.approx(
        {"optimizer_states": 16 * params, "offload_buffers": 2 * params + 2 * largest}
    )
    assert zero2.terms["offload_staging"] == pytest.approx(2 * largest)
    fsdp = predict_cell(cell(Init.TWO_MODELS, Quant.NONE, Backend.FSDP_OFFLOAD), profile, workload)
    assert set(fsdp.host_terms) == {"params", "gradients", "optimizer_states", "reference_model"}
    assert "weights" not in fsdp.terms and fsdp.terms["fsdp_gather"] > 0


def test_on_cpu_the_offloaded_state_is_part_of_the_peak():
    profile, workload = load_profile("cpu-budget-4g"), load_workload("small")
    one_rank = cell(Init.TWO_MODELS, Quant.NONE, Backend.ZERO3_OFFLOAD_PARAM).model_copy(update={"ranks": 1})
    p = predict_cell(one_rank, profile, workload)
    assert p.world_size == 1 and p.host_bytes == 0
    assert p.terms["offloaded_to_host"] == pytest.approx(sum(p.host_terms.values()))
    fsdp = predict_cell(cell(Init.ONE_ADAPTER, Quant.NONE, Backend.FSDP_OFFLOAD), profile, workload)
    assert fsdp.backend_run == "ddp" and fsdp.host_terms == {}


def test_the_fsdp_fallback_note_world_size_and_unknown_memory():
    profile, workload = load_profile("cpu-budget"), load_workload("small")
    fsdp = predict_cell(cell(Init.ONE_ADAPTER, Quant.NONE, Backend.FSDP), profile, workload)
    assert fsdp.notes == ["FSDP through accelerate/TRL runs as DDP on CPU (silent fallback): predicted as DDP"]
    assert fsdp.world_size == 2
    gpu = load_profile("2xA10")
    unknown = gpu.model_copy(update={"memory_per_device_gb": None})
    p = predict_cell(cell(Init.ONE_ADAPTER, Quant.NONE, Backend.DDP), unknown, load_workload("phi-2"))
    assert (p.usable_bytes, p.verdict, p.margin_bytes) == (None, "unknown", None)


def test_without_gradient_checkpointing_every_layer_keeps_its_activations():
    profile, workload = load_profile("1xH100"), load_workload("llama-3.2-1b")
    off = workload.model_copy(update={"train": workload.train.model_copy(update={"gradient_checkpointing": False})})
    on = predict_cell(cell(Init.ONE_ADAPTER, Quant.NONE, Backend.SINGLE), profile, workload)
    without = predict_cell(cell(Init.ONE_ADAPTER, Quant.NONE, Backend.SINGLE), profile, off)
    assert without.terms["activations"] > 4 * on.terms["activations"]


def method_cell(method, init=Init.ONE_ADAPTER, backend=Backend.SINGLE):
    return cell(init, Quant.NONE, backend).model_copy(update={"method": method})


def test_each_method_reads_the_model_output_its_own_way():
    # measured by RSS (no budget): the mapped weights are charged whole, so their difference shows
    profile, workload = load_profile("cpu"), load_workload("small")
    predicted = {m: predict_cell(method_cell(m), profile, workload).terms for m in ("dpo", "sft", "reward", "orpo")}
    # SFT and KTO put one row per example through the policy, DPO two: half the activations and head tiles
    assert predicted["sft"]["activations"] < predicted["dpo"]["activations"]
    assert predicted["sft"]["lm_head_backward"] < predicted["dpo"]["lm_head_backward"]
    # the reward model has a one-output score head instead of the (untied, 32768 x 256) LM head
    assert predicted["dpo"]["weights"] - predicted["reward"]["weights"] == (32768 * 256 - 256) * 4
    # ... which holds R * L * b at the head's phase: a later phase (a recomputed layer) sets the step's peak
    assert "lm_head_backward" not in predicted["reward"] and "scalar_head" not in predicted["reward"]
    from bench.estimate.predict import output_head
    from bench.matrix.methods import method_spec

    shapes = shapes_from_config(str(SCENARIOS_DIR / "workloads/small/config.json"))
    assert output_head(method_spec("reward"), 4, 128, shapes, 4, "cpu", False) == ("scalar_head", 4 * 128 * 4)
    # ORPO's experimental trainer holds the full [2B, L, V] logits and, in the backward, full-size gradients: 5 in
    # all with its NLL's, 4 for SimPO (bench/matrix/methods.py logits_units)
    rows_l_v = 2 * 2 * 128 * 32768 * 4
    assert predicted["orpo"]["full_logits"] == 5 * rows_l_v
    simpo = predict_cell(method_cell("simpo"), profile, workload).terms
    assert simpo["full_logits"] == 4 * rows_l_v


def test_kto_keeps_its_reference_per_init_mode_and_the_kl_batch_adds_no_peak():
    profile, workload = load_profile("2xA10"), load_workload("phi-2")
    kto = predict_cell(method_cell("kto", Init.TWO_MODELS, Backend.DDP), profile, workload)
    dpo = predict_cell(method_cell("dpo", Init.TWO_MODELS, Backend.DDP), profile, workload)
    assert kto.terms["reference_model"] == dpo.terms["reference_model"]
    kto = predict_cell(method_cell("kto", Init.ONE_ADAPTER, Backend.DDP), profile, workload)
    dpo = predict_cell(method_cell("dpo", Init.ONE_ADAPTER, Backend.DDP), profile, workload)
    assert "kl_batch_forward" not in kto.terms and kto.terms["activations"] == dpo.terms["activations"] / 2
    sft = predict_cell(method_cell("sft", Init.TWO_MODELS, Backend.DDP), profile, workload)
    assert sft.status == "not_applicable" and "has no reference" in sft.reason


def test_zero2_end_of_backward_is_the_bucket_plus_the_gradient_partition_when_that_is_larger():
    # one token per row: the LM head's backward is tiny, and on the CPU the bucket's touched pages (min(5e8, T)
    # elements of fp32) plus this rank's fp32 gradient partition T * 4 / N set the peak
    profile, workload = load_profile("cpu-budget"), load_workload("small")
    short = workload.model_copy(update={"train": workload.train.model_copy(update={"max_length": 1})})
    p = predict_cell(cell(Init.TWO_MODELS, Quant.NONE, Backend.ZERO2), profile, short)
    total = shapes_from_config(str(SCENARIOS_DIR / "workloads/small/config.json")).total
    assert p.terms["zero2_end_of_backward"] == pytest.approx(min(500_000_000, total) * 4 + total * 4 / 2)


def made_up_shapes(*linears: tuple[int, int], other: int = 0):
    """A decoder of nothing but the given (in_features, out_features) linears and `other` 1-D parameters."""
    from bench.estimate.shapes import Linear, ModelShapes

    weights = sum(i * o for i, o in linears)
    return ModelShapes(
        total=weights + other,
        embeddings=0,
        lm_head=0,
        linear_weights=weights,
        linear_rows=sum(o for _, o in linears),
        experts=0,
        other=other,
        largest_layer=0,
        largest_linear=0,
        largest_block=0,
        linears=tuple(Linear(f"layers.0.l{n}", i, o, False) for n, (i, o) in enumerate(linears)),
        hidden=1,
        intermediate=1,
        layers=1,
        heads=1,
        kv_heads=1,
        head_dim=1,
        vocab=1,
        layer_norms=2,
        layer_norm=False,
        gated_mlp=True,
        activation="silu",
        rotary_dims=1,
    )


def test_large_tensors_are_those_above_the_caching_allocators_10_mib():
    # c10/cuda/CUDACachingAllocator.cpp: a request of at least kMinLargeAlloc (10 MiB) gets its own segment rounded up
    # to 2 MiB; 10 MiB exactly is a whole number of 2 MiB steps and loses nothing, so only tensors above it count
    from bench.estimate.knobs import Knobs
    from bench.estimate.predict import _large_tensors, _setting
    from bench.matrix.plan import plan_for
    from bench.matrix.profiles import HardwareProfile

    shapes = made_up_shapes(
        (2048, 2560),  # 5,242,880 elements: 10 MiB exactly in bf16, 20 MiB in fp32
        (2048, 2561),  # just above 10 MiB in bf16
        (2, 4_000_000),  # a matrix however narrow: 16 MB in bf16
        (2048, 1200),  # 2,457,600 elements: 4.7 MiB in bf16, 9.4 MiB in fp32
        other=10_000_000,  # 1-D norms and biases: many small tensors summed into one count, never one large tensor
    )
    bf16 = load_profile("1xH100")
    fp32 = bf16.model_copy(update={"precision": "fp32"})
    adapter, full = (
        cell(Init.ONE_ADAPTER, Quant.NONE, Backend.SINGLE),
        cell(Init.TWO_MODELS, Quant.NONE, Backend.SINGLE),
    )
    workload = load_workload("tiny")

    def large(c: Cell, profile: HardwareProfile) -> int:
        return _large_tensors(_setting(plan_for(c, profile, workload), c.backend, shapes, Knobs()))

    assert large(adapter, bf16) == 2
    assert large(adapter, fp32) == 3
    # a full fine-tune with a reference model: the weights, the reference's, each one's gradient and two Adam states
    assert large(full, bf16) == 2 * 5


def test_checkpoint_dtype_follows_prepare():
    # bench/assets/prepare.py writes random weights in fp32 up to 100M parameters and in bf16 above; a pretrained
    # checkpoint is taken as bf16 whatever its size
    from dataclasses import replace

    from bench.estimate.predict import checkpoint_bytes
    from bench.estimate.shapes import shapes_for

    workload = load_workload("small")
    shapes = shapes_for(workload)
    assert checkpoint_bytes(workload, shapes) == 4
    assert checkpoint_bytes(workload, replace(shapes, total=100_000_000)) == 4
    assert checkpoint_bytes(workload, replace(shapes, total=100_000_001)) == 2
    pretrained = workload.model_copy(update={"model": workload.model.model_copy(update={"weights": "pretrained"})})
    assert checkpoint_bytes(pretrained, shapes) == 2


def test_a_bf16_cpu_cell_maps_only_a_bf16_checkpoint():
    # a checkpoint stored in the compute dtype is mapped, and a cgroup charges an adapter cell nothing for it;
    # small's fp32 checkpoint is converted on load into private bf16 memory, charged whole
    from bench.estimate.shapes import shapes_for

    budget = load_profile("cpu-budget").model_copy(update={"precision": "bf16"})
    adapter = cell(Init.ONE_ADAPTER, Quant.NONE, Backend.SINGLE)
    small = load_workload("small")
    bf16_checkpoint = small.model_copy(update={"model": small.model.model_copy(update={"weights": "pretrained"})})
    assert "weights" not in predict_cell(adapter, budget, bf16_checkpoint).terms
    assert predict_cell(adapter, budget, small).terms["weights"] == pytest.approx(shapes_for(small).total * 2)


def test_a_device_the_calibration_does_not_name_has_no_constants():
    from bench.estimate.predict import Calibration

    p = predict_cell(
        cell(Init.ONE_ADAPTER, Quant.NONE, Backend.SINGLE),
        load_profile("cpu-budget"),
        load_workload("small"),
        calibration=Calibration(version="x", devices={}),
    )
    assert p.total_bytes == p.train_bytes and p.overhead_bytes == 0


def test_the_device_not_the_profile_name_makes_a_gpu_prediction():
    profile = load_profile("cpu-budget").model_copy(update={"name": "2xA10"})
    p = predict_cell(cell(Init.ONE_ADAPTER, Quant.NONE, Backend.SINGLE), profile, load_workload("small"))
    assert p.memory_kind == "cgroup" and "cublas_workspaces" not in p.terms and p.reserved_bytes is None


def test_a_dequantized_weight_can_be_the_largest_freed_block():
    # one 8-token row: the LM head's buffers are small, and bitsandbytes' dequantized 8192 x 2048 MLP weight (bf16)
    # is the largest transient, the block the caching allocator keeps without expandable segments
    from bench.estimate.knobs import Knobs

    nf4 = cell(Init.ONE_ADAPTER, Quant.NF4, Backend.SINGLE)
    profile, workload = load_profile("1xH100"), load_workload("llama-3.2-1b")
    short = {"max_length": 8, "batch_size": 1}
    cached = predict_cell(nf4, profile, workload, knobs=Knobs(**short))
    expandable = predict_cell(nf4, profile, workload, knobs=Knobs(expandable_segments=True, **short))
    assert cached.terms["dequant_buffer"] == 8192 * 2048 * 2
    assert cached.reserved_bytes - expandable.reserved_bytes == 8192 * 2048 * 2


def test_given_spreads_make_the_range_and_no_spread_leaves_none():
    from bench.estimate.uncertainty import Spread, Spreads

    one_adapter = cell(Init.ONE_ADAPTER, Quant.NONE, Backend.SINGLE)
    budget, small = load_profile("cpu-budget"), load_workload("small")
    none = predict_cell(one_adapter, budget, small, spreads=Spreads(estimator_version="x", kinds={}))
    assert (none.range_low_bytes, none.range_high_bytes) == (None, None)
    assert none.error_kind == "cpu:cgroup:adapter:single" and none.fit_probability is None
    # on the CPU the range is of the model memory: errors -50 % .. 0 double its upper end, the baseline added back
    wide = Spreads(estimator_version="x", kinds={"cpu": Spread(errors=[-0.5, 0.0])})
    p = predict_cell(one_adapter, budget, small, spreads=wide)
    assert p.range_low_bytes == pytest.approx(p.total_bytes)
    assert p.range_high_bytes == pytest.approx(p.total_bytes + p.train_bytes)
    assert (p.range_kind, p.range_rows) == ("cpu", 2) and p.fit_probability in (0.0, 0.5, 1.0)


def test_an_hpu_prediction_is_of_the_devices_own_figure():
    p = predict_cell(
        cell(Init.ONE_ADAPTER, Quant.NONE, Backend.SINGLE), load_profile("8xGaudi2"), load_workload("phi-2")
    )
    assert p.memory_kind == "device" and p.error_kind == "hpu:device:adapter:single"
