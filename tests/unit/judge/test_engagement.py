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


def test_full_trains_every_weight_of_one_model():
    sft = Cell(method="sft", init="full", quant="none", backend="single", launcher="python")
    one_model = seen(adapters=[], wrapper="LlamaForCausalLM", trainer="SFTTrainer", frozen_parameters=0)
    assert mismatches(sft, 1, one_model) == []
    assert "full expects one model" in mismatches(sft, 1, one_model.model_copy(update={"ref_model": "Llama"}))[0]
    assert "full expects one model" in mismatches(sft, 1, one_model.model_copy(update={"adapters": ["default"]}))[0]
    frozen = mismatches(sft, 1, one_model.model_copy(update={"frozen_parameters": 3}))
    assert frozen == [
        "full trains every weight, but the policy has 3 frozen parameter tensor(s); saw adapters=[], ref=None"
    ]
    two_models = seen(adapters=[], ref_model="LlamaForCausalLM", frozen_parameters=1)
    assert "two_models trains every weight" in mismatches(cell(init="two_models"), 1, two_models)[0]


def test_zero3_offload_needs_the_optimizer_really_offloaded():
    ds = {"world_size": 2, "distributed_type": "DEEPSPEED", "wrapper": "DeepSpeedEngine", "zero_stage": 3}
    offload = cell(backend="zero3_offload", launcher="deepspeed")
    on_host = {"optimizer_state_devices": ["cpu"]}
    assert mismatches(offload, 2, seen(**ds, partitioned_params=True, optimizer_offload="cpu", **on_host)) == []
    assert mismatches(offload, 2, seen(**ds, partitioned_params=True, **on_host)) == [
        "optimizer offload to cpu requested, engine reports None"
    ]
    # plain ZeRO-3 does not check for offload
    assert mismatches(cell(backend="zero3", launcher="deepspeed"), 2, seen(**ds, partitioned_params=True)) == []


def test_device_map_needs_the_model_on_two_devices():
    split = cell(backend="device_map")
    assert mismatches(split, 1, seen(devices=["cuda:0", "cuda:1"])) == []
    assert "expected layers split over >=2" in mismatches(split, 1, seen(devices=["cuda:0"]))[0]


def test_ddp_whose_model_is_not_wrapped_in_ddp_is_a_fallback():
    # two processes in a process group, but each trains its own unwrapped model: gradients are never averaged
    unwrapped = seen(world_size=2, distributed_type="MULTI_CPU", wrapper="PeftModelForCausalLM")
    assert mismatches(cell(backend="ddp", launcher="torchrun"), 2, unwrapped) == [
        "ddp requested, ran as MULTI_CPU with wrapper PeftModelForCausalLM; expected wrapper DistributedDataParallel"
    ]
    wrapped = unwrapped.model_copy(update={"wrapper": "DistributedDataParallel"})
    assert mismatches(cell(backend="ddp", launcher="torchrun"), 2, wrapped) == []


def test_two_models_needs_a_reference_model_unless_its_log_probs_were_precomputed():
    no_reference = seen(adapters=[], ref_model=None)
    assert mismatches(cell(init="two_models"), 1, no_reference) == [
        "two_models expects a reference model and no adapter; saw adapters=[], ref=None"
    ]
    precomputed = no_reference.model_copy(update={"precompute_ref_log_probs": True})
    assert mismatches(cell(init="two_models"), 1, precomputed) == []
    with_adapter = seen(ref_model="LlamaForCausalLM")
    assert mismatches(cell(init="two_models"), 1, with_adapter) == [
        "two_models expects a reference model and no adapter; saw adapters=['default'], ref=LlamaForCausalLM"
    ]


def test_fallback_messages_name_what_was_expected():
    assert mismatches(cell(backend="ddp", launcher="torchrun"), 2, seen(world_size=2)) == [
        "ddp requested, ran as NO with wrapper PeftModelForCausalLM; expected distributed type "
        "MULTI_CPU or MULTI_GPU or MULTI_HPU or MULTI_XPU"
    ]
    assert mismatches(cell(quant="nf4"), 1, seen()) == ["nf4 requested, no Linear4bit layer found (found none)"]
    assert mismatches(cell(quant="int8"), 1, seen(quantized_layers={"Linear4bit": 3})) == [
        "int8 requested, no Linear8bitLt layer found (found {'Linear4bit': 3})"
    ]


DS3 = {"world_size": 1, "distributed_type": "DEEPSPEED", "wrapper": "DeepSpeedEngine", "zero_stage": 3}
OFFLOADED = {"optimizer_offload": "cpu", "optimizer_state_devices": ["cpu"], "partitioned_params": True}


def test_zero3_param_offload_needs_the_engine_to_offload_and_the_partitions_on_the_host():
    asked = cell(backend="zero3_offload_param", launcher="deepspeed")
    # DeepSpeed keeps small "persistent" parameters on the device: most, not all, of the bytes are on the host
    host = {"param_offload": "cpu", "param_storage_bytes": {"cpu": 2_000_000, "cuda:0": 30_000}}
    assert mismatches(asked, 1, seen(**DS3, **OFFLOADED, **host)) == []
    assert mismatches(asked, 1, seen(**DS3, **OFFLOADED, param_storage_bytes={"cuda:0": 2_000_000})) == [
        "parameter offload to cpu requested, engine reports None",
        "parameters on cpu requested, but 0.0 of 1.9 MiB of their partitions are there",
    ]


def test_optimizer_state_must_really_be_on_the_host():
    asked = cell(backend="zero2_offload", launcher="deepspeed")
    ds2 = DS3 | {"zero_stage": 2}
    assert mismatches(asked, 1, seen(**ds2, optimizer_offload="cpu", optimizer_state_devices=["cpu"])) == []
    on_gpu = seen(**ds2, optimizer_offload="cpu", optimizer_state_devices=["cuda:0", "cpu"])
    assert mismatches(asked, 1, on_gpu) == ["optimizer state on cpu requested, found on cuda:0"]
    assert mismatches(asked, 1, seen(**ds2, optimizer_offload="cpu")) == [
        "optimizer state on cpu requested, but no optimizer state was seen"
    ]
    # plain ZeRO-2 checks none of it
    assert mismatches(cell(backend="zero2", launcher="deepspeed"), 1, seen(**ds2)) == []


def test_fsdp_offload_needs_the_cpu_offload_policy():
    asked = cell(backend="fsdp_offload", launcher="accelerate")
    fsdp = {"world_size": 1, "distributed_type": "FSDP", "wrapper": "FSDPLlamaForCausalLM", "fsdp_modules": 17}
    state = {"optimizer_state_devices": ["cpu"], "param_storage_bytes": {"cpu": 10}}
    assert mismatches(asked, 1, seen(**fsdp, param_offload="cpu", **state)) == []
    assert mismatches(asked, 1, seen(**fsdp, **state)) == ["parameter offload to cpu requested, engine reports None"]


def test_the_trainer_class_that_ran_is_the_methods():
    sft = Cell(method="sft", init="one_adapter", quant="none", backend="single", launcher="python")
    assert mismatches(sft, 1, seen(trainer="SFTTrainer")) == []
    assert mismatches(sft, 1, seen(trainer="DPOTrainer")) == [
        "sft requested, trainer DPOTrainer ran; expected SFTTrainer"
    ]
    assert mismatches(cell(), 1, seen(trainer=None)) == ["dpo requested, trainer not reported ran; expected DPOTrainer"]


def test_offloaded_parameters_must_be_more_than_half_on_the_host():
    """'Most' of the partitions' bytes on the host: more than half. Exactly half, or 40 %, is a run that kept as
    much on the device as it offloaded."""
    asked = cell(backend="zero3_offload_param", launcher="deepspeed")

    def found(host: int, device: int) -> list[str]:
        on = {"param_offload": "cpu", "param_storage_bytes": {"cpu": host, "cuda:0": device}}
        return mismatches(asked, 1, seen(**DS3, **OFFLOADED, **on))

    assert found(2**20 + 1, 2**20 - 1) == []
    assert found(2**20, 2**20) == ["parameters on cpu requested, but 1.0 of 2.0 MiB of their partitions are there"]
    assert found(4 * 2**20, 6 * 2**20) == [
        "parameters on cpu requested, but 4.0 of 10.0 MiB of their partitions are there"
    ]


def test_devices_are_compared_by_kind_whatever_their_index():
    asked = cell(backend="zero3_offload_param", launcher="deepspeed")
    indexed = {
        "param_offload": "cpu",
        "param_storage_bytes": {"cpu:0": 2_000_000, "cuda:0": 30_000},
        "optimizer_state_devices": ["cpu:0"],
    }
    assert mismatches(asked, 1, seen(**DS3, **(OFFLOADED | indexed))) == []


def test_every_device_the_optimizer_state_was_found_on_is_named():
    asked = cell(backend="zero2_offload", launcher="deepspeed")
    state = {"optimizer_offload": "cpu", "optimizer_state_devices": ["cpu", "cuda:0", "cuda:1"]}
    on_gpus = seen(**(DS3 | {"zero_stage": 2}), **state)
    assert mismatches(asked, 1, on_gpus) == ["optimizer state on cpu requested, found on cuda:0, cuda:1"]


def test_an_adapter_mismatch_names_every_expected_adapter():
    assert mismatches(cell(init="two_adapters"), 1, seen()) == [
        "two_adapters expects adapters 'default' and 'ref' and no ref model; saw adapters=['default'], ref=None"
    ]
