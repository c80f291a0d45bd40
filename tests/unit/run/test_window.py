"""The window on CPU (bench/run/window.py, window_spec.py, window_forecast.py): the profile it picks for a card, its
phases in priority order with the arguments of each phase's `bench run`, each waiting for its workload's assets and
the phase it follows, the assets prepared in the background as a runner of the machine, the speed pass's cells, and
the plan it prints and writes first. The whole command is rehearsed on a CPU profile in
tests/integration/test_window.py."""

import io
import json
import time
from concurrent.futures import Future
from dataclasses import replace

import pytest

from bench.errors import BenchError
from bench.matrix.methods import Method
from bench.matrix.on_profile import CellOnProfile
from bench.matrix.profiles import least_steps, load_profile, load_workload
from bench.matrix.scenario import expand, load_matrix, not_applicable_reason
from bench.run import window
from bench.run.budget import first_pass
from bench.run.window import assets_ready, pick_profile, run_phases, speed_cells
from bench.run.window_spec import (
    EMULATED,
    SEVEN_B,
    SEVEN_B_ALONE,
    WINDOW_WORKLOADS,
    WORKLOAD,
    card_content,
    rehearsal_content,
    window_phases,
)

H200 = load_profile("1xH200")


def h200_phases(run_id: str = "R"):
    return {p.name: p for p in window_phases(card_content(("--hw", "1xH200"), H200), run_id)}


def test_each_card_gets_its_shipped_one_gpu_profile_or_its_catalog_entry():
    assert pick_profile("NVIDIA H200") == ["--hw", "1xH200"]
    assert pick_profile("NVIDIA H100 80GB HBM3") == ["--hw", "1xH100"]
    assert pick_profile("NVIDIA A10") == ["--hw", "1xA10"]
    assert pick_profile("NVIDIA A100-SXM4-80GB") == ["--gpu", "A100-80G:1"]
    with pytest.raises(BenchError, match="not in the GPU catalog"):
        pick_profile("NVIDIA H100 NVL")


def test_the_phases_are_the_dpo_matrix_the_other_methods_the_24gb_cards_the_7b_cells_the_speed_pass_then_the_rest():
    phases = h200_phases()
    assert [(p.priority, p.name) for p in phases.values()] == [
        (1, "dpo"), (2, "methods"), (3, "emulated:1xA10"), (3, "emulated:1xL4"), (3, "emulated:1x4090"), (4, "7b"),
        (4, "7b-alone"), (5, "speed"), (6, "methods-rest"), (7, "emulated:1xA10-rest"), (7, "emulated:1xL4-rest"),
        (7, "emulated:1x4090-rest"),
    ]  # fmt: skip
    matrix = [c for c in expand(load_matrix()) if not_applicable_reason(CellOnProfile(c, H200)) is None]
    assert (
        set(phases["dpo"].cells) == {c.id for c in matrix if c.method == Method.DPO} and len(phases["dpo"].cells) == 38
    )
    others = [c for c in matrix if c.method != Method.DPO]
    assert set(phases["methods"].cells) | set(phases["methods-rest"].cells) == {c.id for c in others}
    sft = [c for c in others if c.method == Method.SFT]
    assert {c.id for c in first_pass(sft)} <= set(phases["methods"].cells)  # each method's coverage pass
    for name, workload in EMULATED:
        card = phases[f"emulated:{name}"]
        assert card.target == ("--hw", name, "--emulate") and card.workload == workload
        assert phases[f"emulated:{name}-rest"].after == (card.name, "speed") and card.run_id == "R-emulated"
    assert phases["7b"].workload == phases["7b-alone"].workload == SEVEN_B[0] and phases["7b-alone"].after == ("7b",)
    assert set(phases["7b"].cells) | set(phases["7b-alone"].cells) == set(SEVEN_B[1])
    assert phases["7b-alone"].cells == SEVEN_B_ALONE and phases["7b-alone"].alone
    speed = phases["speed"]
    assert (speed.run_id, speed.alone, speed.repeats, speed.speed_of) == ("R", True, 3, "dpo")
    assert speed.after == tuple(name for name, p in phases.items() if p.priority < speed.priority)  # nothing beside it
    assert phases["methods-rest"].after == ("methods", "speed")
    assert list(dict.fromkeys(p.workload for p in phases.values())) == list(WINDOW_WORKLOADS)


def test_a_phase_runs_as_bench_run_with_its_priority_slots_budget_and_no_speed_pass_of_its_own():
    phases = h200_phases()
    argv = phases["emulated:1xA10"].argv(5, 7.25)
    assert argv[:3] == ["--hw", "1xA10", "--emulate"]
    assert argv[argv.index("--slot-priority") + 1] == "3" and argv[argv.index("--gpu-slots") + 1] == "5"
    assert argv[argv.index("--speed-pass") + 1] == "0" and argv[argv.index("--time-budget") + 1] == "7.25"
    assert argv[argv.index("--run-id") + 1] == "R-emulated" and "--alone" not in argv
    alone = phases["7b-alone"].argv(5, 1.0)
    assert "--alone" in alone and alone[alone.index("--cell-timeout") + 1] == "600"
    assert phases["speed"].argv(5, 1.0)[-2:] == ["--repeats", "3"]


def test_the_7b_cells_are_a_real_7b_architecture_with_lora_qlora_and_an_offload_full_fine_tune():
    workload, cells = SEVEN_B
    spec = load_workload(workload)
    assert 1024 <= spec.train.max_length <= 2048 and spec.train.steps >= least_steps(spec.train.warmup_steps)
    matrix = {c.id: c for c in expand(load_matrix())}
    assert len(cells) >= 6 and all(not_applicable_reason(CellOnProfile(matrix[c], H200)) is None for c in cells)
    chosen = [matrix[c] for c in cells]
    assert any(c.init == "one_adapter" and c.quant == "none" for c in chosen)  # LoRA
    assert any(c.quant == "nf4" for c in chosen)  # QLoRA
    assert any(c.init == "two_models" and "offload" in c.backend for c in chosen)  # an offload full fine-tune


def test_the_rehearsal_runs_the_same_phases_on_a_cpu_profile_with_a_memory_budget():
    phases = window_phases(rehearsal_content(load_profile("cpu-budget")), "R")
    assert [p.name for p in phases] == [
        "dpo", "methods", "emulated:cpu-budget", "7b", "7b-alone", "speed", "methods-rest"
    ]  # fmt: skip
    assert {p.run_id for p in phases} == {"R", "R-methods", "R-emulated", "R-small"}
    assert phases[0].argv(None, 1.0).count("--gpu-slots") == 0
    with pytest.raises(BenchError, match="--hw cpu: the window rehearses on a CPU profile with memory_budget_gb"):
        rehearsal_content(load_profile("cpu"))


def _done(value=None, error: Exception | None = None) -> Future:
    future: Future = Future()
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
    return future


def test_a_phase_waits_for_its_workloads_assets_and_no_longer_than_the_deadline():
    log = io.StringIO()
    phase = h200_phases()["7b"]
    assert assets_ready(phase, {}, time.monotonic(), log)  # nothing prepared in the background: nothing to wait for
    assert assets_ready(phase, {SEVEN_B[0]: _done("assets")}, time.monotonic(), log)
    pending: Future = Future()
    started = time.monotonic()
    assert not assets_ready(phase, {SEVEN_B[0]: pending}, started + 0.2, log)
    assert 0.2 <= time.monotonic() - started < 5
    assert not assets_ready(phase, {SEVEN_B[0]: _done(error=BenchError("no disk"))}, time.monotonic(), log)
    assert log.getvalue().splitlines() == [
        f"window: 7b: not started, the assets of {SEVEN_B[0]} are not ready",
        "window: 7b: not started: no disk",
    ]


def test_phases_start_side_by_side_a_phase_whose_assets_failed_is_skipped_and_one_that_follows_waits(
    monkeypatch, tmp_path
):
    started: list[tuple[float, list[str]]] = []
    environments: dict[str, dict[str, str]] = {}

    def fake_stream(argv, out, env):
        started.append((time.monotonic(), argv))
        environments[argv[argv.index("--run-id") + 1]] = env
        time.sleep(0.3)
        return 0

    monkeypatch.setattr(window, "stream", fake_stream)
    content = card_content(("--hw", "1xH200"), H200)
    phases = [p for p in window_phases(content, "R") if p.name in ("dpo", "methods", "emulated:1xA10", "7b",
                                                                    "7b-alone")]  # fmt: skip
    found = window.Machine(H200, content, 141 * 10**9, "test")
    ready = {WORKLOAD: _done("a"), "phi-2": _done(error=BenchError("x")), SEVEN_B[0]: _done("c")}
    planned = {"phases": [{"name": p.name, "cells": list(p.cells)} for p in phases]}
    run_phases(phases, found, time.monotonic() + 3600, tmp_path, io.StringIO(), ready, planned)
    runs = {argv[argv.index("--run-id") + 1] + (" alone" if "--alone" in argv else ""): at for at, argv in started}
    assert set(runs) == {"R", "R-methods", "R-mistral-7b", "R-mistral-7b alone"}  # phi-2's phase skipped
    assert abs(runs["R"] - runs["R-methods"]) < 0.25  # side by side
    assert runs["R-mistral-7b alone"] - runs["R-mistral-7b"] >= 0.3  # after the phase it resumes ended
    recorded = {"BENCH_ALLOCATOR_HISTORY": "2"}
    assert environments["R"] == environments["R-methods"] == recorded and environments["R-mistral-7b"] == {}


def test_the_speed_pass_takes_the_first_cells_in_the_runs_order_that_are_ok_with_a_shared_speed(tmp_path):
    from bench.judge.record import RunFacts, _identity
    from bench.results.schema import Status
    from bench.results.store import append_result

    cells = {c.id: c for c in expand(load_matrix())}
    run_dir = tmp_path / "1xH200" / "R"
    run_dir.mkdir(parents=True)
    facts = RunFacts("R", "1xH200", WORKLOAD, "local")
    for cell_id, status, shared in [("a1", Status.OK, True), ("b1", Status.ERROR, True), ("c1", Status.OK, False),
                                    ("d1", Status.OK, True), ("e1", Status.OK, True)]:  # fmt: skip
        record = _identity(facts, cells["one_adapter-none-single"], 1, status)
        update = {"cell_id": cell_id, "gpu_shared": shared, "shared_with": ["x"] if shared else []}
        append_result(run_dir, record.model_copy(update=update))
    phase = replace(h200_phases()["speed"], cells=("x", "y"))  # two cells
    chosen = speed_cells(phase, tmp_path, ["e1", "b1", "c1", "a1", "d1"], io.StringIO())
    assert chosen.cells == ("e1", "a1")


def test_the_speed_pass_takes_one_quantization_at_a_time_so_the_dequantizing_cells_get_speeds():
    from bench.matrix.cell import quant_of_id
    from bench.run.window_spec import spread_over_quantizations

    assert [
        quant_of_id(c) for c in ("two_models-none-single", "kto-one_adapter-nf4-ddp", "one_adapter-int8-zero3+1rank")
    ] == ["none", "nf4", "int8"]
    assert quant_of_id("a1") == ""
    order = ["two_models-none-single", "two_models-none-ddp", "one_adapter-none-single", "one_adapter-nf4-single",
             "two_adapters-int8-single", "one_adapter-nf4-ddp"]  # fmt: skip
    assert spread_over_quantizations(order, 5) == (
        "two_models-none-single", "one_adapter-nf4-single", "two_adapters-int8-single", "two_models-none-ddp",
        "one_adapter-nf4-ddp",
    )  # fmt: skip
    assert spread_over_quantizations(order[:3], 2) == tuple(order[:2])  # one quantization: the run's order


def test_the_background_preparation_is_a_runner_of_the_machine_until_the_last_workload_is_ready(monkeypatch, tmp_path):
    """So that a cell measured while it runs is marked overlapped_by (bench/run/runner_registry.py)."""
    from bench.assets import prepare_all as prepare_all_module
    from bench.run import runner_registry

    monkeypatch.setenv(runner_registry.RUNNERS_ENV, str(tmp_path / "runners"))
    futures = {name: Future() for name in ("w1", "w2")}
    asked = {}
    monkeypatch.setattr(
        prepare_all_module, "prepare_all", lambda w, device, note: asked.update(device=device) or futures
    )
    monkeypatch.setattr("bench.matrix.profiles.load_workload", lambda name: name)
    ready = window.start_assets(["w1", "w2"], "R", tmp_path, io.StringIO())
    assert ready == futures and asked == {"device": "cuda"}

    def live() -> list[str]:
        return [s.runner.run_id for s in runner_registry.seen() if s.ended is None]

    assert live() == ["R-assets"]
    futures["w1"].set_result("a")
    time.sleep(0.3)
    assert live() == ["R-assets"]
    futures["w2"].set_exception(BenchError("failed"))
    deadline = time.monotonic() + 5
    while live() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live() == []


def test_the_plan_is_printed_and_written_first_with_each_phases_predicted_cells(tmp_path, capsys):
    """`window --plan` on a machine without a GPU: the card's catalog memory, 5 slots on an H200."""
    assert window.window(9.0, tmp_path, "R", "1xH200", plan_only=True) is None
    planned = json.loads((tmp_path / "plan.json").read_text())
    assert planned["profile"] == "1xH200" and planned["slots"] == 5 and planned["seconds"] == 540
    rows = {row["name"]: row for row in planned["phases"]}
    assert len(rows["dpo"]["cells"]) == 38 and len(rows["speed"]["cells"]) == 10  # 5 cells x 2 trials
    for row in rows.values():
        assert 0 <= row["predicted_cells"]["slow"] <= row["predicted_cells"]["fast"] <= len(row["cells"])
    assert planned["predicted_total"]["slow"] == sum(r["predicted_cells"]["slow"] for r in rows.values())
    printed = capsys.readouterr().out
    assert "PREDICTED" in printed and "dpo" in printed and not (tmp_path / "results").exists()


def test_only_a_phase_with_a_deepspeed_cell_waits_for_the_host_op_to_be_built():
    phases = h200_phases()
    building: Future = Future()
    ready = {WORKLOAD: _done("a"), SEVEN_B[0]: _done("b"), window.HOST_OPS: building}
    started = time.monotonic()
    assert assets_ready(phases["7b"], ready, started + 0.3, io.StringIO())  # single-GPU cells: no DeepSpeed
    assert time.monotonic() - started < 0.25
    assert window.needs_ops(phases["dpo"])  # its ZeRO cells
    assert assets_ready(phases["dpo"], ready, started + 0.3, io.StringIO())  # waited until the deadline for it ...
    assert time.monotonic() - started >= 0.3  # ... and its cells say what a failed build did to them
