"""Hostile input: whatever is in a scenario file, loading ends in a typed object or one BenchError line."""

import string
from pathlib import Path

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
    from bench.matrix.profiles import load_workload as workload
    from bench.worker.models import load_causal_lm
    from bench.worker.spec import WorkerSpec

    seen = {}
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", lambda *a, **kw: seen.update(kw))
    spec = WorkerSpec(
        cell=Cell(init="one_adapter", quant="none", backend="single", launcher="python"),
        profile=load_profile("cpu"),
        workload=workload("tiny"),
        assets=PreparedAssets(model="m", tokenizer="t", dataset="d"),
        out_dir="/tmp/x",
    )
    load_causal_lm(spec)
    assert seen["trust_remote_code"] is False
