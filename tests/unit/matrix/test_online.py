import pytest

from bench.matrix.cell import Cell
from bench.matrix.on_profile import CellOnProfile
from bench.matrix.online_rules import steps_per_generation, vllm_available
from bench.matrix.profiles import load_profile
from bench.matrix.scenario import expand, load_matrix, not_applicable_reason


def cell(method="grpo", init="one_adapter", backend="single", launcher="python", **kw) -> Cell:
    return Cell(method=method, init=init, quant="none", backend=backend, launcher=launcher, **kw)


@pytest.fixture
def cpu():
    return load_profile("cpu")


def test_the_online_methods_run_in_every_init_mode(cpu):
    for init in ("two_models", "one_adapter", "two_adapters"):
        assert not_applicable_reason(CellOnProfile(cell(init=init), cpu)) is None


def test_vllm_needs_a_cuda_profile_that_has_it_and_online_options_need_an_online_method(cpu):
    assert not_applicable_reason(CellOnProfile(cell(options=("vllm",)), cpu)).startswith(
        "vllm_needs_vllm: vLLM generates on CUDA"
    )
    h100 = load_profile("1xH100")
    if not vllm_available(h100):  # not importable here: declared by the profile it is
        assert "not importable" in not_applicable_reason(CellOnProfile(cell(options=("vllm",)), h100))
    declared = h100.model_copy(update={"provides": ["vllm"]})
    assert not_applicable_reason(CellOnProfile(cell(options=("vllm",)), declared)) is None
    dpo = cell(method="dpo", options=("reward_model",))
    assert not_applicable_reason(CellOnProfile(dpo, cpu)).startswith("online_option_needs_generation: ")


def test_nothing_to_precompute_for_a_method_that_samples(cpu):
    reason = not_applicable_reason(CellOnProfile(cell(options=("precompute_ref",)), cpu))
    assert reason.startswith("generation_cannot_precompute: ")


def test_the_matrix_holds_grpo_and_rloo_with_their_reward_model_and_vllm_rows():
    ids = {c.id for c in expand(load_matrix())}
    assert {"grpo-one_adapter-none-single", "rloo-two_models-none-ddp", "grpo-one_adapter-nf4-zero3"} <= ids
    assert {"rloo-two_models-none-single+reward_model", "grpo-one_adapter-none-single+vllm"} <= ids


def test_a_generation_is_never_split_inside_a_group():
    for batch, world, group in ((4, 1, 8), (4, 2, 4), (2, 3, 4), (1, 1, 16)):
        assert batch * world * steps_per_generation(batch, world, group) % group == 0


def test_a_prediction_judges_vllm_for_the_target_and_a_run_for_this_machine(cpu, monkeypatch):
    from bench.matrix import online_rules
    from bench.matrix.plan import plan_for
    from bench.matrix.profiles import gpu_profile, load_workload

    monkeypatch.setattr(online_rules.importlib.util, "find_spec", lambda name: None)  # no vLLM on this machine
    on_h100 = gpu_profile("H100:8", 1, "mistral-7b")
    vllm = cell(options=("vllm",))
    plan = plan_for(vllm, on_h100, load_workload("mistral-7b"))
    assert plan.not_applicable == (
        "vllm_needs_vllm: vLLM is not importable here and profile gpu-H100-SXMx8 does not declare it (provides: [vllm])"
    )
    assert plan.not_applicable_on_target is None
    on_cpu = plan_for(vllm, cpu, load_workload("mistral-7b"))
    assert on_cpu.not_applicable_on_target == on_cpu.not_applicable
    assert on_cpu.not_applicable.startswith("vllm_needs_vllm: vLLM generates on CUDA GPUs; profile cpu trains on cpu")


def test_the_online_methods_run_on_the_offload_backends_as_dpo_does():
    ids = {c.id for c in expand(load_matrix())}
    for backend in ("fsdp_offload", "zero2_offload", "zero3_offload", "zero3_offload_param"):
        assert {f"grpo-one_adapter-none-{backend}", f"rloo-two_models-none-{backend}+1rank"} <= ids
