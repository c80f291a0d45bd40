"""The shapes kept on disk (bench/assets/config_cache.py): a shipped model's first `predict` and any model's second
import neither torch nor transformers, and an edited config, a torn entry or the cache turned off builds on the meta
device again."""

import dataclasses
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys

from bench.assets.config_cache import CACHE_ENV, RELEASE_FILE, SHIPPED_DIR, cache_file, cached, entry_name
from bench.paths import PROJECT_ROOT, SCENARIOS_DIR

PREDICT = """
import sys
from bench.cli import main
assert main(["predict", "--gpu", "A10:1", "--model", sys.argv[1], "--format", "json"]) == 0
print("IMPORTED", "torch" in sys.modules, "transformers" in sys.modules, file=sys.stderr)
"""


def predict(model: str, cache: str) -> tuple[str, str]:
    env = {**os.environ, CACHE_ENV: cache}
    done = subprocess.run(
        [sys.executable, "-c", PREDICT, model], capture_output=True, text=True, env=env, cwd=PROJECT_ROOT, check=True
    )
    return done.stdout, done.stderr.strip().splitlines()[-1]


def test_a_shipped_model_and_a_second_predict_import_neither_torch_nor_transformers(tmp_path):
    model = tmp_path / "qwen"
    shutil.copytree(SCENARIOS_DIR / "models" / "qwen2.5-7b", model)  # the same bytes: the shipped entries serve it
    shipped, imported_shipped = predict(str(model), str(tmp_path / "cache"))
    assert imported_shipped == "IMPORTED False False"
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 2}))
    first, imported_first = predict(str(model), str(tmp_path / "cache"))
    second, imported_second = predict(str(model), str(tmp_path / "cache"))
    assert imported_first == "IMPORTED True True" and imported_second == "IMPORTED False False"
    assert json.loads(first) == json.loads(second) != json.loads(shipped)
    _, off = predict(str(model), "off")
    assert off == "IMPORTED True True"


def test_the_shipped_entries_are_those_the_shipped_configs_need_and_what_a_build_gives():
    from bench.estimate.shapes import built_on_meta, shapes_from_config
    from bench.estimate.shipped_shapes import expected_entries

    assert {path.name for path in SHIPPED_DIR.glob("*.json")} == expected_entries(), (
        "stale or missing: `python -m bench predict --hw all --write` writes them"
    )
    assert (SHIPPED_DIR / RELEASE_FILE).read_text().strip() == importlib.metadata.version("transformers")
    config = SCENARIOS_DIR / "models" / "phi-3-mini-4k" / "config.json"
    kept = SHIPPED_DIR / str(entry_name("shapes", config))
    assert json.loads(kept.read_text()) == json.loads(json.dumps(dataclasses.asdict(built_on_meta(str(config)))))
    assert shapes_from_config(str(config)) == built_on_meta(str(config))


def test_a_torn_entry_is_built_again(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    config = tmp_path / "config.json"
    config.write_text("{}")
    kept = cache_file("kind", config)
    assert kept is not None and kept.parent == tmp_path
    kept.write_text('{"value": ')
    builds = []

    def build() -> int:
        builds.append(1)
        return 7

    def value(d: dict) -> int:
        return d["value"]

    assert cached("kind", config, build, lambda v: {"value": v}, value) == 7
    assert cached("kind", config, build, lambda v: {"value": v}, value) == 7
    assert builds == [1] and json.loads(kept.read_text()) == {"value": 7}


def test_without_transformers_the_shipped_entries_are_found_by_their_own_release(monkeypatch):
    """A base install has no transformers to name the release by: the shipped entries are read under theirs."""
    config = SCENARIOS_DIR / "models" / "qwen2.5-7b" / "config.json"
    shipped = entry_name("shapes", config)

    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert entry_name("shapes", config) == shipped and (SHIPPED_DIR / str(shipped)).is_file()
