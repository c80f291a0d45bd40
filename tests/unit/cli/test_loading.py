"""Bad input gives one line naming the file and the key, never a traceback."""

import pytest

from bench.cli import main
from bench.errors import BenchError
from bench.matrix.profiles import load_profile, load_workload


def test_shipped_profile_and_workload_load():
    assert load_profile("cpu").workload == "tiny"
    workload = load_workload("tiny")
    assert workload.train.warmup_steps < workload.train.steps


def test_malformed_yaml_names_file_and_line(scenario_copy):
    (scenario_copy / "hardware" / "broken.yaml").write_text("name: broken\ndevice: [cpu\n")
    with pytest.raises(BenchError, match=r"broken.yaml: malformed YAML \(line \d+, column \d+\)"):
        load_profile("broken", scenario_copy)


def test_unknown_key_is_rejected(scenario_copy):
    path = scenario_copy / "hardware" / "cpu.yaml"
    path.write_text(path.read_text() + "gpus_per_node: 8\n")
    with pytest.raises(BenchError, match=r"cpu\.yaml: unknown key 'gpus_per_node'"):
        load_profile("cpu", scenario_copy)


def test_unknown_device_lists_allowed_values(scenario_copy):
    path = scenario_copy / "hardware" / "cpu.yaml"
    path.write_text(path.read_text().replace("device: cpu", "device: tpu"))
    with pytest.raises(BenchError, match=r"key 'device': unknown value 'tpu'; allowed: 'cpu', 'cuda' or 'hpu'"):
        load_profile("cpu", scenario_copy)


def test_missing_key(scenario_copy):
    path = scenario_copy / "hardware" / "cpu.yaml"
    path.write_text(path.read_text().replace("timeout_s: 120\n", ""))
    with pytest.raises(BenchError, match=r"cpu\.yaml: missing key 'timeout_s'"):
        load_profile("cpu", scenario_copy)


def test_profile_name_cannot_escape_the_scenarios_folder(scenario_copy):
    with pytest.raises(BenchError, match="invalid hardware profile name"):
        load_profile("../../etc/passwd", scenario_copy)


def test_workload_config_path_cannot_escape(scenario_copy):
    path = scenario_copy / "workloads" / "tiny.yaml"
    path.write_text(path.read_text().replace("config: tiny/config.json", "config: ../../../etc/passwd"))
    with pytest.raises(BenchError, match=r"key 'model.config': path '../../../etc/passwd' escapes workloads/"):
        load_workload("tiny", scenario_copy)


def test_a_link_inside_the_scenario_folder_is_followed_wherever_it_points(scenario_copy, tmp_path):
    from bench.assets.text_assets import local_or_hub

    elsewhere = tmp_path / "elsewhere" / "tiny_prefs"
    elsewhere.mkdir(parents=True)
    (scenario_copy / "data").symlink_to(elsewhere.parent)
    assert local_or_hub("data/tiny_prefs", scenario_copy) == str(elsewhere.resolve())
    assert local_or_hub("data/../../owner/name", scenario_copy) == "data/../../owner/name"


def test_warmup_must_be_below_steps(scenario_copy):
    path = scenario_copy / "workloads" / "tiny.yaml"
    path.write_text(path.read_text().replace("warmup_steps: 5", "warmup_steps: 30"))
    with pytest.raises(BenchError, match=r"key 'train': warmup_steps \(30\) must be below steps \(30\)"):
        load_workload("tiny", scenario_copy)


def test_cli_prints_one_line_and_exits_2(scenario_copy, capsys):
    (scenario_copy / "hardware" / "bad.yaml").write_text("- just\n- a list\n")
    assert main(["--scenarios", str(scenario_copy), "list", "--hw", "bad"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "bad.yaml: expected a mapping" in err


def test_a_missing_scenario_folder_is_named_not_read_as_no_profiles(tmp_path):
    with pytest.raises(BenchError, match=r"no-scenarios/hardware: no such folder \(--scenarios names the scenario"):
        load_profile("cpu", tmp_path / "no-scenarios")


def test_cli_unknown_profile(capsys):
    assert main(["list", "--hw", "9xTPU"]) == 2
    err = capsys.readouterr().err
    assert "unknown hardware profile '9xTPU'; available:" in err and "cpu" in err


def test_dataset_source_cannot_escape(scenario_copy):
    path = scenario_copy / "workloads" / "tiny.yaml"
    path.write_text(path.read_text().replace("source: data/tiny_prefs", "source: ../../../etc"))
    with pytest.raises(BenchError, match=r"key 'dataset.source': dataset source '../../../etc' must be a folder"):
        load_workload("tiny", scenario_copy)


def test_run_id_cannot_escape_the_results_folder(capsys, tmp_path):
    assert main(["--results", str(tmp_path), "run", "--hw", "cpu", "--run-id", "../../../tmp/x"]) == 2
    assert "invalid run id '../../../tmp/x'" in capsys.readouterr().err
