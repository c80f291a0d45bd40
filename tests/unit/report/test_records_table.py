"""`export --to parquet|hub` (bench/report/records_table.py): every record with the run's env fingerprint, written
with pyarrow and read back with pandas."""

import pandas as pd
import pytest
import yaml

from bench.cli import main
from bench.report.compare import Run, load_run
from bench.report.records_table import arrow_table, records_frame, write_hub_folder, write_parquet
from bench.results.env_schema import EnvFingerprint
from bench.results.schema import Status
from bench.results.store import append_result
from bench.results.tracked import tracked_results
from tests.unit.report.test_compare import rec

TOKEN = "hf_" + "a" * 34


def env() -> EnvFingerprint:
    return EnvFingerprint(hardware_profile="cpu", packages={"trl": "1.15.0", "torch": "2.13.0+cpu"}, git_sha="abc")


def run_of(*records) -> Run:
    return Run(name="r1", records=list(records), env=env())


def test_every_record_is_a_row_with_flat_columns_and_the_env_on_each_row(tmp_path):
    run = run_of(
        rec("two_models-none-single", tokens=1000.0, trial=0),
        rec("two_models-none-single", tokens=1100.0, trial=1),
        rec("one_adapter-nf4-ddp", Status.ERROR, message=f"boom with {TOKEN}"),
    )
    assert write_parquet(run, tmp_path / "r.parquet") == 3
    back = pd.read_parquet(tmp_path / "r.parquet")
    assert len(back) == 3 and list(back["cell_id"]) == [r.cell_id for r in run.records]
    assert list(back["metrics.tokens_per_s"][:2]) == [1000.0, 1100.0] and pd.isna(back["metrics.tokens_per_s"][2])
    assert set(back["env.packages.trl"]) == {"1.15.0"} and set(back["env.git_sha"]) == {"abc"}
    assert set(back["run"]) == {"r1"} and list(back["status"]) == ["ok", "ok", "error"]
    assert TOKEN not in back["message"].iloc[2] and "boom with" in back["message"].iloc[2]


def test_a_column_arrow_cannot_type_as_one_is_kept_as_json_text():
    frame = records_frame(run_of(rec("two_models-none-single")))
    frame["mixed"] = [[1, "a"]]
    frame["empty"] = [{}]
    table = arrow_table(frame)
    assert table.column("mixed").to_pylist() == ['[1, "a"]'] and table.column("empty").to_pylist() == ["{}"]


def test_a_hub_folder_has_the_data_its_card_names_and_the_env(tmp_path):
    written = write_hub_folder(run_of(rec("two_models-none-single")), tmp_path / "ds")
    assert [p.relative_to(tmp_path / "ds").as_posix() for p in written] == ["data/r1.parquet", "env.json", "README.md"]
    card = (tmp_path / "ds" / "README.md").read_text()
    header = yaml.safe_load(card.split("---")[1])
    assert header["configs"][0]["data_files"] == "data/*.parquet"
    assert EnvFingerprint.model_validate_json((tmp_path / "ds" / "env.json").read_text()).packages["trl"] == "1.15.0"
    assert len(pd.read_parquet(tmp_path / "ds" / "data")) == 1


def test_a_committed_run_exports_whole_through_the_command(tmp_path, capsys):
    runs = sorted(p.parent for p in (tracked_results() / "cpu").glob("*/results.jsonl"))
    assert runs, "no committed cpu run"
    run_dir = runs[-1]
    assert main(["export", str(run_dir), "--to", "parquet", "--output", str(tmp_path / "x.parquet")]) == 0
    records = load_run(run_dir).records
    back = pd.read_parquet(tmp_path / "x.parquet")
    assert len(back) == len(records) and list(back["cell_id"]) == [r.cell_id for r in records]
    assert f"wrote {len(records)} records" in capsys.readouterr().out


def test_export_to_needs_a_run(tmp_path, capsys):
    (tmp_path / "cpu" / "r").mkdir(parents=True)
    append_result(tmp_path / "cpu" / "r", rec("two_models-none-single"))
    assert main(["export", str(tmp_path / "cpu" / "r"), "--to", "hub", "--output", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "data" / "r.parquet").is_file() and not (tmp_path / "o" / "env.json").exists()
    with pytest.raises(SystemExit):
        main(["export", str(tmp_path / "cpu" / "r"), "--to", "csv"])
