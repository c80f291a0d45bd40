"""Text assets carried to a machine that should not spend its time (or has no network) making them.

`python -m bench carry-assets` (`make carry-assets`) builds each workload's dataset, trained tokenizer and derived
rows (no model: random weights are GBs, and a GPU makes them in seconds) and packs them into `<carry
folder>/<workload>-<fingerprint>/assets.tar.xz`, its `carried.json` written last. `prepare` unpacks them only when
that file names the same fingerprint and code and every sha256 matches, so a stale carried asset is never used. The
carry folder: $BENCH_CARRIED_ASSETS, else build/carried-assets/ (ignored by git; the device tool's `carry` takes it)."""

import hashlib
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

from pydantic import BaseModel, ValidationError

from bench.assets.fingerprint import folder_name, workload_fingerprint
from bench.assets.method_data import FORMS
from bench.assets.text_assets import DATASET, TOKENIZER, build_dataset, derive_datasets, derived_folder, train_tokenizer
from bench.files import write_whole
from bench.matrix.profiles import Workload
from bench.paths import BUILD_DIR
from bench.units import bytes_text

CARRY_ENV = "BENCH_CARRIED_ASSETS"
DEFAULT_FOLDER = BUILD_DIR / "carried-assets"
MANIFEST = "carried.json"
ARCHIVE = "assets.tar.xz"
CODE = ("text_assets.py", "synthetic_prefs.py", "method_data.py")
"""The modules that make the text assets: carried assets made by other code are not taken."""


class CarriedManifest(BaseModel):
    workload: str
    fingerprint: str
    code: str
    """code_fingerprint() of the machine that made them."""
    archive: str
    """sha256 of ARCHIVE."""
    files: dict[str, str]
    """Path in the archive (and then in the asset folder) -> sha256 of its bytes."""
    versions: dict[str, str] = {}
    """The datasets and tokenizers that made them (information: a box's other versions read them)."""


def carry_folder() -> Path:
    return Path(os.environ.get(CARRY_ENV) or DEFAULT_FOLDER)


def code_fingerprint() -> str:
    here = Path(__file__).parent
    return hashlib.sha256(b"".join((here / name).read_bytes() for name in CODE)).hexdigest()[:12]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _file_sha256(path: Path) -> str | None:
    return _sha256(path) if path.is_file() else None


def _hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): _sha256(p) for p in sorted(folder.rglob("*")) if p.is_file()}


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in ("datasets", "tokenizers")}


def carry(workload: Workload, folder: Path) -> Path:
    """Build the workload's text assets and pack them into `folder`/<workload>-<fingerprint>/ (replacing what is
    there)."""
    final = folder / folder_name(workload)
    partial = final.with_name(final.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="carry-") as scratch:
        built = Path(scratch)
        build_dataset(workload, built / DATASET)
        if workload.tokenizer.kind == "train_bpe":
            train_tokenizer(workload, built / DATASET, built / TOKENIZER)
        derive_datasets(built / DATASET, built)
        with tarfile.open(partial / ARCHIVE, "w:xz") as tar:
            for top in sorted(built.iterdir()):
                tar.add(top, arcname=top.name)
        files = _hashes(built)
    manifest = CarriedManifest(
        workload=workload.name,
        fingerprint=workload_fingerprint(workload),
        code=code_fingerprint(),
        archive=_sha256(partial / ARCHIVE),
        files=files,
        versions=_versions(),
    )
    write_whole(partial / MANIFEST, manifest.model_dump_json(indent=2))
    shutil.rmtree(final, ignore_errors=True)
    partial.rename(final)
    return final


def _refusal(manifest: CarriedManifest, workload: Workload, archive: Path) -> str | None:
    """Why the carried assets of this manifest are not the workload's, or None."""
    if manifest.fingerprint != workload_fingerprint(workload):
        return f"made for fingerprint {manifest.fingerprint}"
    if manifest.code != code_fingerprint():
        return f"made by other code ({', '.join(CODE)}: {manifest.code}, here {code_fingerprint()})"
    wanted = {DATASET, *(derived_folder(form) for form in FORMS)} | (
        {TOKENIZER} if workload.tokenizer.kind == "train_bpe" else set()
    )
    missing = wanted - {name.split("/")[0] for name in manifest.files}
    if missing:
        return f"without {', '.join(sorted(missing))}"
    if not archive.is_file() or _sha256(archive) != manifest.archive:
        return f"{archive.name} is not the archive carried.json names"
    return None


def _manifest(workload: Workload, folder: Path, note) -> CarriedManifest | None:
    """The carried.json of the workload's folder under `folder`; None (a line to `note` where that says more than
    "nothing was carried") when there is none or it does not read."""
    manifest_file = folder / folder_name(workload) / MANIFEST
    if not manifest_file.is_file():
        others = sorted(p.name for p in folder.glob(f"{workload.name}-*") if (p / MANIFEST).is_file())
        if others:
            note(f"notice: carried assets {', '.join(others)} are not {manifest_file.parent.name}: not used")
        return None
    try:
        return CarriedManifest.model_validate_json(manifest_file.read_bytes())
    except (ValidationError, OSError) as exc:
        note(f"notice: {manifest_file} does not read ({type(exc).__name__}): the carried assets are not used")
        return None


def take(workload: Workload, root: Path, folder: Path, note=print) -> bool:
    """Unpack the workload's carried text assets from `folder` into its asset folder `root`, once checked; False
    when there are none for this workload, or they are not its own (a line to `note` says why)."""
    manifest = _manifest(workload, folder, note)
    if manifest is None:
        return False
    source = folder / folder_name(workload)
    reason = _refusal(manifest, workload, source / ARCHIVE)
    if reason is None:
        tops = sorted({name.split("/")[0] for name in manifest.files})
        for top in tops:
            shutil.rmtree(root / top, ignore_errors=True)
        with tarfile.open(source / ARCHIVE, "r:xz") as tar:
            tar.extractall(root, filter="data")
        changed = sorted(name for name, digest in manifest.files.items() if _file_sha256(root / name) != digest)
        if not changed:
            return True
        reason = f"unpacked with {changed[0]} other than carried.json lists"
        for top in tops:
            shutil.rmtree(root / top, ignore_errors=True)
    note(f"notice: carried assets {source} are {reason}: not used, preparing them here")
    return False


def carry_all(workloads: list[Workload], folder: Path, note=print) -> list[Path]:
    """Carry each workload's text assets into `folder`, a line per workload with its size."""
    made = []
    for workload in workloads:
        path = carry(workload, folder)
        note(f"carried {workload.name}: {path} ({bytes_text(folder_bytes(path), 'MiB', 1)})")
        made.append(path)
    note(f"{len(made)} workload(s) carried in {folder}: {bytes_text(sum(map(folder_bytes, made)), 'MiB', 1)}")
    return made


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
