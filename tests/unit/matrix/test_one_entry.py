"""Each fact has one table: a GPU is one entry of scenarios/gpus.yaml, a backend's family one field of its
BackendSpec, a method's logits units one field of its MethodSpec; changing or adding that one entry is all
`predict` needs to show it."""

import json
import shutil
from dataclasses import replace

import yaml

from bench.cli import main
from bench.matrix.axes import Backend, Method
from bench.matrix.backends import BACKENDS
from bench.matrix.methods import METHODS
from bench.paths import SCENARIOS_DIR
from bench.units import MiB


def _predict(capsys, *argv: str, scenarios: str | None = None) -> dict[str, dict]:
    where = ["--scenarios", scenarios] if scenarios else []
    assert main([*where, "predict", *argv, "--format", "json"]) == 0
    return {p["cell_id"]: p for p in json.loads(capsys.readouterr().out)}


def _scenarios_with_gpu(tmp_path, entry: dict):
    folder = tmp_path / "scenarios"
    shutil.copytree(SCENARIOS_DIR, folder, ignore=shutil.ignore_patterns("gpus.yaml"))
    catalog = yaml.safe_load((SCENARIOS_DIR / "gpus.yaml").read_text(encoding="utf-8"))
    catalog["gpus"].append(entry)
    (folder / "gpus.yaml").write_text(yaml.safe_dump(catalog), encoding="utf-8")
    return folder


def test_a_gpu_is_one_catalog_entry(tmp_path, capsys):
    h200 = next(g for g in yaml.safe_load((SCENARIOS_DIR / "gpus.yaml").read_text())["gpus"] if g["name"] == "H200")
    new = h200 | {"name": "H200-Test", "aliases": [], "card": "Test H200", "driver_names": ["^Test H200$"], "sms": 200}
    folder = _scenarios_with_gpu(tmp_path, new)
    cell = "one_adapter-none-single"
    known = _predict(capsys, "--gpu", "H200:1", "--filter", cell, scenarios=str(folder))
    added = _predict(capsys, "--gpu", "H200-Test:1", "--filter", cell, scenarios=str(folder))
    assert added[cell]["hardware"] == "gpu-H200-Testx1" and added[cell]["status"] == "predicted"
    beyond = {
        name: p[cell]["nvidia_smi_bytes"] - p[cell]["reserved_bytes"] for name, p in (("h200", known), ("new", added))
    }
    assert beyond["new"] - beyond["h200"] == (200 - 132) * 3 * MiB  # the CUDA context grows with the entry's SMs


def test_a_backend_joins_a_family_by_its_entry(monkeypatch, capsys):
    cell = "two_models-none-device_map"
    before = _predict(capsys, "--hw", "2xA10", "--filter", cell)[cell]["error_kind"]
    spec = BACKENDS[Backend.DEVICE_MAP]
    monkeypatch.setitem(BACKENDS, Backend.DEVICE_MAP, replace(spec, family="data_parallel"))
    after = _predict(capsys, "--hw", "2xA10", "--filter", cell)[cell]["error_kind"]
    assert before.endswith(":device_map") and after == before.removesuffix("device_map") + "multi"


def test_a_methods_logits_units_are_its_entry(monkeypatch, capsys):
    argv = ("--hw", "1xA10", "--method", "orpo", "--filter", "orpo-one_adapter-none-single")
    before = next(iter(_predict(capsys, *argv).values()))["terms"]["full_logits"]
    monkeypatch.setitem(METHODS, Method.ORPO, replace(METHODS[Method.ORPO], logits_units=6.0))
    after = next(iter(_predict(capsys, *argv).values()))["terms"]["full_logits"]
    assert after == before / 5.0 * 6.0
