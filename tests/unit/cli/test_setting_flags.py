"""The settings flags of `predict` and `advise` (`--precision MODE`, `--attention`, `--liger`, `--torch-compile`):
each reaches the prediction (the workload's keys, then `Knobs`) and the exported launch files; a bad value or a card
that cannot train the mode is one line naming the flag; `run` applies them (bench/worker/), and refuses in one line
a kernel flag (Liger, FlashAttention-2) where its package cannot load."""

import shlex

import pytest
import yaml

from bench.advise.command import native_files
from bench.advise.launch_files import README_FILE, config_file, export_files
from bench.advise.target import TargetRequest, resolve_target
from bench.cli import main
from bench.errors import BenchError
from bench.estimate.knobs import knobs_of
from bench.matrix.axes import Backend, Init, Method, Quant
from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell

MODEL = "someone/some-model"


def _request(**given) -> TargetRequest:
    return TargetRequest(gpu="A10:1", workload="llama-3.2-1b", **given)


def _cell(init=Init.TWO_MODELS, backend=Backend.SINGLE) -> Cell:
    return Cell(init=init, quant=Quant.NONE, backend=backend, launcher=backend_spec(backend).default_launcher)


def _exported(request: TargetRequest, cell: Cell | None = None) -> tuple[dict, str, dict[str, str]]:
    cell = cell or _cell()
    profile, workload = resolve_target(request)
    files = export_files(cell, profile, workload, MODEL, native_files(cell, profile, missing_ok=True))
    return yaml.safe_load(files[config_file(Method.DPO)].split("\n", 5)[-1]), files[README_FILE], files


def test_each_flag_reaches_the_knobs_of_the_prediction():
    _, workload = resolve_target(_request(attention="eager", liger=True, torch_compile=True, precision="pure-bf16"))
    knobs = knobs_of(workload)
    assert (knobs.attention, knobs.liger, knobs.torch_compile, knobs.master_weights) == ("eager", True, True, False)
    _, default = resolve_target(_request())
    plain = knobs_of(default)
    assert (plain.attention, plain.liger, plain.torch_compile, plain.master_weights) == (None, None, False, True)


def test_default_settings_leave_the_workload_as_it_was():
    """A workload no flag changed dumps (and hashes: its assets' folder) as before the settings existed."""
    _, workload = resolve_target(_request())
    assert not {"attn_implementation", "use_liger_kernel", "torch_compile", "master_weights"} & set(
        workload.train.model_dump()
    )


MODES = [("bf16", "bf16", None), ("mixed", "bf16", None), ("pure-bf16", "bf16", False), ("fp16", "fp16", None),
         ("fp16-mixed", "fp16", None), ("fp32", "fp32", None)]  # fmt: skip


@pytest.mark.parametrize(("given", "precision", "master"), MODES)
def test_precision_modes_and_their_aliases(given, precision, master):
    profile, workload = resolve_target(_request(precision=given))
    assert (profile.precision, workload.train.master_weights) == (precision, master)


def test_the_exported_files_say_what_was_predicted():
    config, readme, _ = _exported(_request(attention="eager", liger=True, torch_compile=True, precision="pure-bf16"))
    assert config["attn_implementation"] == "eager" and config["use_liger_kernel"] is True
    assert config["torch_compile"] is True
    assert config["dtype"] == "bfloat16" and config["bf16"] is False and config["fp16"] is False  # no autocast
    assert "Settings as predicted: precision pure-bf16" in readme and "attention eager, Liger on" in readme


def test_default_exported_files_name_none_of_the_settings():
    config, readme, _ = _exported(_request())
    assert not {"attn_implementation", "torch_compile"} & set(config) and config["bf16"] is True
    assert config["use_liger_kernel"] is False and "Settings as predicted" not in readme


def test_liger_off_overrides_a_cells_liger_option():
    cell = _cell().model_copy(update={"options": ("liger",)})
    assert _exported(_request(), cell)[0]["use_liger_kernel"] is True
    assert _exported(_request(liger=False), cell)[0]["use_liger_kernel"] is False


def test_pure_bf16_turns_accelerates_mixed_precision_off_and_refuses_deepspeed():
    fsdp = _cell(backend=Backend.FSDP)
    request = TargetRequest(gpu="A10:2", workload="llama-3.2-1b", precision="pure-bf16")
    accelerate = _exported(request, fsdp)[2].get("accelerate.yaml")
    if accelerate is not None:  # written where accelerate is installed
        assert yaml.safe_load(accelerate)["mixed_precision"] == "no"
    with pytest.raises(BenchError, match=r"^--precision pure-bf16: .*DeepSpeed.*fp32 master copy") as err:
        _exported(request, _cell(backend=Backend.ZERO2))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("card", ["T4:1", "V100-16G:1"])
@pytest.mark.parametrize("mode", ["pure-bf16", "mixed", "bf16"])
def test_a_card_without_bf16_is_refused_a_bf16_mode_in_one_line(card, mode, capsys):
    assert main(["advise", "--gpu", card, "--workload", "llama-3.2-1b", "--precision", mode]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --precision {mode}: {card.split(':')[0]} has no bf16") and "fp16-mixed" in err
    assert "\n" not in err


def test_a_card_without_bf16_trains_fp16_mixed_by_default():
    config, _, _ = _exported(TargetRequest(gpu="T4:1", workload="llama-3.2-1b"))
    assert config["dtype"] == "float32" and config["fp16"] is True and config["bf16"] is False
    profile, _ = resolve_target(TargetRequest(gpu="T4:1", workload="llama-3.2-1b", precision="fp16-mixed"))
    assert profile.precision == "fp16"


@pytest.mark.parametrize(("flag", "value"), [("--attention", "flash"), ("--liger", "yes"), ("--torch-compile", "1"),
                                             ("--precision", "bf32")])  # fmt: skip
def test_a_bad_value_names_the_flag(flag, value, capsys):
    with pytest.raises(SystemExit):
        main(["predict", "--gpu", "A10:1", flag, value])
    assert f"argument {flag}" in capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("where", "flags", "why"),
    [
        (["--hw", "cpu"], ["--liger", "on"], "liger-kernel runs CUDA kernels; profile cpu trains on cpu"),
        (["--hw", "cpu"], ["--attention", "flash_attention_2"], "flash-attn runs CUDA kernels"),
        (["--gpu", "A10:1"], ["--liger", "on"], "liger-kernel is not installed (pip install liger-kernel)"),
        (["--gpu", "A10:1"], ["--attention", "flash_attention_2"], "flash-attn is not installed"),
    ],
)
def test_run_refuses_a_kernel_flag_where_its_package_cannot_load(where, flags, why, capsys):
    assert main(["run", *where, "--workload", "llama-3.2-1b", *flags, "--filter", "x"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {' '.join(flags)}: ") and why in err and "\n" not in err


@pytest.mark.parametrize("flags", [["--attention", "eager"], ["--liger", "off"], ["--torch-compile", "on"],
                                   ["--precision", "pure-bf16"]])  # fmt: skip
def test_run_takes_the_settings_its_worker_applies(flags, capsys):
    """Past the settings, the run stops at the next check: the filter that matches no cell."""
    assert main(["run", "--hw", "cpu", *flags, "--filter", "no-such-cell"]) == 2
    assert "no-such-cell" in capsys.readouterr().err


def test_advises_run_line_with_the_settings_passes_runs_checks():
    """The `dpo-bench run` line advise prints repeats the settings; `run` takes them (no refusal)."""
    from bench.advise.command import run_command
    from bench.cli import parser
    from bench.cli.target_flags import runnable_target

    request = _request(attention="eager", torch_compile=True, precision="pure-bf16")
    argv = shlex.split(run_command(_cell(), request.flags(), []))
    assert argv[:2] == ["dpo-bench", "run"] and "--attention" in argv
    _, workload = runnable_target(parser().parse_args(argv[1:]))
    train = workload.train
    assert (train.attn_implementation, train.torch_compile, train.master_weights) == ("eager", True, False)


def test_the_flags_repeat_the_settings():
    request = _request(attention="sdpa", liger=False, torch_compile=True, precision="fp32")
    flags = request.flags()
    for pair in (["--attention", "sdpa"], ["--liger", "off"], ["--torch-compile", "on"], ["--precision", "fp32"]):
        assert flags[flags.index(pair[0]) + 1] == pair[1]


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--gpu", "T4:1"], "fp16-mixed"),
        (["--gpu", "A10:1"], "bf16"),
        (["--gpu", "A10:1", "--precision", "pure-bf16"], "pure-bf16"),
    ],
)
def test_the_advise_header_names_the_mode_it_trains_in(flags, said, capsys):
    assert main(["advise", "--workload", "llama-3.2-1b", "--method", "sft", *flags]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith(f" each, {said})")
