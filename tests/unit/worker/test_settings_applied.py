"""The training-setting flags `run` applies through the worker: `--attention` reaches every model's from_pretrained,
`--torch-compile` and `--precision pure-bf16` the trainer arguments (as an exported recipe says them), the
launch gives a compiling cell its own inductor cache and no progress watchdog, a DeepSpeed cell is not applicable
under pure bf16, and what engaged is read back and held against what was asked."""

import types

import pytest
import torch
import transformers
import yaml

from bench.assets.prepare import PreparedAssets
from bench.judge.engagement import AskedSettings, mismatches
from bench.matrix.axes import Backend, Init, Option, Quant
from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.matrix.plan import plan_for
from bench.matrix.profiles import load_profile, load_workload
from bench.matrix.settings import TrainingSettings, apply_to_profile, apply_to_workload
from bench.results.schema import Engagement
from bench.run.launch import ACCELERATE_FILE, plan_launch
from bench.run.one_cell import pure_bf16_reason
from bench.worker import models
from bench.worker.engage import settings_seen
from bench.worker.spec import WorkerSpec
from bench.worker.trainer_args import trainer_arguments

ASSETS = PreparedAssets(model="m", tokenizer="t", dataset="d")


def spec_with(init: Init = Init.ONE_ADAPTER, backend: Backend = Backend.SINGLE, options=(), **given) -> WorkerSpec:
    settings = TrainingSettings(**given)
    profile = apply_to_profile(load_profile("cpu"), settings)
    workload = apply_to_workload(load_workload("tiny"), settings)
    launcher = backend_spec(backend).default_launcher
    cell = Cell(init=init, quant=Quant.NONE, backend=backend, launcher=launcher, options=options)
    return WorkerSpec.from_plan(plan_for(cell, profile, workload), ASSETS, "/tmp/cell")


def test_default_settings_add_nothing_to_the_load_or_the_trainer():
    spec = spec_with()
    assert models.load_kwargs(spec) == {}
    args = trainer_arguments(spec)
    assert "torch_compile" not in args and args["use_liger_kernel"] is False and args["bf16"] is False


@pytest.mark.parametrize("attention", ["eager", "sdpa", "flash_attention_2"])
def test_attention_reaches_every_from_pretrained(attention, monkeypatch):
    seen = []
    fake = types.SimpleNamespace(from_pretrained=lambda path, **kwargs: seen.append(kwargs) or object())
    monkeypatch.setattr(transformers, "AutoModelForCausalLM", fake)
    spec = spec_with(Init.TWO_MODELS, attention=attention)
    built = models._build(spec, models.load_causal_lm, "CAUSAL_LM")
    assert built.ref_model is not None and [kw["attn_implementation"] for kw in seen] == [attention, attention]


@pytest.mark.parametrize("on", [True, False])
def test_torch_compile_is_the_trainers_when_given(on):
    assert trainer_arguments(spec_with(torch_compile=on))["torch_compile"] is on


def test_liger_flag_overrides_the_cells_option():
    assert trainer_arguments(spec_with(options=(Option.LIGER,)))["use_liger_kernel"] is True
    assert trainer_arguments(spec_with(options=(Option.LIGER,), liger=False))["use_liger_kernel"] is False
    assert trainer_arguments(spec_with(liger=True))["use_liger_kernel"] is True


def test_pure_bf16_loads_bf16_and_trains_without_autocast():
    """As the exported recipe says it (bench/advise/launch_files.py): dtype bfloat16, bf16 false."""
    pure, mixed = spec_with(precision="pure-bf16"), spec_with(precision="mixed")
    assert trainer_arguments(pure)["bf16"] is False and trainer_arguments(mixed)["bf16"] is True
    assert models.torch_dtype(pure.profile.precision) == torch.bfloat16


def test_pure_bf16_makes_deepspeed_cells_not_applicable_and_turns_accelerates_autocast_off(tmp_path):
    zero2 = spec_with(backend=Backend.ZERO2, precision="pure-bf16")
    plan = plan_for(zero2.cell, zero2.profile, zero2.workload)
    assert "DeepSpeed's bf16 engine keeps an fp32 master copy" in pure_bf16_reason(plan)
    mixed = spec_with(backend=Backend.ZERO2, precision="mixed")
    assert pure_bf16_reason(plan_for(mixed.cell, mixed.profile, mixed.workload)) is None
    for precision, autocast in (("pure-bf16", "no"), ("mixed", "bf16")):
        fsdp = spec_with(backend=Backend.FSDP, precision=precision)  # launched by accelerate, with its config
        files = plan_launch(fsdp, tmp_path, port=29555).files
        (accelerate,) = [text for path, text in files.items() if path.name == ACCELERATE_FILE]
        assert yaml.safe_load(accelerate)["mixed_precision"] == autocast


def test_a_compiling_cell_has_its_own_inductor_cache_and_no_progress_watchdog(tmp_path):
    compiling = plan_launch(spec_with(torch_compile=True), tmp_path, port=29555)
    assert compiling.env["TORCHINDUCTOR_CACHE_DIR"] == "/tmp/cell/inductor" and compiling.stall_s is None
    plain = plan_launch(spec_with(), tmp_path, port=29555)
    assert "TORCHINDUCTOR_CACHE_DIR" not in plain.env and plain.stall_s == load_profile("cpu").stall_s


class _Tiny(torch.nn.Module):
    def __init__(self, attention: str, dtype: torch.dtype) -> None:
        super().__init__()
        self.config = types.SimpleNamespace(_attn_implementation=attention)
        self.base = torch.nn.Linear(2, 2, dtype=dtype).requires_grad_(False)
        self.adapter = torch.nn.Linear(2, 2)


def test_what_engaged_is_read_from_the_models_and_the_accelerator():
    model = _Tiny("eager", torch.bfloat16)
    trainer = types.SimpleNamespace(
        ref_model=_Tiny("sdpa", torch.bfloat16),
        model_wrapped=torch.compile(model),
        accelerator=types.SimpleNamespace(mixed_precision="no"),
    )
    seen = settings_seen(trainer, model)
    assert seen["attn_implementation"] == "eager" and seen["ref_attn_implementation"] == "sdpa"
    assert seen["torch_compiled"] is True and seen["mixed_precision"] == "no"
    assert seen["trainable_dtypes"] == ["torch.float32"] and seen["frozen_dtypes"] == ["torch.bfloat16"]


def _seen(**fields) -> Engagement:
    base = {"world_size": 1, "distributed_type": "NO", "wrapper": "PeftModelForCausalLM", "adapters": ["default"]}
    base |= {"trainer": "DPOTrainer", "attn_implementation": "sdpa", "mixed_precision": "no", "torch_compiled": False}
    return Engagement(**base | fields)


CELL = Cell(init=Init.ONE_ADAPTER, quant=Quant.NONE, backend=Backend.SINGLE, launcher="python")


@pytest.mark.parametrize(
    ("asked", "seen", "found"),
    [
        (AskedSettings(attention="eager"), {"attn_implementation": "eager"}, None),
        (AskedSettings(attention="eager"), {}, "--attention eager requested, the policy runs sdpa"),
        (
            AskedSettings(attention="eager"),
            {"attn_implementation": "eager", "ref_attn_implementation": "sdpa"},
            "the reference runs sdpa",
        ),
        (AskedSettings(torch_compile=True), {"torch_compiled": True}, None),
        (AskedSettings(torch_compile=True), {}, "--torch-compile on requested, the model is not compiled"),
        (AskedSettings(pure_bf16=True), {"frozen_dtypes": ["torch.bfloat16"]}, None),
        (AskedSettings(pure_bf16=True), {"frozen_dtypes": ["torch.float32"]}, "weights are torch.float32"),
        (AskedSettings(pure_bf16=True), {"frozen_dtypes": ["torch.bfloat16", "torch.float32", "torch.uint8"]}, None),
        (
            AskedSettings(pure_bf16=True),
            {"frozen_dtypes": ["torch.bfloat16"], "mixed_precision": "bf16"},
            "under autocast bf16",
        ),
    ],
)
def test_a_setting_that_did_not_engage_is_a_mismatch(asked, seen, found):
    result = mismatches(CELL, 1, _seen(**seen), asked)
    assert (result == []) if found is None else any(found in line for line in result), result


def test_a_full_fine_tune_under_pure_bf16_trains_bf16_weights_only():
    full = Cell(init=Init.TWO_MODELS, quant=Quant.NONE, backend=Backend.SINGLE, launcher="python")
    bf16 = _seen(adapters=[], ref_model="LlamaForCausalLM", trainable_dtypes=["torch.bfloat16"])
    assert mismatches(full, 1, bf16, AskedSettings(pure_bf16=True)) == []
    fp32 = bf16.model_copy(update={"trainable_dtypes": ["torch.float32"]})
    assert "the trained weights are torch.float32" in mismatches(full, 1, fp32, AskedSettings(pure_bf16=True))[0]


def test_asked_settings_are_the_workloads():
    spec = spec_with(attention="eager", torch_compile=True, precision="pure-bf16")
    assert AskedSettings.of(spec.profile, spec.workload) == AskedSettings("eager", True, True)
    plain = spec_with()
    assert AskedSettings.of(plain.profile, plain.workload) == AskedSettings()
