"""--model (Hub id, folder, config.json, shipped name), the settings flags, and `advise`: one path with
`--workload`, an offline Hub id is one line, every figure PREDICTED, the JSON keys documented."""

import json
import shutil

import pytest

from bench.advise.advice import Advice, CellAdvice, FixAdvice, Pick, RunPlan
from bench.assets.model_config import resolve_model
from bench.cli import main
from bench.errors import BenchError
from bench.estimate.predict import load_calibration, predict_cell
from bench.matrix.profiles import available, load_workload
from bench.paths import PROJECT_ROOT, SCENARIOS_DIR

QWEN = SCENARIOS_DIR / "models" / "qwen2.5-7b"
PROFILE_OF = {"tiny": "cpu", "small": "cpu"}
"""The profile each workload is compared on (default: 8xA100-80G, every backend applicable)."""


def _stdout(capsys, argv: list[str]) -> str:
    assert main(argv) == 0
    return capsys.readouterr().out


def _settings_flags(name: str) -> list[str]:
    w = load_workload(name)
    return [
        "--max-length", str(w.train.max_length),
        "--batch-size", str(w.train.per_device_train_batch_size),
        "--steps", str(w.train.steps),
        "--lora-r", str(w.lora.r),
        "--lora-targets", ",".join(w.lora.target_modules),
        "--gradient-checkpointing", "on" if w.train.gradient_checkpointing else "off",
    ]  # fmt: skip


WORKLOADS = [n for n in available(SCENARIOS_DIR / "workloads") if load_workload(n).model.config is not None]


@pytest.mark.parametrize("name", WORKLOADS)
def test_model_with_the_workloads_settings_predicts_as_the_workload(capsys, name):
    hw = PROFILE_OF.get(name, "8xA100-80G")
    # the settings all come from the flags, not from it; the data (its rows' lengths: the allocator's reserve over
    # varying lengths) from it, so it holds the same data where another workload does
    data = load_workload(name).dataset
    other = next((n for n in WORKLOADS if n != name and load_workload(n).dataset == data), name)
    folder = str((SCENARIOS_DIR / "workloads" / name).relative_to(PROJECT_ROOT))
    for fmt in ("json", "md"):
        expected = _stdout(capsys, ["predict", "--hw", hw, "--workload", name, "--format", fmt])
        got = _stdout(
            capsys,
            ["predict", "--hw", hw, "--workload", other, "--model", folder, *_settings_flags(name), "--format", fmt],
        )
        assert got == expected


def test_model_folder_config_file_and_shipped_name_are_one_model(tmp_path):
    folder = tmp_path / "my-qwen"
    folder.mkdir()
    shutil.copy(QWEN / "config.json", folder / "config.json")
    assert resolve_model(str(folder)).config_file == folder / "config.json"
    assert resolve_model(str(folder / "config.json")).name == "my-qwen"
    assert resolve_model("qwen2.5-7b").config_file == QWEN / "config.json"
    with pytest.raises(BenchError, match=r"holds no config\.json"):
        resolve_model(str(tmp_path))


def test_hub_id_downloads_config_json_only(monkeypatch, tmp_path):
    asked = []

    def download(repo_id, filename, **kwargs):
        asked.append((repo_id, filename))
        target = tmp_path / "snapshot" / "config.json"
        target.parent.mkdir(exist_ok=True)
        shutil.copy(QWEN / "config.json", target)
        return str(target)

    monkeypatch.setattr("huggingface_hub.hf_hub_download", download)
    model = resolve_model("someone/Qwen2.5-7B-fork")
    assert asked == [("someone/Qwen2.5-7B-fork", "config.json")]  # the cache is asked first, and has it
    assert model.name == "someone--Qwen2.5-7B-fork" and model.config_file.name == "config.json"


@pytest.mark.parametrize("hub_id", ["Qwen/Qwen2.5-7B", "qwen/qwen2.5-7b"])
def test_a_shipped_models_hub_id_is_its_shipped_config(monkeypatch, hub_id):
    def download(*args, **kwargs):
        raise AssertionError("a shipped model needs no download")

    monkeypatch.setattr("huggingface_hub.hf_hub_download", download)
    assert resolve_model(hub_id) == resolve_model("qwen2.5-7b")


def test_hub_id_from_the_offline_cache(monkeypatch, tmp_path):
    """HF_HUB_OFFLINE with the config in huggingface_hub's local cache: found there, nothing downloaded."""
    import huggingface_hub.constants as constants

    commit = "0" * 40
    snapshot = tmp_path / "models--someone--qwen-fork" / "snapshots" / commit
    snapshot.mkdir(parents=True)
    shutil.copy(QWEN / "config.json", snapshot / "config.json")
    (tmp_path / "models--someone--qwen-fork" / "refs").mkdir()
    (tmp_path / "models--someone--qwen-fork" / "refs" / "main").write_text(commit)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    assert resolve_model("someone/qwen-fork").config_file == snapshot / "config.json"


def test_hub_id_offline_is_one_line_naming_the_folder_alternative(monkeypatch, tmp_path, capsys):
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    assert main(["predict", "--gpu", "A10:1", "--model", "someone/not-cached"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert "cannot download its config.json" in err and "pass a local folder holding its config.json" in err


def test_hub_id_without_a_connection_fails_fast_with_the_whole_reason(monkeypatch, tmp_path, capsys):
    """No HF_HUB_OFFLINE, no cache, and a Hub whose host does not resolve: one line within 2 s, not huggingface_hub's
    retries, and the reason not cut."""
    import time

    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "ENDPOINT", "https://hub.invalid")
    for proxy in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(proxy, raising=False)
    started = time.monotonic()
    assert main(["predict", "--gpu", "A10:1", "--model", "someone/not-cached"]) == 2
    assert time.monotonic() - started < 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "(hub.invalid:443 unreachable: " in err
    assert err.endswith("pass a local folder holding its config.json instead, e.g. --model path/to/not-cached")


def test_lora_targets_all_linear_are_the_models_linear_names(capsys):
    out = _stdout(
        capsys,
        ["predict", "--gpu", "A10:1", "--model", "qwen2.5-7b", "--lora-targets", "all-linear", "--format", "json",
         "--filter", "one_adapter-none-single"],
    )  # fmt: skip
    attention_only = _stdout(
        capsys, ["predict", "--gpu", "A10:1", "--model", "qwen2.5-7b", "--format", "json", "--filter",
                 "one_adapter-none-single"],
    )  # fmt: skip
    assert json.loads(out)[0]["terms"]["adapters"] > 3 * json.loads(attention_only)[0]["terms"]["adapters"]


def test_optim_changes_the_optimizer_state(capsys):
    def optimizer(optim: str) -> float:
        out = _stdout(capsys, ["predict", "--gpu", "A10:1", "--model", "qwen2.5-7b", "--optim", optim,
                               "--format", "json", "--filter", "one_adapter-none-single"])  # fmt: skip
        return json.loads(out)[0]["terms"]["optimizer"]

    # fp32 adapters: AdamW keeps two fp32 moments (8 bytes per parameter), bitsandbytes' 8-bit AdamW two uint8 ones
    assert optimizer("adamw_8bit") == pytest.approx(optimizer("adamw_torch") / 4, rel=0.02)


def test_predict_json_has_the_documented_fields(capsys, tmp_path):
    folder = tmp_path / "qwen"
    shutil.copytree(QWEN, folder)
    rows = json.loads(_stdout(capsys, ["predict", "--model", str(folder), "--gpu", "H100-SXM:1", "--format", "json"]))
    predicted = [r for r in rows if r["status"] == "predicted"]
    assert predicted
    for key in ("verdict", "total_bytes", "train_bytes", "load_bytes", "terms"):
        assert all(key in r for r in predicted)


def test_advise_on_two_a10s_ranks_and_gives_a_command(capsys, tmp_path):
    folder = tmp_path / "qwen"
    shutil.copytree(QWEN, folder)
    argv = ["advise", "--model", str(folder), "--gpu", "A10:2", "--max-length", "2048", "--batch-size", "1"]
    md = _stdout(capsys, argv)
    assert md.startswith("# PREDICTED")
    assert "| 1 | " in md and "dpo-bench run --gpu A10:2 --model" in md
    advice = Advice.model_validate_json(_stdout(capsys, [*argv, "--format", "json"]))
    assert [c.rank for c in advice.cells] == list(range(1, len(advice.cells) + 1))
    assert advice.chosen == advice.cells[0].cell_id and advice.cells[0].verdict == "fits"
    assert advice.run is not None and advice.run.command.endswith(f"--filter {advice.chosen}")
    fits = [c for c in advice.cells if c.verdict == "fits"]
    speeds = [c.tokens_per_s for c in fits]
    assert speeds == sorted(speeds, reverse=True)  # the default order: the fastest PREDICTED first
    assert fits[0].devices == 2  # LoRA over both GPUs, not QLoRA on one with the other idle
    fewest = Advice.model_validate_json(_stdout(capsys, [*argv, "--format", "json", "--prefer", "fewest-gpus"]))
    fewest_fits = [c for c in fewest.cells if c.verdict == "fits"]
    assert [c.devices for c in fewest_fits] == sorted(c.devices for c in fewest_fits)
    one_device = [c.tokens_per_s for c in fewest_fits if c.devices == 1]
    assert len(one_device) > 2 and one_device == sorted(one_device, reverse=True)
    picks = {p.kind: p.cell_id for p in advice.picks}
    assert picks == {p.kind: p.cell_id for p in fewest.picks}  # the picks do not depend on the order
    assert picks["fastest"] == advice.chosen and picks["fewest-gpus"] == fewest.chosen
    faithful = next(c for c in fits if c.cell_id == picks["faithful"])
    assert faithful.quant == "none" and "## To run it" in md and "- **fewest-gpus** (DPO): `" in md
    # every cell carries its 80 % interval, its probability of fitting and the pool they came from
    assert all(c.range_low_bytes < c.range_high_bytes and 0 <= c.fit_probability <= 1 for c in advice.cells)
    assert all(c.range_pool for c in advice.cells)
    classes = [{"fits": 0, "likely_fits": 1, "likely_oom": 2}.get(c.verdict, 3) for c in advice.cells]
    assert classes == sorted(classes) and {1, 2} & set(classes)  # fits, then the likely ones, then the rest
    csv_text = _stdout(capsys, [*argv, "--format", "csv"])
    assert csv_text.count("\nPREDICTED,") == len(advice.cells)


def test_every_fix_is_predicted_to_fit(capsys):
    """A fix is only proposed when the estimator, asked again, says the changed cell fits."""
    argv = ["advise", "--model", "llama-3.1-8b", "--gpu", "A10:2", "--max-length", "4096", "--batch-size", "4",
            "--format", "json", "--method", "dpo"]  # fmt: skip
    advice = Advice.model_validate_json(_stdout(capsys, argv))
    fixed = [c for c in advice.cells if c.fix is not None]
    assert fixed and all(c.verdict in ("likely_fits", "likely_oom", "oom") for c in fixed)
    assert all(c.fix.margin_bytes >= 0 for c in fixed)
    assert any(c.fix.flags for c in fixed) or any(c.fix.cell_id != c.cell_id for c in fixed)


def test_advise_json_keys_are_documented():
    doc = (PROJECT_ROOT / "docs" / "advise.md").read_text()
    for schema in (Advice, CellAdvice, FixAdvice, RunPlan, Pick):
        for key in schema.model_fields:
            assert f"`{key}`" in doc, f"docs/advise.md does not document {schema.__name__}.{key}"


def test_fix_prediction_matches_the_estimator_directly():
    from bench.advise.fixes import smallest_fix
    from bench.matrix.axes import Backend, Init, Launcher, Quant
    from bench.matrix.cell import Cell
    from bench.matrix.plan import plan_for
    from bench.matrix.profiles import gpu_profile
    from bench.matrix.settings import TrainingSettings, apply_to_workload

    profile = gpu_profile("A10:2", 1, "mistral-7b")
    workload = apply_to_workload(load_workload("mistral-7b"), TrainingSettings(), QWEN / "config.json", "qwen")
    cell = Cell(init=Init.TWO_MODELS, quant=Quant.NONE, backend=Backend.DDP, launcher=Launcher.TORCHRUN)
    calibration = load_calibration()
    assert predict_cell(cell, profile, workload, calibration).verdict == "oom"
    fix = smallest_fix(plan_for(cell, profile, workload), calibration)
    assert fix is not None
    again = predict_cell(fix.change.cell, profile, fix.change.workload, calibration)
    assert again.verdict == "fits" and again.total_bytes == fix.prediction.total_bytes


def test_advise_ranks_only_the_setups_asked_for(capsys):
    argv = ["advise", "--model", "qwen2.5-7b", "--gpu", "A10:2", "--format", "json", "--init", "one_adapter,two_models",
            "--quant", "nf4", "--backend", "zero3,fsdp,single", "--filter", "*-nf4-*"]  # fmt: skip
    advice = Advice.model_validate_json(_stdout(capsys, argv))
    assert advice.cells
    for cell in advice.cells:
        init, quant, backend = cell.cell_id.split("+")[0].split("-")[:3]
        assert init in ("one_adapter", "two_models") and quant == "nf4" and backend in ("zero3", "fsdp", "single")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--quant", "int4"], "error: --quant 'int4': unknown value int4; choose from none, int8, nf4"),
        (["--backend", ","], "error: --backend ',': unknown value (none); choose from single, ddp"),
        (["--filter", "two_models-*", "--init", "one_adapter"], "--init one_adapter: no cell of the matrix has"),
    ],
)
def test_advise_narrowing_mistakes_are_one_line_naming_the_flag(capsys, flags, message):
    assert main(["advise", "--model", "qwen2.5-7b", "--gpu", "A10:2", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_lora_targets_the_model_lacks_are_one_line_naming_its_layers(capsys):
    argv = ["predict", "--gpu", "A10:1", "--model", "qwen2.5-7b", "--lora-targets", "q_proj,qkv_proj"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "error: --lora-targets: qkv_proj not in qwen2.5-7b; its linear layers: down_proj, gate_proj, k_proj, o_proj, "
        "q_proj, up_proj, v_proj"
    )


def test_default_lora_targets_follow_a_model_that_fuses_its_projections(capsys):
    """Phi-3 has `qkv_proj` where the default workload targets q_proj, k_proj and v_proj."""
    argv = ["advise", "--gpu", "A10:1", "--model", "phi-3-mini-4k", "--top", "1"]
    out = _stdout(capsys, argv)
    assert "LoRA r16 on o_proj, qkv_proj," in out


def test_a_max_length_beyond_the_models_positions_is_warned_about(capsys):
    assert main(["predict", "--gpu", "A10:1", "--model", "phi-3-mini-4k", "--max-length", "16384"]) == 0
    assert "warning: max length 16384 is over phi-3-mini-4k's max_position_embeddings (4096)" in capsys.readouterr().err


FULL_70B_OFFLOAD = ["advise", "--model", "llama-3.1-70b", "--gpu", "A100-80G:2", "--filter",
                    "two_models-none-fsdp_offload", "--format", "json"]  # fmt: skip
"""Full DPO of a 70B with FSDP offload: about 22 GB on each device, about 635 GB of host memory per rank."""


def test_offload_over_the_host_memory_is_host_oom(capsys):
    small = Advice.model_validate_json(_stdout(capsys, [*FULL_70B_OFFLOAD, "--host-ram", "256"]))
    (cell,) = small.cells
    assert cell.verdict == "host_oom" and small.chosen is None and small.picks == []
    assert cell.margin_bytes > 0  # the device would hold it: the host would not
    assert cell.host_need_bytes == pytest.approx(2 * cell.host_bytes) and cell.host_need_bytes > 256e9
    assert (small.host_memory_bytes, small.host_memory_origin) == (256e9, "--host-ram")
    assert cell.fix is not None and cell.fix.cell_id != cell.cell_id  # a smaller setup, itself within the host memory
    large = Advice.model_validate_json(_stdout(capsys, [*FULL_70B_OFFLOAD, "--host-ram", "4096"]))
    assert large.cells[0].verdict == "fits" and large.chosen == cell.cell_id
    md = _stdout(capsys, [*FULL_70B_OFFLOAD[:-2], "--host-ram", "256"])
    assert "| host OOM |" in md and f"**{cell.host_need_bytes / 1e9:,.1f} GB of 256.0 GB per node**" in md
    assert "host memory 256 GB per node (--host-ram)" in md


def test_no_fix_proposed_is_over_the_host_memory(capsys):
    """The fix search holds every change against the host memory too: a host_oom cell's fix, asked again with the
    same host memory, fits on the device and in the host memory (not host_oom)."""
    base = ["advise", "--model", "llama-3.1-70b", "--gpu", "A100-80G:2", "--format", "json", "--host-ram", "256"]
    advice = Advice.model_validate_json(_stdout(capsys, [*base, "--init", "two_models"]))
    fixed = [c for c in advice.cells if c.verdict == "host_oom" and c.fix is not None]
    assert fixed
    for c in fixed[:2]:
        again = Advice.model_validate_json(_stdout(capsys, [*base, *c.fix.flags, "--filter", c.fix.cell_id]))
        assert [a.verdict for a in again.cells] == ["fits"], (c.cell_id, c.fix)


def test_the_default_host_memory_is_the_catalogs_node_and_is_shown(capsys):
    from bench.matrix.gpus import gpu

    node = gpu("A100-80G").host_node
    advice = Advice.model_validate_json(_stdout(capsys, FULL_70B_OFFLOAD))
    assert advice.host_memory_bytes == pytest.approx(node.memory_gb / node.gpus * 2 * 1e9)
    assert advice.host_memory_origin.startswith(f"catalog default: {node.system}, {node.memory_gb:,.0f} GB for 8 GPUs")
    md = _stdout(capsys, ["advise", "--model", "llama-3.1-70b", "--gpu", "H100-SXM:8", "--filter", "*-fsdp_offload"])
    assert (
        "host memory 2,048 GB per node (catalog default: NVIDIA DGX H100, 2,048 GB for 8 GPUs; --host-ram to change)"
        in md
    )


def test_a_gpu_without_a_host_figure_answers_with_its_offload_cells_host_unchecked(capsys):
    argv = ["advise", "--model", "qwen2.5-7b", "--gpu", "L4:2", "--filter", "two_models-none-fsdp_offload"]
    advice = Advice.model_validate_json(_stdout(capsys, [*argv, "--format", "json"]))
    assert advice.host_memory_bytes is None
    cell = advice.cells[0]
    assert cell.host_unchecked and cell.verdict != "host_oom" and cell.host_need_bytes > 0
    md = _stdout(capsys, argv)
    assert f"{cell.host_need_bytes / 1e9:,.1f} GB per node, host unchecked" in md
    assert "host unchecked" in _stdout(capsys, [*argv, "--format", "csv"])
    assert main([*argv, "--host-ram", "384", "--format", "json"]) == 0
    checked = Advice.model_validate_json(capsys.readouterr().out)
    assert checked.host_memory_bytes == 384e9 and not checked.cells[0].host_unchecked


def test_host_need_is_per_rank_times_the_ranks_on_a_node_and_the_device_comes_first():
    from bench.advise.host import HostMemory, host_need, verdict
    from bench.estimate.predict import Prediction
    from bench.matrix.profiles import gpu_profile

    profile = gpu_profile("A100-80G:8", 2, "mistral-7b")  # 16 ranks over 2 nodes: 8 on each
    host = HostMemory(1000e9, "--host-ram")

    def cell(world: int, host_bytes: float, device: str) -> Prediction:
        return Prediction(cell_id="x", init="one_adapter", quant="none", backend="zero3_offload", hardware="h",
                          workload="w", status="predicted", world_size=world, host_bytes=host_bytes,
                          verdict=device)  # fmt: skip

    assert host_need(cell(16, 100e9, "fits"), profile) == 800e9  # 8 ranks on the node, not 16
    assert host_need(cell(1, 100e9, "fits"), profile) == 100e9  # +1rank
    assert verdict(cell(16, 100e9, "fits"), profile, host) == "fits"
    assert verdict(cell(16, 150e9, "fits"), profile, host) == "host_oom"
    assert verdict(cell(16, 150e9, "likely_oom"), profile, host) == "host_oom"
    assert verdict(cell(16, 150e9, "oom"), profile, host) == "oom"
    assert verdict(cell(16, 150e9, "fits"), profile, None) == "fits"  # nothing to hold it against


def test_a_fix_proposes_only_cells_the_matrix_has_and_a_full_fine_tune_an_adapter():
    from bench.advise.fixes import adapter, in_matrix
    from bench.matrix.cell import Cell
    from bench.matrix.profiles import load_workload

    def cell(method: str, init: str, backend: str, **extra) -> Cell:
        launcher = "deepspeed" if backend.startswith("zero") else "python" if backend == "single" else "torchrun"
        return Cell(method=method, init=init, quant="none", backend=backend, launcher=launcher, **extra)

    assert in_matrix(cell("sft", "full", "zero3_offload"))
    assert in_matrix(cell("grpo", "one_adapter", "zero3_offload"))  # GRPO runs on the offload backends too
    assert not in_matrix(cell("grpo", "full", "single"))  # GRPO holds a reference: no `full` row
    assert in_matrix(cell("kto", "one_adapter", "zero3", options=("precompute_ref",)))  # the option a fix adds
    (change,) = adapter(cell("sft", "full", "single"), load_workload("tiny"))
    assert change.cell.init == "one_adapter" and "instead of every weight" in change.what


def test_an_unlisted_card_answers_with_its_memory_as_a_custom_card(capsys):
    argv = ["advise", "--model", "qwen2.5-7b", "--gpu", "MyCard:2", "--gpu-memory", "48"]
    advice = Advice.model_validate_json(_stdout(capsys, [*argv, "--format", "json"]))
    assert advice.gpu is None and advice.hardware == "custom-MyCardx2" and advice.memory_per_device_bytes == 48e9
    assert all(c.tokens_per_s is None for c in advice.cells)
    assert "custom card (not in scenarios/gpus.yaml)" in _stdout(capsys, argv)
    assert main(["advise", "--model", "qwen2.5-7b", "--gpu", "MyCard:2"]) == 2
    assert capsys.readouterr().err.strip().endswith("or give an unlisted card's memory: --gpu-memory GB")
    assert main(["advise", "--model", "qwen2.5-7b", "--gpu", "A10:2", "--gpu-memory", "48"]) == 2
    assert "A10 is in the GPU catalog (24 GB)" in capsys.readouterr().err


def test_a_card_the_suite_cannot_run_on_is_answered_and_labelled(capsys):
    md = _stdout(capsys, ["advise", "--model", "qwen2.5-7b", "--gpu", "MI300X:8", "--top", "1"])
    assert "MI300X: this suite cannot run on it" in md


def test_a_cpu_profile_without_memory_says_why_nothing_is_chosen(capsys):
    md = _stdout(capsys, ["advise", "--hw", "cpu", "--top", "1"])
    assert "No verdict: `cpu` states no memory per device" in md and "bigger GPUs" not in md


def test_run_refuses_a_card_the_suite_cannot_run_on_in_one_line():
    from bench.cli.advise import _parser
    from bench.cli.target_flags import runnable_target

    args = _parser().parse_args(["run", "--gpu", "MI300X:8", "--model", "qwen2.5-7b"])
    with pytest.raises(BenchError, match=r"^--gpu MI300X:8: this suite cannot run on MI300X \(scenarios/gpus.yaml"):
        runnable_target(args)
