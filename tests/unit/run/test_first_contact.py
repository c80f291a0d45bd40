"""`first-contact` on CPU: the profile it picks for a card, its phases, each waiting for its workload's assets, the
assets prepared in the background as a runner of the machine, its archive (bench/run/first_contact.py). The whole
command ran on the lent H200: results/1xH200/20261126-182033."""

import io
import tarfile
import time
from concurrent.futures import Future

import pytest

from bench.errors import BenchError
from bench.matrix.profiles import least_steps, load_profile, load_workload
from bench.matrix.scenario import expand, load_matrix, not_applicable_reason
from bench.run import first_contact
from bench.run.first_contact import (
    EMULATED,
    SEVEN_B,
    WINDOW_WORKLOADS,
    WORKLOAD,
    archive,
    assets_ready,
    phases,
    pick_profile,
    run_phases,
    seven_b_run,
)


def test_each_card_gets_its_shipped_one_gpu_profile_or_its_catalog_entry():
    assert pick_profile("NVIDIA H200") == ["--hw", "1xH200"]
    assert pick_profile("NVIDIA H100 80GB HBM3") == ["--hw", "1xH100"]
    assert pick_profile("NVIDIA A10") == ["--hw", "1xA10"]
    assert pick_profile("NVIDIA A100-SXM4-80GB") == ["--gpu", "A100-80G:1"]
    with pytest.raises(BenchError, match="not in the GPU catalog"):
        pick_profile("NVIDIA H100 NVL")


def test_the_phases_cover_first_then_phi2_on_an_emulated_a10_then_the_7b_cells_then_the_rest():
    coverage, emulated, seven_b, rest = phases(["--hw", "1xH200"], ["a", "b"], "R", 240)
    assert coverage.argv[-2:] == ["--filter", "a,b"] and WORKLOAD in coverage.argv
    assert ["--hw", EMULATED[0], "--emulate", "--workload", EMULATED[1]] == emulated.argv[:5]
    assert emulated.argv[-1] == ",".join(EMULATED[2])
    assert seven_b.argv[:4] == ["--hw", "1xH200", "--workload", SEVEN_B[0]] and seven_b.argv[-1] == ",".join(SEVEN_B[1])
    assert seven_b.argv[seven_b.argv.index("--run-id") + 1] == seven_b_run("R") != "R"  # a run holds one workload
    assert "--filter" not in rest.argv and rest.argv[rest.argv.index("--run-id") + 1] == "R"
    assert all(p.argv[p.argv.index("--cell-timeout") + 1] == "240" for p in (coverage, emulated, rest))
    assert seven_b.argv[seven_b.argv.index("--cell-timeout") + 1] == "600"
    assert [p.workload for p in (coverage, emulated, seven_b, rest)] == [*WINDOW_WORKLOADS, WORKLOAD]


def test_the_7b_cells_are_a_real_7b_architecture_with_lora_qlora_and_an_offload_full_fine_tune():
    workload, cells = SEVEN_B
    spec = load_workload(workload)
    assert 1024 <= spec.train.max_length <= 2048 and spec.train.steps >= least_steps(spec.train.warmup_steps)
    profile = load_profile("1xH200")
    matrix = {c.id: c for c in expand(load_matrix())}
    assert len(cells) >= 6 and all(not_applicable_reason(matrix[c], profile) is None for c in cells)
    chosen = [matrix[c] for c in cells]
    assert any(c.init == "one_adapter" and c.quant == "none" for c in chosen)  # LoRA
    assert any(c.quant == "nf4" for c in chosen)  # QLoRA
    assert any(c.init == "two_models" and "offload" in c.backend for c in chosen)  # an offload full fine-tune


def _done(value=None, error: Exception | None = None) -> Future:
    future: Future = Future()
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
    return future


def test_a_phase_waits_for_its_workloads_assets_and_no_longer_than_the_deadline():
    log = io.StringIO()
    phase = phases(["--hw", "1xH200"], ["a"], "R", 240)[2]
    assert assets_ready(phase, {}, time.monotonic(), log)  # nothing prepared in the background: nothing to wait for
    assert assets_ready(phase, {SEVEN_B[0]: _done("assets")}, time.monotonic(), log)
    pending: Future = Future()
    started = time.monotonic()
    assert not assets_ready(phase, {SEVEN_B[0]: pending}, started + 0.2, log)
    assert 0.2 <= time.monotonic() - started < 5
    assert not assets_ready(phase, {SEVEN_B[0]: _done(error=BenchError("no disk"))}, time.monotonic(), log)
    assert log.getvalue().splitlines() == [
        f"first-contact: {SEVEN_B[0]}'s cells: not started, the assets of {SEVEN_B[0]} are not ready",
        f"first-contact: {SEVEN_B[0]}'s cells: not started: no disk",
    ]


def test_a_phase_whose_assets_failed_is_skipped_and_the_next_runs(monkeypatch, tmp_path):
    started: list[list[str]] = []
    monkeypatch.setattr(first_contact, "stream", lambda argv, out: started.append(argv) or 0)
    planned = phases(["--hw", "1xH200"], ["a"], "R", 240)
    ready = {WORKLOAD: _done("a"), EMULATED[1]: _done(error=BenchError("x")), SEVEN_B[0]: _done("c")}
    run_phases(planned, time.monotonic() + 3600, tmp_path, io.StringIO(), ready)
    workloads = [argv[argv.index("--workload") + 1] for argv in started]
    assert workloads == [WORKLOAD, SEVEN_B[0], WORKLOAD]


def test_the_background_preparation_is_a_runner_of_the_machine_until_the_last_workload_is_ready(monkeypatch, tmp_path):
    """So that a cell measured while it runs is marked overlapped_by (bench/run/runners.py)."""
    from bench.assets import prepare_all as prepare_all_module
    from bench.run import runners

    monkeypatch.setenv(runners.RUNNERS_ENV, str(tmp_path / "runners"))
    futures = {name: Future() for name in ("w1", "w2")}
    asked = {}
    monkeypatch.setattr(
        prepare_all_module, "prepare_all", lambda w, device, note: asked.update(device=device) or futures
    )
    monkeypatch.setattr("bench.matrix.profiles.load_workload", lambda name: name)
    ready = first_contact.start_assets(["w1", "w2"], "R", tmp_path, io.StringIO())
    assert ready == futures and asked == {"device": "cuda"}

    def live() -> list[str]:
        return [s.runner.run_id for s in runners.seen() if s.ended is None]

    assert live() == ["R-assets"]
    futures["w1"].set_result("a")
    time.sleep(0.3)
    assert live() == ["R-assets"]
    futures["w2"].set_exception(BenchError("failed"))
    deadline = time.monotonic() + 5
    while live() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live() == []


def test_the_archive_holds_each_run_folder_and_its_tables(tmp_path):
    run = tmp_path / "results" / "1xH200" / "R"
    run.mkdir(parents=True)
    (run / "results.jsonl").write_text("{}\n")
    (run.parent / "MATRIX.md").write_text("# m\n")
    log = tmp_path / "first-contact.log"
    log.write_text("log\n")
    path = archive([run, tmp_path / "results" / "1xA10" / "R"], [log], tmp_path / "out", "fc")
    with tarfile.open(path) as tar:
        assert sorted(tar.getnames()) == [
            "1xH200/R", "1xH200/R/MATRIX.md", "1xH200/R/results.jsonl", "first-contact.log"
        ]  # fmt: skip
