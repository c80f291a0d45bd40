"""validate on the committed results: the table is produced, every `ok` DPO cell of both CPU workloads (tiny,
measured by RSS; small, by its cgroup) on every CPU (AMD EPYC Zen 4 and Zen 5; Intel Xeon with AMX; each cell
predicted with its run's bf16 matmul kernels) is within 15 % but the named exceptions, with no model-memory constant
fitted, every fits/OOM verdict on the budgeted profiles is on the side of the outcome (but one measured both ways),
the offload backends' one-rank cells are validated, and the held-out verdicts really leave each cell's records out
of its baselines' fit."""

from pathlib import Path

import pytest

from bench.estimate.calibrate import calibration_records, fit, fit_records, measured_records
from bench.estimate.predict import load_calibration
from bench.estimate.validate import (
    Row,
    _leave_one_cell_out,
    method_summary,
    plus_one_rank_summary,
    summary,
    to_markdown,
    validate,
    validation_line,
    workload_summary,
)
from bench.paths import PROJECT_ROOT
from bench.results.cpu_features import CpuFeatures
from bench.results.env import write_env
from bench.results.env_schema import EnvFingerprint, HostHardware
from bench.results.layout import RESULTS_FILE
from bench.results.schema import ResultRecord, Status
from bench.results.store import append_result, load_results
from tests.unit.estimate.fit_tolerance import mismatches

GOAL = 0.15
"""Issue 26: every `ok` cell of tiny and small within 15 %, no constant fitted per workload."""
ZEN5 = "results/cpu/20261128-183342"
OUTLIERS = [
    (ZEN5, "two_models-none-zero2"),
    (ZEN5, "two_models-none-zero2+newcomer"),
    (ZEN5, "one_adapter-none-zero3_offload"),
    (ZEN5, "one_adapter-none-zero3_offload+1rank"),
    (ZEN5, "two_adapters-none-zero2_offload+1rank"),
    (ZEN5, "two_models-none-zero2_offload"),
    (ZEN5, "one_adapter-none-zero3_offload_param"),
    (ZEN5, "two_adapters-none-zero3_offload_param"),
    ("results/cpu/20261127-014330", "two_adapters-none-zero2_offload+1rank"),
]
"""The DPO cells over the goal (docs/evidence/cpus.md). On the EPYC Zen 5 (a fresh clone's make bench,
measured elsewhere: its README) eight ZeRO cells at -15.1 ... -17.5 %: every cell of that run measures 6.7-20.8 MiB
(median 13.5) above the same cells measured at the same commit on the Zen 4 here (results/cpu/zen4-head-20261128,
within -5.0 ... +13.0 %), about half while the trainer is built and half in training, the same on every backend; the
ZeRO cells cross 15 % because theirs are the smallest predictions (79-88 MiB). Not traced to a term. On the Xeon
95.5 MiB where the same cell measured 80.4 on EPYC and its siblings of the same run 82-89 (-16.9 %): a tiny cell's
~80 MiB, three quarters process terms, moves by up to 16 MiB between runs of the same program. (The EPYC Zen 4's
one_adapter-none-zero3_offload_param+1rank, +15.4 % in 20261128-064850, is +8.3 % in zen4-head-20261128, which
replaced it; the EPYC run 20261124-033417's two_adapters-none-zero2_offload, +20.9 %, was replaced by
20261128-064850's record of that CPU.)"""
"""The one run where the goal is not met (tiny, RSS; up to +20.6 %): its library baseline is 92 MiB higher than the
earlier runs' and its model memory 7-11 MiB lower for the same program (two_models-none-fsdp, which runs as DDP:
baseline 489.2 MiB, model memory 89.5 MiB in results/cpu/20261123-141125; as two_models-none-fsdp_offload, also DDP,
581.7 and 78.8 MiB here), more than the CPU process terms allow for at ~80 MiB."""

WRONG_VERDICTS = [
    "orpo-full-none-zero2_offload",
    "orpo-full-none-zero3",
    "simpo-full-none-zero2_offload",
    "simpo-full-none-zero3",
]
"""Budgeted cells read `fits` or `likely_fits` that were OOM-killed (results/cpu-budget/20261128-072024, small at
0.75 GiB): predicted 669-742 MiB against 768. SimPO's and ORPO's full fine-tunes on small measure 8-11 % above their
predictions on single and ddp (about one [rows, length, vocabulary] logits unit, 64 MiB, beyond the units measured on
adapter cells; not traced). SFT's zero2_offload and zero3 cells read likely_oom and were OOM-killed."""


# Module fixtures, not functools.cache: make mutants forks each mutant's test run from a process that has run every
# test once, and a cached result would be the unmutated code's.
@pytest.fixture(scope="module")
def committed() -> tuple[list[Row], int]:
    return validate()


@pytest.fixture(scope="module")
def folds():
    from bench.results.tracked import tracked_results

    return _leave_one_cell_out(tracked_results())


def test_validate_committed_results(committed):
    rows, skipped = committed
    table = to_markdown(rows, skipped)
    assert "| source | hardware | cell |" in table
    budgeted = [r for r in rows if r.hardware in ("cpu-budget", "cpu-budget-4g") and r.verdict_measured is not None]
    assert {r.hardware for r in budgeted} == {"cpu-budget", "cpu-budget-4g"}
    # a wrong verdict is tolerated only on a cell measured both ways (OOM-killed in one run, ran in another), or named
    wrong = [r for r in budgeted if r.held_out_verdict_right is False]
    assert [r.cell_id for r in wrong if not r.measured_both_ways] == WRONG_VERDICTS
    # likely_* is the edge, not an escape: most verdicts are decisive (fits or oom)
    assert sum(r.verdict_held_out in ("likely_fits", "likely_oom") for r in budgeted) <= len(budgeted) // 8
    dpo = [r for r in rows if r.method == "dpo" and r.status == "ok" and r.error is not None and r.device == "cpu"]
    assert {r.workload for r in dpo} == {"tiny", "small"}
    assert {r.hardware for r in dpo} >= {"cpu", "cpu-budget", "cpu-budget-4g"}
    over = [(r.source, r.cell_id) for r in dpo if abs(r.error) > GOAL]
    assert over == OUTLIERS
    # bounded by what it is today, so that a change making it worse fails
    assert max(abs(r.error) for r in dpo) <= 0.21
    assert summary(rows)["max_abs_error_ok"] == max(abs(r.error) for r in dpo)


def test_the_gpu_cells_are_validated_on_all_three_figures(committed):
    """The first GPU runs (one H200; phi-2 under a 24 GB cap): allocated, reserved and NVML each against its
    prediction, the emulated A10's OOM against its verdict, and the errors bounded by what they are today."""
    rows, skipped = committed
    gpu = [r for r in rows if r.device == "cuda"]
    ok = [r for r in gpu if r.status == "ok"]
    assert len(ok) == 7 and all(r.reserved[0] and r.nvml[0] and r.reserved[1] and r.nvml[1] for r in ok)
    oom = [r for r in gpu if r.status == "oom"]
    # the setup this project started from (phi-2, two full models, one A10, 2,048 tokens): measured OOM, read OOM
    assert [(r.hardware, r.cell_id, r.verdict_measured) for r in oom] == [("1xA10", "two_models-none-single", "oom")]
    assert oom[0].verdict_held_out in ("oom", "likely_oom")  # the range of the full pool decides which
    assert max(abs(r.error) for r in ok) <= 0.29
    table = to_markdown(rows, skipped)
    assert "| results/1xH200/20261126-182033 | kto-two_models-none-single | ok |" in table


def test_the_offload_backends_on_one_rank_are_validated(committed):
    rows, _ = committed
    one_rank = [
        r for r in rows if r.method == "dpo" and "+1rank" in r.cell_id and r.status == "ok" and r.error is not None
    ]
    # results/cpu/20261124-033417 (tiny) and results/cpu-budget-4g/20261124-014241 (small)
    assert {r.hardware for r in one_rank} == {"cpu", "cpu-budget-4g"}
    assert {b for r in one_rank for b in ("zero2_offload", "zero3_offload_param") if b in r.cell_id} == {
        "zero2_offload",
        "zero3_offload_param",
    }
    s = plus_one_rank_summary(rows)
    assert s["ok_cells"] == len(one_rank) and s["min_error_ok"] == min(r.error for r in one_rank)
    over = [(r.source, r.cell_id) for r in one_rank if abs(r.error) > GOAL]
    assert over == [o for o in OUTLIERS if "+1rank" in o[1]]
    # EPYC -10.8 ... +8.9 %; the Xeon's two_adapters-none-zero2_offload+1rank -16.9 % (95.5 MiB, 80.4 on EPYC)
    assert max(abs(s["min_error_ok"]), abs(s["max_error_ok"])) <= 0.17


def test_no_model_memory_constant_is_fitted():
    calibration = load_calibration()
    assert calibration.fitted_on == []
    assert set(calibration.devices["cpu"].fitted) == {"context_bytes", "deepspeed_context_bytes"}


def test_the_committed_calibration_is_what_fit_gives_on_the_committed_runs():
    # a new run under a budgeted profile needs `python -m bench validate-estimate --fit` and `make predicted`; medians
    # of measured bytes come out the same on every CPU, held like every fit to a stated tolerance (fit_tolerance)
    assert not mismatches(fit(), load_calibration())


def test_held_out_baselines_are_fitted_without_any_record_of_the_cell(committed, folds):
    records = calibration_records()
    assert set(folds) == {m.record.cell_id for m in records}
    assert all(calibration is not None for calibration in folds.values())
    rows, _ = committed
    # model memory has no fitted constant: the held-out train figure is the committed one on every row
    assert all(r.held_out == r.predicted for r in rows)
    # each cell's fold is the fit of every other cell's records (the Xeon's 4 GiB cells added six baselines of
    # 55.0 / 67.9 MiB: no single cell's leaving moves a median any more)
    for cell_id, calibration in folds.items():
        assert not mismatches(fit_records([m for m in records if m.record.cell_id != cell_id]), calibration)
    assert len(records) > len(folds)


def test_a_likely_verdict_is_judged_by_its_side():
    def row(predicted: str) -> Row:
        return Row("r", "cpu-budget", "c", "oom", None, 1.0, "oom", predicted, False, verdict_held_out=predicted)

    assert row("likely_oom").held_out_verdict_right is True
    assert row("likely_fits").held_out_verdict_right is False
    assert row("fits").held_out_verdict_right is False
    assert row("unknown").held_out_verdict_right is None
    s = summary([row("likely_oom"), row("likely_fits"), row("fits"), row("oom")])
    assert (s["verdicts"], s["verdicts_right"], s["likely"], s["likely_right"]) == (4, 2, 2, 1)


def row(measured: float, predicted: float, workload: str = "small", method: str = "dpo", cell: str = "c") -> Row:
    return Row(
        "r", "cpu", cell, "ok", measured, predicted, None, None, False, workload, held_out=predicted, method=method
    )


def test_figures_per_workload_per_method_and_for_the_one_rank_cells():
    rows = [
        row(100, 105),
        row(100, 97, "tiny"),
        row(100, 140, "tiny", "reward"),
        row(100, 110, "tiny", cell="one_adapter-none-zero2_offload+1rank"),
    ]
    s = summary(rows)
    assert s["ok_cells"] == 3 and s["max_abs_error_ok"] == pytest.approx(0.10)
    by_workload = workload_summary(rows)
    assert by_workload["small"] == {"ok_cells": 1, "max_abs_error_ok": pytest.approx(0.05)}
    assert by_workload["tiny"]["ok_cells"] == 3 and by_workload["tiny"]["max_abs_error_ok"] == pytest.approx(0.40)
    assert plus_one_rank_summary(rows) == {
        "ok_cells": 1,
        "min_error_ok": pytest.approx(0.1),
        "max_error_ok": pytest.approx(0.1),
    }
    by_method = method_summary(rows)
    assert list(by_method) == ["reward"] and by_method["reward"]["max_abs_error_ok"] == pytest.approx(0.40)
    table = to_markdown(rows, 0)
    assert "small 1 cells, max |error| 5.0%; tiny 3 cells, max |error| 40.0%" in table
    assert "(`+1rank`): 1 `ok` cells, errors +10.0% .. +10.0%" in table
    assert "- reward: 1 cells, mean error 40.0%, max |error| 40.0%" in table
    assert "max |error| 10.0%" in validation_line(rows)


def test_write_calibration_writes_the_committed_file(tmp_path):
    from bench.estimate.predict import CALIBRATION_FILE, write_calibration

    write_calibration(load_calibration(), tmp_path / "calibration.json")
    assert (tmp_path / "calibration.json").read_bytes() == CALIBRATION_FILE.read_bytes()


def _run_of(results: Path, name: str, created_at: str, record: ResultRecord, flags: list[str] | None) -> None:
    run_dir = results / "cpu" / name
    run_dir.mkdir(parents=True)
    (run_dir / RESULTS_FILE).touch()
    append_result(run_dir, record.model_copy(update={"run_id": name}))
    cpu = CpuFeatures(flags=flags) if flags is not None else None
    write_env(
        run_dir, EnvFingerprint(created_at=created_at, hardware=HostHardware(cpu_model="AMD EPYC"), cpu_features=cpu)
    )


def test_a_cpu_of_the_same_name_and_other_instruction_sets_keeps_its_own_record(tmp_path):
    """An EPYC Zen 5 and a Zen 4 both read `AMD EPYC` under the hypervisor; their recorded instruction sets differ
    (Zen 5's AVX-VNNI). A run that recorded none is superseded by a later one of the name, and its outcome kept."""
    record = load_results(PROJECT_ROOT / "results/cpu/20261128-064850").latest_by_cell()["one_adapter-none-single"]
    zen4 = ["avx2", "fma", "avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16"]
    results = tmp_path / "results"
    _run_of(results, "old", "2026-11-24T00:00:00+00:00", record.model_copy(update={"status": Status.OOM}), None)
    _run_of(results, "zen4", "2026-11-28T06:48:50+00:00", record, zen4)
    _run_of(results, "zen4-again", "2026-11-28T20:00:00+00:00", record, zen4)
    _run_of(results, "zen5", "2026-11-28T18:33:42+00:00", record, [*zen4, "avx_vnni"])
    found = {m.source: m for m in measured_records(results)}
    assert set(found) == {"results/cpu/zen4-again", "results/cpu/zen5"}
    assert found["results/cpu/zen4-again"].outcomes == {True, False} and found["results/cpu/zen5"].outcomes == {False}
    _run_of(results, "unrecorded", "2026-11-29T00:00:00+00:00", record, None)
    assert [m.source for m in measured_records(results)] == ["results/cpu/unrecorded"]
