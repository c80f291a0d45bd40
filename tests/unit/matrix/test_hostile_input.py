"""Hostile input: whatever is in a scenario file, loading ends in a typed object or one BenchError line."""

import string
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.errors import BenchError
from bench.matrix.profiles import load_profile, load_workload
from bench.matrix.scenario import load_matrix

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True),
    st.text(max_size=30),
    st.sampled_from(["cpu", "cuda", "tiny", "bf16", "../../etc/passwd", "~", "*"]),
)
yaml_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=20,
)


def mutated_profile() -> st.SearchStrategy[dict]:
    base = yaml.safe_load(Path("scenarios/hardware/cpu.yaml").read_text())
    keys = st.sampled_from([*base, "extra_key"])
    return st.dictionaries(keys, yaml_values, max_size=4).map(lambda changes: base | changes)


def assert_one_line_or_loaded(load, path: Path) -> None:
    try:
        load()
    except BenchError as exc:
        message = str(exc)
        assert "\n" not in message and path.name in message
    # any other exception type fails the test: that would be a traceback for the user


@SETTINGS
@given(text=st.text(alphabet=string.printable + "äß€\t", max_size=300))
def test_arbitrary_text_as_a_profile(scenario_copy, text):
    path = scenario_copy / "hardware" / "fuzz.yaml"
    path.write_text(text, encoding="utf-8")
    assert_one_line_or_loaded(lambda: load_profile("fuzz", scenario_copy), path)


@SETTINGS
@given(data=mutated_profile())
def test_mutated_profile_values(scenario_copy, data):
    path = scenario_copy / "hardware" / "cpu.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    assert_one_line_or_loaded(lambda: load_profile("cpu", scenario_copy), path)


@SETTINGS
@given(data=yaml_values)
def test_arbitrary_structures_as_matrix_and_workload(scenario_copy, data):
    matrix = scenario_copy / "matrix.yaml"
    matrix.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    assert_one_line_or_loaded(lambda: load_matrix(matrix), matrix)
    workload = scenario_copy / "workloads" / "tiny.yaml"
    workload.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    assert_one_line_or_loaded(lambda: load_workload("tiny", scenario_copy), workload)


def test_yaml_tags_that_would_run_code_are_refused(scenario_copy, tmp_path):
    marker = tmp_path / "pwned"
    path = scenario_copy / "hardware" / "evil.yaml"
    path.write_text(f"name: !!python/object/apply:os.system ['touch {marker}']\n")
    assert_one_line_or_loaded(lambda: load_profile("evil", scenario_copy), path)
    assert not marker.exists()


@SETTINGS
@given(name=st.text(max_size=40))
def test_profile_names_never_reach_outside_the_folder(scenario_copy, name):
    try:
        load_profile(name, scenario_copy)
    except BenchError as exc:
        assert "\n" not in str(exc)
    else:
        assert (scenario_copy / "hardware" / f"{name}.yaml").resolve().parent == (scenario_copy / "hardware").resolve()


def test_model_loading_never_trusts_remote_code(monkeypatch):
    """Least privilege: the worker passes trust_remote_code=False to every from_pretrained."""
    from transformers import AutoModelForCausalLM

    from bench.assets.prepare import PreparedAssets
    from bench.matrix.cell import Cell
    from bench.matrix.plan import plan_for
    from bench.matrix.profiles import load_workload as workload
    from bench.worker.models import load_causal_lm
    from bench.worker.spec import WorkerSpec

    seen = {}
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", lambda *a, **kw: seen.update(kw))
    spec = WorkerSpec.from_plan(
        plan_for(
            Cell(init="one_adapter", quant="none", backend="single", launcher="python"),
            load_profile("cpu"),
            workload("tiny"),
        ),
        PreparedAssets(model="m", tokenizer="t", dataset="d"),
        "/tmp/x",
    )
    load_causal_lm(spec)
    assert seen["trust_remote_code"] is False


def _set(data: dict, key: str, value: object) -> dict:
    """`data` with the dotted `key` set to `value` (the YAML text of the value, parsed as the loader would)."""
    *outer, last = key.split(".")
    inner = data
    for part in outer:
        inner = inner[part]
    inner[last] = yaml.safe_load(value)
    return data


def _plant(path: Path, key: str, value: str) -> None:
    path.write_text(yaml.safe_dump(_set(yaml.safe_load(path.read_text()), key, value)), encoding="utf-8")


PROFILE_VALUES = [
    ("memory_budget_gb", "1.0e+30"),  # was a false `oom` with limit_bytes 0
    ("memory_budget_gb", "1.0e-10"),  # was a ValueError traceback after preparation
    ("memory_budget_gb", ".inf"),  # was an OverflowError traceback in predict and run
    ("memory_budget_gb", ".nan"),
    ("memory_per_device_gb", ".inf"),  # was "fits · inf GB"
    ("memory_per_device_gb", "1.0e+9"),
    ("processes", "1.0e+9"),  # was accepted
    ("device_count", "100000"),
    ("nodes", "1000000"),
    ("timeout_s", "1.0e+12"),
    ("start_up_s", ".inf"),
    ("stall_s", "1.0e+12"),
    ("threads_per_process", "1000000"),
    ("core_slots", "1000000"),
    ("container_cpus", ".nan"),
    ("container_memory_gb", "1.0e+30"),
    ("shm_size_gb", ".inf"),
    ("node_memory_gb", "-1"),
    ("peak_tflops", ".inf"),
]


@pytest.mark.parametrize(("key", "value"), PROFILE_VALUES)
def test_profile_values_that_cannot_work_are_one_line_naming_the_file_and_key(scenario_copy, key, value):
    path = scenario_copy / "hardware" / "cpu.yaml"
    _plant(path, key, value)
    with pytest.raises(BenchError) as err:
        load_profile("cpu", scenario_copy)
    assert f"cpu.yaml: key '{key}': " in str(err.value) and "\n" not in str(err.value), str(err.value)


WORKLOAD_VALUES = [
    ("train.max_length", "1.0e+12"),
    ("train.per_device_train_batch_size", "1000000000"),
    ("train.steps", "1.0e+12"),
    ("train.learning_rate", ".inf"),
    ("train.learning_rate", ".nan"),
    ("train.learning_rate", "1.0e+6"),
    ("train.beta", ".inf"),
    ("train.seed", "-1"),  # numpy's seeds are 0 .. 2**32 - 1
    ("train.seed", "1.0e+30"),
    ("train.gradient_accumulation_steps", "1000000000"),
    ("model.seed", "-5"),
    ("tokenizer.vocab_size", "1.0e+12"),
    ("lora.r", "1000000000"),
    ("lora.alpha", "1.0e+12"),
    ("lora.learning_rate", ".nan"),
    ("generation.num_generations", "1000000000"),
    ("generation.max_completion_length", "1.0e+12"),
    ("generation.temperature", ".inf"),
    ("generation.learning_rate_scale", ".inf"),
    ("generation.prompt_length", "1.0e+12"),
    ("generation.reward_model_weight", ".nan"),
]


@pytest.mark.parametrize(("key", "value"), WORKLOAD_VALUES)
def test_workload_values_that_cannot_work_are_one_line_naming_the_file_and_key(scenario_copy, key, value):
    path = scenario_copy / "workloads" / "tiny.yaml"
    _plant(path, key, value)
    with pytest.raises(BenchError) as err:
        load_workload("tiny", scenario_copy)
    assert f"tiny.yaml: key '{key}': " in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_synthetic_data_values_are_bounded(scenario_copy):
    path = scenario_copy / "workloads" / "tiny-synthetic.yaml"
    _plant(path, "dataset.synthetic.rows", "1.0e+12")
    with pytest.raises(BenchError, match=r"tiny-synthetic.yaml: key 'dataset.synthetic.rows': "):
        load_workload("tiny-synthetic", scenario_copy)


def test_every_shipped_profile_and_workload_is_inside_the_bounds():
    from bench.matrix.profiles import available
    from bench.paths import SCENARIOS_DIR

    for name in available(SCENARIOS_DIR / "hardware"):
        load_profile(name)
    for name in available(SCENARIOS_DIR / "workloads"):
        load_workload(name)


def test_a_misspelt_key_is_named_unknown_with_the_key_it_resembles(scenario_copy):
    """A typo used to read as the key it replaced being missing ("missing key 'timeout_s'")."""
    path = scenario_copy / "hardware" / "cpu.yaml"
    path.write_text(path.read_text().replace("timeout_s:", "timout_s:"))
    with pytest.raises(BenchError) as err:
        load_profile("cpu", scenario_copy)
    assert str(err.value).endswith("cpu.yaml: unknown key 'timout_s' (did you mean 'timeout_s'?)"), str(err.value)
    workload = scenario_copy / "workloads" / "tiny.yaml"
    workload.write_text(workload.read_text().replace("  warmup_steps:", "  warmup_step:"))
    with pytest.raises(BenchError, match=r"unknown key 'train.warmup_step' \(did you mean 'warmup_steps'\?\)$"):
        load_workload("tiny", scenario_copy)


def test_gpu_profiles_out_of_bounds_are_one_line():
    """`--gpu NAME:COUNT --nodes N` builds its profile through the same schema: too many is one line."""
    from bench.matrix.profiles import gpu_profile

    with pytest.raises(BenchError, match=r"^--gpu A10:8 --nodes 100000: "):
        gpu_profile("A10:8", 100000, "tiny")
    with pytest.raises(BenchError, match=r"^--gpu A10:100000: "):
        gpu_profile("A10:100000", 1, "tiny")
