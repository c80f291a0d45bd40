"""A run's records as one table for analysis elsewhere (pandas, DuckDB, a Hugging Face Hub dataset): one row per
trial, nested fields flattened into dotted columns (`metrics.tokens_per_s`), and the run's environment fingerprint
(env.json) in `env.*` columns on every row, so that rows of several runs stay comparable once concatenated.

    python -m bench export RUN --to parquet --output run.parquet
    python -m bench export RUN --to hub --output folder/     # data/<run>.parquet, env.json, README.md (dataset card)

Written with pyarrow (the lock's). A column whose values do not share one Arrow type (a field that is a number in
one record and text in another, lists of mixed items), or that Parquet cannot hold (an empty structure), is kept as
JSON text, so that every record is written.
"""

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from bench.report.compare import Run
from bench.results.layout import ENV_FILE
from bench.secrets import redact

ENV_PREFIX = "env"
RUN_COLUMN = "run"
HUB_DATA = "data"
CARD = "README.md"


def _flat(data: dict, prefix: str = "") -> dict[str, object]:
    """{"a": {"b": 1}, "c": {}} -> {"a.b": 1, "c": None}; lists stay values."""
    flat: dict[str, object] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat |= _flat(value, f"{name}.")
        else:
            flat[name] = None if value == {} else value
    return flat


def _parquet_type(kind: pa.DataType) -> bool:
    """Whether Parquet can hold `kind`: not a struct without fields, at any depth."""
    if pa.types.is_struct(kind):
        return kind.num_fields > 0 and all(_parquet_type(kind.field(i).type) for i in range(kind.num_fields))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _parquet_type(kind.value_type)
    return True


def records_frame(run: Run) -> pd.DataFrame:
    """One row per record: the record's fields flattened, the run's name, and env.json's fields as `env.*`."""
    env = _flat(run.env.model_dump(mode="json"), f"{ENV_PREFIX}.") if run.env is not None else {}
    rows = [{RUN_COLUMN: run.name} | _flat(r.model_dump(mode="json")) | env for r in run.records]
    return pd.DataFrame(rows)


def arrow_table(frame: pd.DataFrame) -> pa.Table:
    """The frame as an Arrow table; a column Arrow cannot type as one type becomes JSON text."""
    columns = {}
    for name in frame.columns:
        values = frame[name].tolist()
        try:
            array = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            array = None
        if array is None or not _parquet_type(array.type):
            array = pa.array([None if v is None else json.dumps(v, default=str) for v in values])
        columns[name] = array
    return pa.table(columns)


def write_parquet(run: Run, path: Path) -> int:
    """The run's records to one Parquet file (secrets redacted in every text); the number of rows."""
    table = arrow_table(records_frame(run).map(lambda v: redact(v) if isinstance(v, str) else v))
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return table.num_rows


def dataset_card(run: Run, parquet: str, rows: int) -> str:
    """README.md of a Hub dataset folder: the YAML header the Hub reads its files from, and what the columns are."""
    env = run.env
    versions = env.versions if env is not None else "unknown"
    hardware = env.hardware.summary if env is not None else "unknown"
    return "\n".join(
        [
            "---",
            "configs:",
            "- config_name: default",
            f"  data_files: {HUB_DATA}/*.parquet",
            "tags:",
            "- dpo-bench",
            "---",
            f"# dpo-bench results: run `{run.name}`",
            "",
            f"{rows} result records (one per cell trial) from `python -m bench export --to hub`, file `{parquet}`.",
            f"Hardware: {hardware}. Packages: {versions}.",
            "",
            "Columns: the result record's fields (bench/results/schema.py), nested fields "
            f"flattened with dots (`metrics.tokens_per_s`); `{RUN_COLUMN}` is the run's name; `{ENV_PREFIX}.*` is the "
            f"run's environment fingerprint ({ENV_FILE}, also beside this file), the same on every row.",
            "",
        ]
    )


def write_hub_folder(run: Run, folder: Path) -> list[Path]:
    """A folder `hf upload <repo> <folder> --repo-type dataset` takes as it is: the records as
    data/<run>.parquet, env.json, and a dataset card; the files written."""
    parquet = folder / HUB_DATA / f"{run.name}.parquet"
    rows = write_parquet(run, parquet)
    written = [parquet]
    if run.env is not None:
        (folder / ENV_FILE).write_text(redact(run.env.model_dump_json(indent=2)) + "\n", encoding="utf-8")
        written.append(folder / ENV_FILE)
    card = folder / CARD
    card.write_text(dataset_card(run, str(parquet.relative_to(folder)), rows), encoding="utf-8")
    return [*written, card]
