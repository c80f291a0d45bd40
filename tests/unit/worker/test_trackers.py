"""`--report-to` (bench/worker/trackers.py): the trackers reach every method's trainer arguments and exported recipes,
`none` loads no integration (no connection), and a tracker that is not installed is one line before any cell."""

import pytest
import yaml

from bench.advise.command import native_files
from bench.advise.launch_files import config_file, export_files
from bench.cli import main
from bench.matrix.axes import Method
from bench.matrix.plan import plan_for
from bench.matrix.profiles import load_profile, load_workload
from bench.worker import trackers
from bench.worker.spec import WorkerSpec
from bench.worker.trainer_args import trainer_arguments
from bench.worker.trainers import trainer_module
from tests.unit.worker.test_worker_build import spec_for


def with_trackers(*names: str):
    return spec_for().model_copy(update={"report_to": names})


def test_the_default_is_none_and_a_choice_reaches_every_methods_trainer_arguments():
    assert trainer_arguments(spec_for())["report_to"] == "none"
    spec = with_trackers("tensorboard")
    for method in (Method.DPO, Method.SFT, Method.KTO, Method.ORPO, Method.SIMPO):
        cell = spec.cell.model_copy(update={"method": method})
        other = WorkerSpec.from_plan(
            plan_for(cell, spec.profile, spec.workload), spec.assets, spec.out_dir, report_to=spec.report_to
        )
        assert trainer_module(method).arguments(other)["report_to"] == "tensorboard"
    assert trainer_arguments(with_trackers("wandb", "mlflow"))["report_to"] == ["wandb", "mlflow"]


def test_none_loads_no_reporting_integration_in_the_real_trainer_config():
    from transformers.integrations import get_reporting_integration_callbacks
    from trl import DPOConfig

    config = DPOConfig(**trainer_arguments(spec_for()))
    assert config.report_to in ([], "none", ["none"])
    assert get_reporting_integration_callbacks(config.report_to) == []


def test_the_flag_takes_known_trackers_only_and_none_alone():
    assert trackers.parse_report_to("tensorboard, wandb,tensorboard") == ("tensorboard", "wandb")
    with pytest.raises(ValueError, match=r"--report-to: unknown tracker 'comet'; use wandb\|mlflow\|tensorboard"):
        trackers.parse_report_to("comet")
    with pytest.raises(ValueError, match="none cannot be combined with wandb"):
        trackers.parse_report_to("none,wandb")
    with pytest.raises(ValueError, match="unknown tracker"):
        trackers.parse_report_to(" , ")


def test_what_is_installed_agrees_with_transformers_own_checks():
    from transformers.integrations import (
        is_mlflow_available,
        is_tensorboard_available,
        is_trackio_available,
        is_wandb_available,
    )

    available = {
        "wandb": is_wandb_available(),
        "mlflow": is_mlflow_available(),
        "tensorboard": is_tensorboard_available(),
        "trackio": is_trackio_available(),
    }
    assert trackers.missing(tuple(available)) == [name for name, there in available.items() if not there]
    assert trackers.missing(("none",)) == []


def test_run_refuses_an_uninstalled_tracker_in_one_line_before_the_run_folder(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(trackers.MODULES, "tensorboard", ("no_such_module_for_this_test",))
    code = main(["--results", str(tmp_path), "run", "--filter", "two_models-none-single", "--report-to", "tensorboard"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "--report-to tensorboard: not installed in this venv" in err[0] and "pip install" in err[0]
    assert not any(tmp_path.iterdir())


def test_run_rejects_an_unknown_tracker_naming_the_allowed_ones(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--report-to", "comet"])
    assert exit_info.value.code == 2
    assert "unknown tracker 'comet'; use wandb|mlflow|tensorboard|trackio|none" in capsys.readouterr().err


@pytest.mark.parametrize("report_to", [("none",), ("wandb",), ("tensorboard", "mlflow")])
def test_an_exported_recipe_reports_where_asked(report_to):
    profile, workload = load_profile("cpu"), load_workload("tiny")
    cell = spec_for().cell
    files = export_files(cell, profile, workload, "m", native_files(cell, profile), report_to=report_to)
    assert yaml.safe_load(files[config_file(cell.method)])["report_to"] == trackers.trainer_value(report_to)
