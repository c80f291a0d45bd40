"""What a workload's assets are made from, hashed: the folder name of its prepared assets (build/assets/) and of its
carried ones (bench/assets/carried.py)."""

import hashlib
from pathlib import Path

from bench.assets.random_weights import VERSION as RANDOM_WEIGHTS
from bench.assets.text_assets import local_or_hub
from bench.isolation.deferred_sigint import uncut
from bench.matrix.profiles import Workload
from bench.paths import scenarios_dir


def workload_fingerprint(workload: Workload) -> str:
    """The workload's definition, its model's config.json, its shipped data's files and, for random weights, the
    generator that makes them (bench/assets/random_weights.py VERSION)."""
    blob = uncut(workload.model_dump_json)
    if workload.model.config_file is not None:
        blob += workload.model.config_file.read_text(encoding="utf-8")
    if workload.model.weights == "random":
        blob += RANDOM_WEIGHTS
    data = local_or_hub(workload.dataset.source, scenarios_dir()) if workload.dataset.source else ""
    for path in sorted(Path(data).glob("*")) if data and Path(data).is_dir() else []:
        blob += hashlib.sha256(path.read_bytes()).hexdigest()
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def folder_name(workload: Workload) -> str:
    """`<name>-<fingerprint>`: a workload's folder under build/assets/ and under a carried-assets folder."""
    return f"{workload.name}-{workload_fingerprint(workload)}"
