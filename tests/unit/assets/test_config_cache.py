"""The shapes kept on disk (bench/assets/config_cache.py): a second `predict` of a model imports neither torch nor
transformers, and an edited config, a torn entry or the cache turned off builds on the meta device again."""

import json
import os
import shutil
import subprocess
import sys

from bench.assets.config_cache import CACHE_ENV, cache_file, cached
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


def test_a_second_predict_imports_neither_torch_nor_transformers(tmp_path):
    model = tmp_path / "qwen"
    shutil.copytree(SCENARIOS_DIR / "models" / "qwen2.5-7b", model)
    first, imported_first = predict(str(model), str(tmp_path / "cache"))
    second, imported_second = predict(str(model), str(tmp_path / "cache"))
    assert imported_first == "IMPORTED True True" and imported_second == "IMPORTED False False"
    assert json.loads(first) == json.loads(second)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 2}))
    edited, imported_edited = predict(str(model), str(tmp_path / "cache"))
    assert imported_edited == "IMPORTED True True" and json.loads(edited) != json.loads(first)
    _, off = predict(str(model), "off")
    assert off == "IMPORTED True True"


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
