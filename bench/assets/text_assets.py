"""A workload's text assets: its preference pairs, the byte-level BPE tokenizer trained on them, and the rows every
other method trains on, derived from the pairs. Small (a few MiB), deterministic, and what `carry-assets` builds on a
connected machine for a GPU box (bench/assets/carried.py); the model is not among them."""

from pathlib import Path

from bench.assets.method_data import FORMS
from bench.matrix.profiles import Workload, inside_folder
from bench.paths import scenarios_dir

SPECIAL_TOKENS = ["<pad>", "<s>", "</s>"]
DATASET = "dataset"
TOKENIZER = "tokenizer"


def derived_folder(form: str) -> str:
    """The folder, in a workload's asset folder, of the rows in `form` (bench/assets/method_data.py FORMS)."""
    return f"dataset-{form}"


def local_or_hub(source: str, folder: Path) -> str:
    """A path under `folder` when one exists there, else the name as given (a hub id)."""
    try:
        local = inside_folder(folder, source)
    except ValueError:
        return source
    return str(local) if local.exists() else source


def build_dataset(workload: Workload, out: Path) -> None:
    from datasets import Dataset, load_dataset

    if workload.dataset.synthetic is not None:
        from bench.assets.synthetic_prefs import generate

        Dataset.from_list(generate(workload.dataset.synthetic, workload.train.max_length)).save_to_disk(str(out))
        return
    assert workload.dataset.source is not None
    source = local_or_hub(workload.dataset.source, scenarios_dir())
    dataset = load_dataset(source, split=workload.dataset.split)
    missing = {"prompt", "chosen", "rejected"} - set(dataset.column_names)
    if missing:
        raise ValueError(f"dataset {workload.dataset.source} lacks columns {sorted(missing)}")
    dataset.save_to_disk(str(out))


def train_tokenizer(workload: Workload, dataset_dir: Path, out: Path) -> None:
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


def derive_datasets(dataset_dir: Path, root: Path) -> dict[str, str]:
    """Every derived form of the pairs in `dataset_dir`, saved beside it (once)."""
    from datasets import Dataset, load_from_disk

    pairs = None
    derived = {}
    for form, rows_of in FORMS.items():
        out = root / derived_folder(form)
        if not (out / "state.json").is_file():
            pairs = pairs if pairs is not None else list(load_from_disk(str(dataset_dir)))
            Dataset.from_list(rows_of(pairs)).save_to_disk(str(out))
        derived[form] = str(out)
    return derived
