"""The estimator held against GPU memory other people measured and published (scenarios/published/memory.yaml, each
entry with its source), predicted through scenarios/published/setups.yaml (the model, the knobs each source states,
the assumptions where it states none). Nothing is fitted to a row: the rows test mechanisms.

A figure of memory is compared with the predicted figure of the same kind (peak_allocated: allocated; peak_reserved:
reserved; nvidia_smi and unspecified: the nvidia-smi figure). A `max_context` figure (the longest sequence that fit a
card) is compared with the longest sequence the estimator lets fit: the error is on that length; the memory error at
the published length goes into the ranges (bench/estimate/uncertainty.py)."""

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, model_validator

from bench.estimate import uncertainty
from bench.estimate.knobs import Knobs
from bench.matrix.axes import Backend, Init, Quant
from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.matrix.profiles import HardwareProfile, Workload
from bench.paths import SCENARIOS_DIR, scenarios_dir
from bench.units import GB, GiB

PUBLISHED_DIR = SCENARIOS_DIR / "published"
LIMIT = 0.15
"""Rows beyond this |error| carry a one-line reason."""


class LoraSetup(BaseModel):
    model_config = ConfigDict(extra="forbid")
    r: int
    targets: list[str]
    dropout: float = 0.0
    """The adapters' lora_dropout as the source's config sets it: above 0 PEFT saves a dropped copy of each adapted
    input and its mask (terms.lora_input_copies)."""


class RowSetup(BaseModel):
    """What a row changes from its entry's setup."""

    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    gpu: str | None = None
    init: Literal["full", "lora"] | None = None
    quant: Literal["none", "int8", "nf4"] | None = None
    lora: LoraSetup | None = None
    batch_size: int | None = None
    backend: Backend = Backend.SINGLE
    """How the run spread the model over its entry's `gpus` cards; `single`: one card (a replica per card under
    data parallelism is predicted as one card, its gradient all-reduce not counted)."""
    knobs: dict[str, Any] = {}
    reason: str | None = None
    comparable: bool = True
    """False only where the source itself says its figure is no training step of the stated setup
    (scenarios/published/ADMISSION.md): the row is shown with that quote and kept out of the ranges and the count."""
    source_reason: str | None = None
    """The source's own words that set the row aside; required when `comparable` is False."""

    @model_validator(mode="after")
    def _set_aside_by_the_source(self) -> "RowSetup":
        if not self.comparable and not self.source_reason:
            raise ValueError("a row set aside (comparable: false) needs source_reason: the source's own words")
        return self


class PublishedSetup(RowSetup):
    id: str
    seq_len: int | None = None
    assumptions: list[str] = []
    rows: list[RowSetup] = []

    def for_row(self, index: int) -> "PublishedSetup":
        row = self.rows[index] if index < len(self.rows) else RowSetup()
        merged = self.model_dump()
        for key, value in row.model_dump(exclude_unset=True).items():
            merged[key] = {**self.knobs, **value} if key == "knobs" else value
        return PublishedSetup.model_validate(merged)


class PublishedMemoryRow(BaseModel):
    source_id: str
    source: str
    label: str
    kind: str
    published: float
    """Bytes, or tokens for a max_context figure."""
    predicted: float | None
    error: float | None
    memory_error: float | None
    """(predicted - published) / published of memory: for max_context, the prediction at the published length
    against the card."""
    figure: str
    reason: str | None = None
    comparable: bool = True
    source_key: str = ""
    """The publishing project (ADMISSION.md: rows of one project are one source)."""
    error_kind: str = ""
    """The pool its memory error joins (bench/estimate/uncertainty.cell_kind): a CUDA device, the setup's kind and
    its backend's pool; the rows are of other trainers (mostly SFT) and go into DPO's pools, as tests of the same
    mechanisms."""

    @property
    def row_id(self) -> str:
        """Its id in bench/estimate/held_out.txt."""
        return f"published:{self.source_id}:{self.label}"


def published_dir() -> Path:
    """scenarios/published/ of the scenario folder in use."""
    return scenarios_dir() / "published"


class PublishedEntry(BaseModel):
    """What scenarios/published/ADMISSION.md requires of an entry: its source (the publishing project as
    `source_key`, the document and its address) and the source's own words for its settings and figures."""

    model_config = ConfigDict(extra="allow")
    id: str
    source_key: str
    source: str
    url: str
    quote: str | None = None
    table: str | None = None
    figures: list[dict[str, Any]]

    @model_validator(mode="after")
    def _quoted(self) -> "PublishedEntry":
        if not self.url.startswith("https://"):
            raise ValueError(f"published entry {self.id!r}: url must be an https:// address, got {self.url!r}")
        if not (self.quote or self.table):
            raise ValueError(f"published entry {self.id!r}: needs quote or table (the source's own words)")
        return self


def load_entries(folder: Path | None = None, name: str = "memory.yaml") -> list[dict[str, Any]]:
    """The entries of `name`, each checked against PublishedEntry."""
    raw = yaml.safe_load(((folder or published_dir()) / name).read_text(encoding="utf-8"))
    return [PublishedEntry.model_validate(entry).model_dump(exclude_unset=True) for entry in raw]


def load_setups(folder: Path | None = None) -> dict[str, PublishedSetup]:
    raw = yaml.safe_load(((folder or published_dir()) / "setups.yaml").read_text(encoding="utf-8"))
    return {s.id: s for s in (PublishedSetup.model_validate(item) for item in raw)}


def _workload(setup: PublishedSetup, seq_len: int) -> Workload:
    lora = setup.lora or LoraSetup(r=8, targets=["q_proj", "v_proj"])
    return Workload.model_validate(
        {
            "name": setup.id,
            "model": {"weights": "pretrained", "source": str(scenarios_dir() / (setup.model or ""))},
            "tokenizer": {"kind": "pretrained"},
            "dataset": {"synthetic": {}},
            "train": {
                "max_length": seq_len,
                "per_device_train_batch_size": setup.batch_size or 1,
                "steps": 2,
                "warmup_steps": 0,
                "gradient_checkpointing": bool(setup.knobs.get("gradient_checkpointing", True)),
            },
            "lora": {"r": lora.r, "alpha": 2 * lora.r, "target_modules": lora.targets, "dropout": lora.dropout},
        }
    )


def _profile(setup: PublishedSetup, memory_gib: float | None, world: int) -> HardwareProfile:
    return HardwareProfile.model_validate(
        {
            "name": f"{world}x{setup.gpu}",
            "gpu": setup.gpu,
            "device": "cuda",
            "device_count": world,
            "processes": world,
            "memory_per_device_gb": None if memory_gib is None else memory_gib * GiB / GB,
            "precision": "bf16",
            "image_flavor": "cuda",
            "workload": setup.id,
            "timeout_s": 60,
        }
    )


def _cell(setup: PublishedSetup) -> Cell:
    init = Init.TWO_MODELS if setup.init == "full" else Init.ONE_ADAPTER
    launcher = backend_spec(setup.backend).default_launcher
    return Cell(init=init, quant=Quant(setup.quant or "none"), backend=setup.backend, launcher=launcher)


def world_of(setup: PublishedSetup, entry: dict[str, Any]) -> int:
    """The cards one prediction spans: the entry's `gpus` where the row's backend spreads the model, else one."""
    return 1 if setup.backend == Backend.SINGLE else int(entry["gpus"])


def predict_setup(setup: PublishedSetup, seq_len: int, memory_gib: float | None = None, world: int = 1):
    """The estimator's Prediction for one published configuration at `seq_len` tokens per row, on `world` cards
    (each card's figures: every published figure here is per card)."""
    from bench.estimate.predict import predict_cell

    knobs = Knobs.model_validate({k: v for k, v in setup.knobs.items()})
    spreads = None  # a published row is predicted bare: its own error must not widen it
    return predict_cell(
        _cell(setup), _profile(setup, memory_gib, world), _workload(setup, seq_len), knobs=knobs, spreads=spreads
    )


FIGURE_OF_KIND = {
    "peak_allocated": "train_bytes",
    "peak_reserved": "reserved_bytes",
    "nvidia_smi": "nvidia_smi_bytes",
    "unspecified": "nvidia_smi_bytes",
    "max_context": "nvidia_smi_bytes",
}


def longest_fitting(setup: PublishedSetup, memory_gib: float, low: int = 16, high: int = 262_144) -> int:
    """The longest sequence whose predicted nvidia-smi figure fits `memory_gib` (bisection over tokens)."""
    limit = memory_gib * GiB
    if _smi(setup, low) > limit:
        return 0
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if _smi(setup, mid) <= limit else (low, mid)
    return low


def _smi(setup: PublishedSetup, seq_len: int) -> float:
    return predict_setup(setup, seq_len).nvidia_smi_bytes or 0.0


def _label(entry: dict[str, Any], figure: dict[str, Any]) -> str:
    if "setup" in figure:
        return str(figure["setup"])
    if figure.get("kind") == "max_context":
        return f"{figure['memory_gb']} GB card"
    return f"seq {figure.get('seq_len', entry.get('seq_len'))}"


def published_rows(folder: Path | None = None) -> list[PublishedMemoryRow]:
    setups = load_setups(folder)
    rows = []
    for entry in load_entries(folder):
        setup = setups.get(entry["id"])
        if setup is None:
            raise ValueError(f"{folder / 'setups.yaml'}: no setup for published entry {entry['id']!r}")
        for index, figure in enumerate(entry["figures"]):
            rows.append(_row(entry, figure, setup.for_row(index)))
    return rows


def _row(entry: dict[str, Any], figure: dict[str, Any], setup: PublishedSetup) -> PublishedMemoryRow:
    kind = figure["kind"]
    base = {"source_id": entry["id"], "source": entry["source"], "label": _label(entry, figure), "kind": kind}
    if kind == "max_context":
        memory = float(figure["memory_gb"])
        longest = longest_fitting(setup, memory)
        at_published = _smi(setup, int(figure["max_seq_len"]))
        error = (longest - figure["max_seq_len"]) / figure["max_seq_len"]
        row = PublishedMemoryRow(
            **base,
            published=float(figure["max_seq_len"]),
            predicted=float(longest),
            error=error,
            memory_error=(at_published - memory * GiB) / (memory * GiB),
            figure="longest sequence whose nvidia-smi figure fits",
        )
    else:
        published = figure["memory_gib"] * GiB if "memory_gib" in figure else figure["memory_gb"] * GB
        seq_len = int(figure.get("seq_len") or setup.seq_len or entry.get("seq_len") or 0)
        prediction = predict_setup(setup, seq_len, world=world_of(setup, entry))
        predicted = getattr(prediction, FIGURE_OF_KIND[kind])
        error = (predicted - published) / published
        row = PublishedMemoryRow(
            **base,
            published=published,
            predicted=predicted,
            error=error,
            memory_error=error,
            figure=FIGURE_OF_KIND[kind].removesuffix("_bytes"),
        )
    row.comparable = setup.comparable
    row.source_key = entry["source_key"]
    kind = uncertainty.setup_kind(setup.init != "full", (setup.quant or "none") != "none")
    row.error_kind = uncertainty.cell_kind("cuda", "cuda_allocated", setup.backend, "dpo", kind)
    if not setup.comparable:
        row.reason = setup.source_reason
    elif abs(row.error or 0.0) > LIMIT:
        row.reason = setup.reason
    return row


def to_markdown(rows: list[PublishedMemoryRow]) -> str:
    lines = [
        "| source | row | kind | published | predicted | error | reason (beyond 15 %) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        unit = (lambda v: f"{v:,.0f} tokens") if r.kind == "max_context" else (lambda v: f"{v / GiB:.1f} GiB")
        predicted = "—" if r.predicted is None else unit(r.predicted)
        err = "—" if r.error is None else f"{r.error:+.1%}"
        beyond = r.error is not None and abs(r.error) > LIMIT
        reason = (r.reason or "**no reason recorded**") if beyond or not r.comparable else ""
        reason = reason if r.comparable else f"not comparable: {reason}"
        lines.append(
            f"| {r.source_id} | {r.label} | {r.kind} ({r.figure}) | {unit(r.published)} | {predicted} | {err} "
            f"| {reason} |"
        )
    comparable = [r for r in rows if r.comparable]
    within = [r for r in comparable if r.error is not None and abs(r.error) <= LIMIT]
    lines += [
        "",
        f"{len(within)} of {len(comparable)} comparable published figures within {LIMIT:.0%}"
        f" ({len(rows) - len(comparable)} not comparable), from {len({r.source_key for r in rows})} sources;"
        f" {sum(1 for r in comparable if (r.memory_error or 0.0) < -LIMIT)} with memory predicted more than"
        f" {LIMIT:.0%} low.",
    ]
    return "\n".join(lines) + "\n"


def errors_by_kind(rows: list[PublishedMemoryRow], held_out: frozenset[str] = frozenset()) -> dict[str, list[float]]:
    """The comparable published rows' memory errors by pool, the held-out rows left out."""
    found: dict[str, list[float]] = {}
    for r in rows:
        if r.memory_error is not None and r.comparable and r.row_id not in held_out:
            found.setdefault(r.error_kind, []).append(r.memory_error)
    return found
