"""Each cell loads the dataset through its own folder, so `datasets` caches never cross cells."""

import json

from datasets import Dataset, load_from_disk

from bench.assets.prepare import cell_dataset


def _saved(tmp_path):
    source = tmp_path / "assets" / "dataset"
    Dataset.from_list([{"prompt": f"p{i}", "chosen": "a", "rejected": "b"} for i in range(8)]).save_to_disk(str(source))
    return source


def _double(batch):
    return {"n": [len(p) * 2 for p in batch["prompt"]]}


def test_map_caches_go_to_the_cells_folder_and_the_next_cell_starts_cold(tmp_path):
    source = _saved(tmp_path)
    before = sorted(p.name for p in source.iterdir())

    first = load_from_disk(cell_dataset(str(source), tmp_path / "cell1" / "dataset"))
    first.map(_double, batched=True)
    assert any(p.name.startswith("cache-") for p in (tmp_path / "cell1" / "dataset").iterdir())
    assert sorted(p.name for p in source.iterdir()) == before  # the shared folder is never written

    # What TRL's precompute does: a cache file named by a fingerprint, reused when it exists.
    folder = cell_dataset(str(source), tmp_path / "cell2" / "dataset")
    second = load_from_disk(folder)
    cached = first._get_cache_file_path("same-fingerprint")
    first.map(_double, batched=True, cache_file_name=cached)
    assert not (tmp_path / "cell2" / "dataset" / "cache-same-fingerprint.arrow").exists()
    assert second._get_cache_file_path("same-fingerprint").startswith(folder)


def test_links_only_the_saved_files_and_is_idempotent(tmp_path):
    source = _saved(tmp_path)
    (source / "cache-0123.arrow").write_bytes(b"left by an older run")
    folder = tmp_path / "cell" / "dataset"
    cell_dataset(str(source), folder)
    cell_dataset(str(source), folder)  # a resumed cell
    state = json.loads((source / "state.json").read_text())
    expected = {e["filename"] for e in state["_data_files"]} | {"state.json", "dataset_info.json"}
    assert {p.name for p in folder.iterdir()} == expected
    assert all(p.is_symlink() for p in folder.iterdir())
    assert load_from_disk(str(folder))["prompt"][:2] == ["p0", "p1"]
