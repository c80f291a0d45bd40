"""`in_effect` reads back every training setting that `apply_to_workload` and `apply_to_profile` set: what a run
records it trained with (env.json `training`) and what resuming it compares."""

import pytest

from bench.matrix.profiles import load_profile, load_workload
from bench.matrix.settings import TrainingSettings, apply_to_profile, apply_to_workload, in_effect

CHANGED = {
    "max_length": 64,
    "batch_size": 2,
    "grad_accum": 3,
    "steps": 7,
    "lora_r": 4,
    "lora_targets": ("q_proj",),
    "gradient_checkpointing": False,
    "optim": "adafactor",
    "precision": "bf16",
    "precompute_ref": True,
    "attention": "eager",
    "liger": True,
    "torch_compile": True,
}


def test_every_setting_is_read_back():
    assert set(CHANGED) == set(TrainingSettings.model_fields)


@pytest.mark.parametrize("name", CHANGED)
def test_a_setting_given_is_the_setting_in_effect(name):
    profile, workload = load_profile("cpu"), load_workload("tiny")
    given = TrainingSettings(**{name: CHANGED[name]})
    before = in_effect(profile, workload)
    after = in_effect(apply_to_profile(profile, given), apply_to_workload(workload, given))
    assert getattr(after, name) == CHANGED[name] != getattr(before, name)
    assert after.model_dump(exclude={name}) == before.model_dump(exclude={name})


def test_pure_bf16_is_read_back_as_its_mode():
    profile, workload = load_profile("1xH100"), load_workload("tiny")
    given = TrainingSettings(precision="pure-bf16")
    assert in_effect(apply_to_profile(profile, given), apply_to_workload(workload, given)).precision == "pure-bf16"
