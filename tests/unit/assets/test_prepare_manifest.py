"""A workload's prepared assets are found by their manifest (build/assets/<workload>/assets.json): one that cannot be
read (a crash or a full disk while it was written) means the assets are prepared again, not a traceback."""

import json

import pytest

from bench.assets.prepare import prepare
from bench.matrix.profiles import load_workload


@pytest.mark.parametrize(
    "damage",
    [lambda text: text[: len(text) // 2], lambda text: "", lambda text: "[]"],
    ids=["truncated", "empty", "not_a_manifest"],
)
def test_an_unreadable_manifest_is_prepared_again(tmp_path, damage):
    workload = load_workload("tiny")
    assets = prepare(workload, tmp_path)
    (manifest,) = tmp_path.glob("assets/*/assets.json")
    whole = manifest.read_text()
    manifest.write_text(damage(whole))
    assert prepare(workload, tmp_path) == assets
    assert json.loads(manifest.read_text()) == json.loads(whole)
    assert sorted(p.name for p in manifest.parent.iterdir() if p.name.startswith("assets.json")) == ["assets.json"]


def test_text_assets_alone_never_make_the_model_or_the_asset_folders_manifest(tmp_path):
    """`prepare_text` builds the tokenizer and datasets into a folder of their own (no model, no asset-folder
    manifest, which would say a model is there) and names the config's folder as the model; once the workload is
    prepared whole, it reads that folder's text assets."""
    from bench.assets.prepare import prepare_text

    workload = load_workload("tiny")
    alone = prepare_text(workload, tmp_path)
    assert alone.model == str(workload.model.config_file.parent)
    assert not list(tmp_path.glob("assets/*/assets.json")) and not list(tmp_path.glob("**/model"))
    assert prepare_text(workload, tmp_path) == alone
    whole = prepare(workload, tmp_path)
    assert prepare_text(workload, tmp_path) == whole.model_copy(update={"model": alone.model})
