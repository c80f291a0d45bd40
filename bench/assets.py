"""Prepare a workload's model, tokenizer and dataset on disk, once, so every cell loads them the way
it would load a hub checkpoint: `from_pretrained(folder)` and `load_from_disk(folder)`.

Random-weight models are built from the shipped config.json with a fixed seed; the tiny tokenizer is a
byte-level BPE trained on the shipped data. Both are deterministic, so a rebuild gives the same bytes.
"""

import hashlib
import json
from pathlib import Path

from pydantic import BaseModel

from bench.paths import BUILD_DIR, SCENARIOS_DIR
from bench.profiles import Workload, inside_folder

SPECIAL_TOKENS = ["<pad>", "<s>", "</s>"]


class PreparedAssets(BaseModel):
    model: str
    tokenizer: str
    dataset: str


def _local_or_hub(source: str, folder: Path) -> str:
    """A path under `folder` when one exists there, else the name as given (a hub id)."""
    try:
        local = inside_folder(folder, source)
    except ValueError:
        return source
    return str(local) if local.exists() else source


def workload_fingerprint(workload: Workload) -> str:
    blob = workload.model_dump_json()
    if workload.model.config:
        blob += (SCENARIOS_DIR / "workloads" / workload.model.config).read_text(encoding="utf-8")
    data = _local_or_hub(workload.dataset.source, SCENARIOS_DIR)
    for path in sorted(Path(data).glob("*")) if Path(data).is_dir() else []:
        blob += hashlib.sha256(path.read_bytes()).hexdigest()
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _prepare_dataset(workload: Workload, out: Path) -> None:
    from datasets import load_dataset

    source = _local_or_hub(workload.dataset.source, SCENARIOS_DIR)
    dataset = load_dataset(source, split=workload.dataset.split)
    missing = {"prompt", "chosen", "rejected"} - set(dataset.column_names)
    if missing:
        raise ValueError(f"dataset {workload.dataset.source} lacks columns {sorted(missing)}")
    dataset.save_to_disk(str(out))


def _train_tokenizer(workload: Workload, dataset_dir: Path, out: Path) -> None:
    from datasets import load_from_disk
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    rows = load_from_disk(str(dataset_dir))
    texts = [row[key] for row in rows for key in ("prompt", "chosen", "rejected")]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(texts, vocab_size=workload.tokenizer.vocab_size, special_tokens=SPECIAL_TOKENS)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, pad_token="<pad>", bos_token="<s>", eos_token="</s>", model_max_length=1024
    )
    tokenizer.save_pretrained(str(out))


def _build_random_model(workload: Workload, out: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config_path = SCENARIOS_DIR / "workloads" / workload.model.config
    config = AutoConfig.from_pretrained(str(config_path.parent))
    torch.manual_seed(workload.model.seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(str(out))


def prepare(workload: Workload, build_dir: Path = BUILD_DIR) -> PreparedAssets:
    """Build (or reuse) the workload's assets and return where each one is."""
    root = build_dir / "assets" / f"{workload.name}-{workload_fingerprint(workload)}"
    manifest = root / "assets.json"
    if manifest.is_file():
        return PreparedAssets.model_validate_json(manifest.read_text())
    root.mkdir(parents=True, exist_ok=True)
    dataset_dir = root / "dataset"
    _prepare_dataset(workload, dataset_dir)

    if workload.tokenizer.kind == "train_bpe":
        tokenizer = root / "tokenizer"
        _train_tokenizer(workload, dataset_dir, tokenizer)
        tokenizer_ref = str(tokenizer)
    else:
        tokenizer_ref = workload.tokenizer.source or workload.model.source or ""

    if workload.model.weights == "random":
        model = root / "model"
        _build_random_model(workload, model)
        model_ref = str(model)
    else:
        model_ref = _local_or_hub(workload.model.source or "", SCENARIOS_DIR)

    assets = PreparedAssets(model=model_ref, tokenizer=tokenizer_ref, dataset=str(dataset_dir))
    manifest.write_text(json.dumps(assets.model_dump(), indent=2))
    return assets
