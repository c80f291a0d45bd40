"""Prepare a workload's model, tokenizer and dataset on disk, once, so every cell loads them as it would a hub
checkpoint: `from_pretrained(folder)` and `load_from_disk(folder)`.

The text assets (text_assets.py) come from a carried-assets folder when one holds them (carried.py), else are built
here. Random-weight models are built from the shipped config.json with a fixed seed, so a rebuild gives the same
bytes: small ones saved with save_pretrained, those above LARGE_MODEL_PARAMS written tensor by tensor in bf16 on the
CPU or a GPU (random_weights.py), so a 70B checkpoint needs one shard of host memory and loads (and quantizes) like a
hub checkpoint. One preparer at a time per asset folder (a lock file in it): a second waits, then finds the manifest."""

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from pydantic import BaseModel, ValidationError

from bench.assets import carried as carried_assets
from bench.assets.fingerprint import folder_name, workload_fingerprint
from bench.assets.method_data import FORMS
from bench.assets.random_weights import meta_model, parameter_count, write_random_checkpoint
from bench.assets.text_assets import DATASET, TOKENIZER, build_dataset, derive_datasets, local_or_hub, train_tokenizer
from bench.files import write_whole
from bench.matrix.profiles import Workload
from bench.paths import BUILD_DIR, scenarios_dir

__all__ = ["meta_model", "parameter_count", "workload_fingerprint", "write_random_checkpoint"]

MANIFEST = "assets.json"
"""In a workload's asset folder, written last: where each asset is (PreparedAssets)."""
LOCK = ".lock"
LARGE_MODEL_PARAMS = 100_000_000
Note = Callable[[str], None]
_PROCESS_RNG = threading.Lock()
"""torch's CPU generator is the process's: one small model is seeded and built at a time."""


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


def asset_folder(workload: Workload, build_dir: Path = BUILD_DIR) -> Path:
    return build_dir / "assets" / folder_name(workload)


def prepare(
    workload: Workload,
    build_dir: Path = BUILD_DIR,
    device: str = "cpu",
    carried: Path | None = None,
    note: Note = print,
    model_in_child: bool | None = None,
) -> PreparedAssets:
    """Build (or reuse) the workload's assets and return where each one is.

    `device`: where large random weights are generated (cpu, cuda, ...; the same bytes on each). `model_in_child`:
    whether they are generated in a process of their own (None: off the CPU, so that this process never holds a
    device context). `carried`: the carried-assets folder (default: carried.carry_folder()). `note`: a line on
    what was made."""
    root = asset_folder(workload, build_dir)
    with _locked(root):
        manifest = root / MANIFEST
        if (assets := read_manifest(manifest)) is not None:
            if set(assets.derived) != set(FORMS):  # assets built before a form existed: add it
                assets = assets.model_copy(update={"derived": derive_datasets(Path(assets.dataset), root)})
                write_whole(manifest, json.dumps(assets.model_dump(), indent=2))
            return assets
        started = time.monotonic()
        text, how_text = _text_assets(workload, root, carried or carried_assets.carry_folder(), note)
        text_s = time.monotonic() - started
        in_child = device != "cpu" if model_in_child is None else model_in_child
        model_ref, how_model = _model(workload, root, device, in_child, note)
        assets = PreparedAssets(model=model_ref, **text)
        write_whole(manifest, json.dumps(assets.model_dump(), indent=2))  # last, whole: it says the rest is there
        took = time.monotonic() - started
        note(f"assets of {workload.name} ready in {took:.1f} s: text {how_text} {text_s:.1f} s, model {how_model} "
             f"{took - text_s:.1f} s")  # fmt: skip
        return assets


def prepare_text(workload: Workload, build_dir: Path = BUILD_DIR, note: Note = print) -> PreparedAssets:
    """The workload's text assets alone, for a caller that builds the model itself from its config.json (a trace
    under fake tensors, bench/estimate/trace/fake_step.py): its prepared asset folder's when there is one, else
    carried or built into a folder of their own (the asset folder's manifest says its model is there too). `model`
    names the config's folder (a pretrained workload: its source)."""
    config = workload.model.config_file
    model = str(config.parent) if config is not None else local_or_hub(workload.model.source or "", scenarios_dir())
    if (assets := read_manifest(asset_folder(workload, build_dir) / MANIFEST)) is None:
        root = build_dir / "text-assets" / folder_name(workload)
        with _locked(root):
            if (assets := read_manifest(root / MANIFEST)) is None:
                text, _ = _text_assets(workload, root, carried_assets.carry_folder(), note)
                assets = PreparedAssets(model=model, **text)
                write_whole(root / MANIFEST, json.dumps(assets.model_dump(), indent=2))
    return assets.model_copy(update={"model": model})


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """Hold the asset folder's lock (a file system without flock, e.g. Lustre mounted without it: no lock)."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / LOCK).open("a") as handle:
        with contextlib.suppress(OSError):
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _text_assets(workload: Workload, root: Path, carried: Path, note: Note) -> tuple[dict, str]:
    """The dataset, tokenizer and derived folders (PreparedAssets' fields), carried or built, and which."""
    dataset_dir = root / DATASET
    trains_tokenizer = workload.tokenizer.kind == "train_bpe"
    how = "carried" if carried_assets.take(workload, root, carried, note) else "built"
    if how == "built":
        build_dataset(workload, dataset_dir)
        if trains_tokenizer:
            train_tokenizer(workload, dataset_dir, root / TOKENIZER)
    if trains_tokenizer:
        tokenizer_ref = str(root / TOKENIZER)
    else:
        tokenizer_ref = local_or_hub(workload.tokenizer.source or workload.model.source or "", scenarios_dir())
    derived = derive_datasets(dataset_dir, root)
    return {"tokenizer": tokenizer_ref, "dataset": str(dataset_dir), "derived": derived}, how


def _model(workload: Workload, root: Path, device: str, in_child: bool, note: Note) -> tuple[str, str]:
    """The model's reference (a folder made here, or the pretrained source) and how it was made."""
    if workload.model.weights != "random":
        return local_or_hub(workload.model.source or "", scenarios_dir()), "pretrained"
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    assert workload.model.config_file is not None
    out, config_dir = root / "model", workload.model.config_file.parent
    config = AutoConfig.from_pretrained(str(config_dir))
    if (count := parameter_count(config)) <= LARGE_MODEL_PARAMS:
        with _PROCESS_RNG, torch.random.fork_rng(devices=[]):  # the process's own RNG state is kept
            torch.manual_seed(workload.model.seed)
            AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(str(out))
        return str(out), "random fp32"
    note(f"{workload.name}: writing random weights ({count / 1e9:.2f}B parameters, bf16) on {device} ...")
    for where in dict.fromkeys([device, "cpu"]):
        try:
            if in_child:
                _in_child(config_dir, out, workload.model.seed, where)
            else:
                write_random_checkpoint(config, out, workload.model.seed, where)
            return str(out), f"random on {where}"
        except Exception as exc:  # any failure off the CPU: the CPU makes the same bytes
            if where == "cpu":
                raise
            note(f"notice: {workload.name}: random weights on {where} failed ({_last_line(exc)}): generating them "
                 "on the CPU (the same bytes)")  # fmt: skip
    raise AssertionError("unreachable: the CPU's attempt returns or raises")


def _in_child(config_dir: Path, out: Path, seed: int, device: str) -> None:
    """bench/assets/random_weights.py in a process of its own: this one never holds the device's context. Its
    interruption (a signal) is not a failure to fall back from: it is raised as KeyboardInterrupt."""
    from bench.isolation.lifeline import die_with_parent

    parent = os.getpid()
    argv = [sys.executable, "-m", "bench.assets.random_weights", str(config_dir), str(out), "--seed", str(seed)]
    child = subprocess.run(
        [*argv, "--device", device],
        capture_output=True,
        text=True,
        preexec_fn=lambda: die_with_parent(parent),
    )
    if child.returncode < 0 or child.returncode == 130:
        raise KeyboardInterrupt
    if child.returncode:
        lines = [line.strip() for line in child.stderr.splitlines() if line.strip()] or ["no message"]
        raise RuntimeError(f"{' '.join(argv[1:3])} on {device} exited {child.returncode}: {lines[-1]}")


def _last_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


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
