from bench.judge.engagement import mismatches
from bench.matrix.cell import Cell
from bench.results.schema import Engagement


def cell(init="one_adapter", quant="none", backend="single", launcher="python") -> Cell:
    return Cell(init=init, quant=quant, backend=backend, launcher=launcher)


def seen(**overrides) -> Engagement:
    base = {
        "world_size": 1,
        "distributed_type": "NO",
        "wrapper": "PeftModelForCausalLM",
        "adapters": ["default"],
        "trainer": "DPOTrainer",
    }
    return Engagement(**(base | overrides))


def test_matching_single_cell_has_no_mismatch():
    assert mismatches(cell(), 1, seen()) == []


def test_fsdp_that_ran_as_ddp_is_a_fallback():
    found = mismatches(
        cell(backend="fsdp", launcher="accelerate"),
        2,
        seen(world_size=2, distributed_type="MULTI_CPU", wrapper="DistributedDataParallel"),
    )
    assert found == [
        "fsdp requested, ran as MULTI_CPU with wrapper DistributedDataParallel; expected distributed type FSDP"
    ]
    fsdp_without_modules = seen(world_size=2, distributed_type="FSDP", wrapper="FSDPModule")
    assert "no FSDP module" in mismatches(cell(backend="fsdp", launcher="accelerate"), 2, fsdp_without_modules)[0]


def test_one_process_instead_of_two_is_a_fallback():
    found = mismatches(cell(backend="ddp", launcher="accelerate"), 2, seen())
    assert "world size 1, expected 2" in found


def test_zero3_needs_partitioned_parameters():
    ds = {"world_size": 2, "distributed_type": "DEEPSPEED", "wrapper": "DeepSpeedEngine", "zero_stage": 3}
    assert mismatches(cell(backend="zero3", launcher="deepspeed"), 2, seen(**ds)) == [
        "zero3 requested, but no parameter is partitioned"
    ]
    assert mismatches(cell(backend="zero3", launcher="deepspeed"), 2, seen(**ds, partitioned_params=True)) == []
    assert "ZeRO stage 3" in mismatches(cell(backend="zero2", launcher="deepspeed"), 2, seen(**ds))[0]


def test_quantization_must_show_its_layer_class():
    assert "no Linear4bit layer" in mismatches(cell(quant="nf4"), 1, seen())[0]
    assert mismatches(cell(quant="nf4"), 1, seen(quantized_layers={"Linear4bit": 14})) == []
    assert "unexpected quantized layers" in mismatches(cell(), 1, seen(quantized_layers={"Linear8bitLt": 2}))[0]


def test_init_modes():
    assert mismatches(cell(init="two_models"), 1, seen(adapters=[], ref_model="LlamaForCausalLM")) == []
    assert mismatches(cell(init="two_adapters"), 1, seen(adapters=["default", "ref"])) == []
    assert "two_adapters expects" in mismatches(cell(init="two_adapters"), 1, seen())[0]
    assert "one_adapter expects" in mismatches(cell(), 1, seen(ref_model="LlamaForCausalLM"))[0]


def test_zero3_offload_needs_the_optimizer_really_offloaded():
    ds = {"world_size": 2, "distributed_type": "DEEPSPEED", "wrapper": "DeepSpeedEngine", "zero_stage": 3}
    offload = cell(backend="zero3_offload", launcher="deepspeed")
    assert mismatches(offload, 2, seen(**ds, partitioned_params=True, optimizer_offload="cpu")) == []
    assert mismatches(offload, 2, seen(**ds, partitioned_params=True)) == [
        "optimizer offload to cpu requested, engine reports None"
    ]
    # plain ZeRO-3 does not check for offload
    assert mismatches(cell(backend="zero3", launcher="deepspeed"), 2, seen(**ds, partitioned_params=True)) == []


def test_device_map_needs_the_model_on_two_devices():
    split = cell(backend="device_map")
    assert mismatches(split, 1, seen(devices=["cuda:0", "cuda:1"])) == []
    assert "expected layers split over >=2" in mismatches(split, 1, seen(devices=["cuda:0"]))[0]


def test_the_trainer_class_that_ran_is_the_methods():
    sft = Cell(method="sft", init="one_adapter", quant="none", backend="single", launcher="python")
    assert mismatches(sft, 1, seen(trainer="SFTTrainer")) == []
    assert mismatches(sft, 1, seen(trainer="DPOTrainer")) == [
        "sft requested, trainer DPOTrainer ran; expected SFTTrainer"
    ]
    assert mismatches(cell(), 1, seen(trainer=None)) == ["dpo requested, trainer not reported ran; expected DPOTrainer"]
