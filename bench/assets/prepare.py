"""Prepare a workload's model, tokenizer and dataset on disk, once, so every cell loads them the way
it would load a hub checkpoint: `from_pretrained(folder)` and `load_from_disk(folder)`.

Random-weight models are built from the shipped config.json with a fixed seed; the tokenizer is a byte-level
BPE trained on the workload's data. Both are deterministic, so a rebuild gives the same bytes.

Small random models (the tiny CPU workload) are instantiated and saved with save_pretrained. Models above
LARGE_MODEL_PARAMS are never materialised whole: their shapes come from a meta-device instance and the
safetensors shards are written one tensor at a time in bf16 (the dtype of the published checkpoints), so a 70B
checkpoint needs one shard of host memory, and the worker loads it with the same from_pretrained call (and the
same bitsandbytes quantization) as a hub checkpoint of that architecture.
"""

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from bench.assets.method_data import FORMS
from bench.files import write_whole
from bench.matrix.profiles import Workload, inside_folder
from bench.paths import BUILD_DIR, scenarios_dir
from bench.units import GiB

MANIFEST = "assets.json"
"""In a workload's asset folder, written last: where each asset is (PreparedAssets)."""
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>"]
LARGE_MODEL_PARAMS = 100_000_000
SHARD_BYTES = 2 * GiB


class PreparedAssets(BaseModel):
    model: str
    tokenizer: str
    dataset: str
    """The preference pairs."""
    derived: dict[str, str] = {}
    """Form -> folder of the rows other methods train on, derived from the pairs (bench/assets/method_data.py)."""

    def dataset_for(self, form: str) -> str:
        """The folder of the rows in `form` (bench/matrix/methods.py DataForm)."""
        if form == "pairs":
            return self.dataset
        if form not in self.derived:
            raise ValueError(f"no {form} dataset was prepared (prepared: pairs, {', '.join(self.derived) or 'none'})")
        return self.derived[form]


def _local_or_hub(source: str, folder: Path) -> str:
    """A path under `folder` when one exists there, else the name as given (a hub id)."""
    try:
        local = inside_folder(folder, source)
    except ValueError:
        return source
    return str(local) if local.exists() else source


def workload_fingerprint(workload: Workload) -> str:
    blob = workload.model_dump_json()
    if workload.model.config_file is not None:
        blob += workload.model.config_file.read_text(encoding="utf-8")
    data = _local_or_hub(workload.dataset.source, scenarios_dir()) if workload.dataset.source else ""
    for path in sorted(Path(data).glob("*")) if data and Path(data).is_dir() else []:
        blob += hashlib.sha256(path.read_bytes()).hexdigest()
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _prepare_dataset(workload: Workload, out: Path) -> None:
    from datasets import Dataset, load_dataset

    if workload.dataset.synthetic is not None:
        from bench.assets.synthetic_prefs import generate

        Dataset.from_list(generate(workload.dataset.synthetic, workload.train.max_length)).save_to_disk(str(out))
        return
    assert workload.dataset.source is not None
    source = _local_or_hub(workload.dataset.source, scenarios_dir())
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
        tokenizer_object=bpe,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        model_max_length=max(1024, workload.train.max_length),
    )
    tokenizer.save_pretrained(str(out))


def _build_random_model(workload: Workload, out: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    assert workload.model.config_file is not None
    config = AutoConfig.from_pretrained(str(workload.model.config_file.parent))
    if parameter_count(config) > LARGE_MODEL_PARAMS:
        write_random_checkpoint(config, out, workload.model.seed)
        return
    torch.manual_seed(workload.model.seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(str(out))


def meta_model(config: Any) -> Any:
    """The architecture with every tensor on the meta device: shapes and names, no memory."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def parameter_count(config: Any) -> int:
    return sum(p.numel() for p in meta_model(config).parameters())


def _random_tensor(name: str, shape: tuple[int, ...], std: float, dtype: Any, generator: Any) -> Any:
    import torch

    if len(shape) >= 2:
        return torch.empty(shape, dtype=dtype).normal_(0.0, std, generator=generator)
    if name.endswith("bias"):
        return torch.zeros(shape, dtype=dtype)
    return torch.ones(shape, dtype=dtype)  # norm weights


def write_random_checkpoint(
    config: Any, out: Path, seed: int, dtype_name: str = "bfloat16", shard_bytes: int = SHARD_BYTES
) -> None:
    """A sharded safetensors checkpoint of `config` with random weights, written tensor by tensor.

    Tied weights are written once (from_pretrained ties them again); non-persistent buffers (rotary tables) are
    rebuilt by the model at load. Persistent buffers are not written: none of the shipped architectures has one.
    """
    import torch
    from safetensors.torch import save_file

    dtype = getattr(torch, dtype_name)
    model = meta_model(config)
    parameters = {id(p) for p in model.parameters()}
    std = getattr(config, "initializer_range", None) or getattr(config, "init_std", 0.02)
    generator = torch.Generator().manual_seed(seed)
    out.mkdir(parents=True, exist_ok=True)

    groups: list[list[tuple[str, tuple[int, ...]]]] = [[]]
    group_bytes, seen = 0, set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in seen or id(tensor) not in parameters:
            continue
        seen.add(id(tensor))
        size = tensor.numel() * dtype.itemsize
        if groups[-1] and group_bytes + size > shard_bytes:
            groups.append([])
            group_bytes = 0
        groups[-1].append((name, tuple(tensor.shape)))
        group_bytes += size

    weight_map, total = {}, 0
    for index, group in enumerate(groups, start=1):
        filename = f"model-{index:05d}-of-{len(groups):05d}.safetensors"
        shard = {name: _random_tensor(name, shape, std, dtype, generator) for name, shape in group}
        save_file(shard, str(out / filename), metadata={"format": "pt"})
        total += sum(t.numel() * t.element_size() for t in shard.values())
        weight_map |= dict.fromkeys(shard, filename)
        del shard
    index_file = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index_file, indent=2))
    config.dtype = dtype
    config.save_pretrained(str(out))


def cell_dataset(dataset: str, folder: Path) -> str:
    """A folder that links the saved dataset's own files (its arrow shards, state.json, dataset_info.json) and
    nothing else, for one cell to load.

    `datasets` writes map() caches next to the files a dataset was loaded from: TRL's tokenized dataset and,
    with precompute_ref_log_probs, the reference log-probs, keyed by a hash of the (seeded, so identical) model.
    Loaded from the shared asset folder, a cell would reuse what an earlier cell wrote there and skip the
    reference pass: its time and memory would depend on what ran before. Loaded from its own folder, every cell
    starts cold, as a first run does, and the asset folder is never written. Idempotent (a resumed cell)."""
    source = Path(dataset)
    state = json.loads((source / "state.json").read_text(encoding="utf-8"))
    names = [entry["filename"] for entry in state["_data_files"]] + ["state.json", "dataset_info.json"]
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        link = folder / name
        if (source / name).exists() and not link.is_symlink():
            link.symlink_to((source / name).resolve())
    return str(folder)


def _derive_datasets(dataset_dir: Path, root: Path) -> dict[str, str]:
    """Every derived form of the pairs in `dataset_dir`, saved beside it (once)."""
    from datasets import Dataset, load_from_disk

    pairs = None
    derived = {}
    for form, rows_of in FORMS.items():
        out = root / f"dataset-{form}"
        if not (out / "state.json").is_file():
            pairs = pairs if pairs is not None else list(load_from_disk(str(dataset_dir)))
            Dataset.from_list(rows_of(pairs)).save_to_disk(str(out))
        derived[form] = str(out)
    return derived


def prepare(workload: Workload, build_dir: Path = BUILD_DIR) -> PreparedAssets:
    """Build (or reuse) the workload's assets and return where each one is."""
    root = build_dir / "assets" / f"{workload.name}-{workload_fingerprint(workload)}"
    manifest = root / MANIFEST
    if (assets := read_manifest(manifest)) is not None:
        if set(assets.derived) != set(FORMS):  # assets built before a form existed: add it
            assets = assets.model_copy(update={"derived": _derive_datasets(Path(assets.dataset), root)})
            write_whole(manifest, json.dumps(assets.model_dump(), indent=2))
        return assets
    root.mkdir(parents=True, exist_ok=True)
    dataset_dir = root / "dataset"
    _prepare_dataset(workload, dataset_dir)

    if workload.tokenizer.kind == "train_bpe":
        tokenizer = root / "tokenizer"
        _train_tokenizer(workload, dataset_dir, tokenizer)
        tokenizer_ref = str(tokenizer)
    else:
        tokenizer_ref = _local_or_hub(workload.tokenizer.source or workload.model.source or "", scenarios_dir())

    if workload.model.weights == "random":
        model = root / "model"
        _build_random_model(workload, model)
        model_ref = str(model)
    else:
        model_ref = _local_or_hub(workload.model.source or "", scenarios_dir())

    derived = _derive_datasets(dataset_dir, root)
    assets = PreparedAssets(model=model_ref, tokenizer=tokenizer_ref, dataset=str(dataset_dir), derived=derived)
    write_whole(manifest, json.dumps(assets.model_dump(), indent=2))  # last, whole: it says the rest is there
    return assets


def read_manifest(manifest: Path) -> PreparedAssets | None:
    """The assets a manifest lists; None when there is none or it does not read (a preparation cut short before
    the manifest was written whole): the assets are then prepared again, which gives the same bytes."""
    try:
        return PreparedAssets.model_validate_json(manifest.read_bytes())
    except FileNotFoundError:
        return None
    except ValidationError as exc:
        why = exc.errors()[0]["msg"]
    except OSError as exc:
        why = exc.strerror or str(exc)
    print(f"notice: {manifest} does not read ({why}): preparing the assets again", flush=True)
    return None
