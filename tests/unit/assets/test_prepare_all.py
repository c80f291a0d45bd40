"""Workloads prepared in the background (bench/assets/prepare_all.py): a future per workload, each workload in a
process of its own, the first alone and the others once it is ready; a failure is its own workload's; and one
asset folder has one preparer at a time (prepare's lock)."""

import threading

import pytest

from bench.assets.prepare import LOCK, MANIFEST, asset_folder, prepare
from bench.assets.prepare_all import prepare_all
from bench.errors import BenchError
from bench.matrix.profiles import load_workload


def test_each_workload_is_ready_as_prepare_would_make_it_the_first_one_first(tmp_path):
    tiny, small = load_workload("tiny"), load_workload("small")
    lines: list[str] = []
    futures = prepare_all([tiny, small], build_dir=tmp_path / "all", carried=tmp_path / "none", note=lines.append)
    assert list(futures) == ["tiny", "small"]
    assets = {name: future.result(timeout=300) for name, future in futures.items()}
    for workload in (tiny, small):
        alone = prepare(workload, tmp_path / "one", carried=tmp_path / "none", note=lines.append)
        assert assets[workload.name].model_dump().keys() == alone.model_dump().keys()
        made = asset_folder(workload, tmp_path / "all")
        assert assets[workload.name].model == str(made / "model")
        one = asset_folder(workload, tmp_path / "one")
        assert (made / "model" / "model.safetensors").read_bytes() == (one / "model" / "model.safetensors").read_bytes()
    first_done = (asset_folder(tiny, tmp_path / "all") / MANIFEST).stat().st_mtime
    assert (asset_folder(small, tmp_path / "all") / LOCK).stat().st_mtime >= first_done  # started once tiny was ready
    assert sum("ready in" in line for line in lines) == 4, lines


def test_a_workload_that_fails_fails_alone(tmp_path):
    tiny = load_workload("tiny")
    broken = tiny.model_copy(update={"name": "broken", "model": tiny.model.model_copy(update={"config": "none.json"})})
    futures = prepare_all([broken, tiny], build_dir=tmp_path, note=lambda line: None)
    with pytest.raises(BenchError, match=r"preparing the assets of broken failed \(exit 1\): .*none\.json"):
        futures["broken"].result(timeout=300)
    assert futures["tiny"].result(timeout=300).model.endswith("model")


def test_one_asset_folder_has_one_preparer_at_a_time(tmp_path):
    workload = load_workload("tiny")
    lines: list[str] = []
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(prepare(workload, tmp_path, note=lines.append)))
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 3 and results[0] == results[1] == results[2]
    assert sum("ready in" in line for line in lines) == 1, lines  # built once, then found by the others
