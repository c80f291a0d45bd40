"""The online methods' generation flags: read into the workload's generation settings, a bad value one line naming
the flag and what it allows, and refused where no asked method generates; advise's header shows them."""

import pytest

from bench.advise.target import TargetRequest, resolve_target
from bench.cli import main
from bench.cli.advise import _parser
from bench.cli.target_flags import target_request


def _request(*flags: str) -> TargetRequest:
    return target_request(_parser().parse_args(["advise", "--gpu", "H100:1", "--method", "grpo", *flags]))


def test_the_flags_become_the_workloads_generation_settings():
    flags = ("--num-generations", "16", "--completion-length", "512", "--prompt-length", "256", "--vllm", "server")
    request = _request(*flags, "--vllm-gpu-memory-utilization", "0.7")
    _, workload = resolve_target(request)
    gen = workload.generation
    assert (gen.num_generations, gen.max_completion_length, gen.prompt_length) == (16, 512, 256)
    assert (gen.vllm, gen.vllm_gpu_memory_utilization) == ("server", 0.7)
    assert request.flags()[-10:] == [*flags, "--vllm-gpu-memory-utilization", "0.7"]
    _, untouched = resolve_target(_request())
    assert untouched.generation.vllm is None and untouched.generation.num_generations == 8


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (("--num-generations", "0"), "--num-generations must be >= 2, got '0'"),
        (("--num-generations", "many"), "argument --num-generations: not a whole number: 'many'"),
        (("--completion-length", "-5"), "--completion-length must be >= 1, got '-5'"),
        (("--prompt-length", "0"), "--prompt-length must be >= 1, got '0'"),
        (("--vllm", "foo"), "--vllm 'foo': choose from none, colocate, server"),
        (
            ("--vllm-gpu-memory-utilization", "1.5"),
            "--vllm-gpu-memory-utilization '1.5': must be a share of the card in (0, 1]",
        ),
        (("--vllm-gpu-memory-utilization", "0"), "in (0, 1]"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_flag_and_what_it_allows(capsys, flags, said):
    with pytest.raises(SystemExit):
        _parser().parse_args(["advise", "--gpu", "H100:1", *flags])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert said in error


def test_generation_flags_with_no_online_method_are_one_line(capsys):
    assert main(["advise", "--gpu", "H100:1", "--method", "dpo,sft", "--num-generations", "4"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --num-generations applies to the online methods (grpo, rloo); --method dpo,sft generates nothing: "
        "add --method grpo (or rloo, all)"
    )
    assert main(["predict", "--gpu", "H100:1", "--vllm", "colocate"]) == 2
    assert "error: --vllm applies to the online methods" in capsys.readouterr().err


def test_the_advise_header_shows_the_generation_settings(capsys):
    flags = ["advise", "--model", "qwen2.5-7b", "--gpu", "H100:8", "--method", "grpo"]
    assert main([*flags, "--vllm", "colocate", "--num-generations", "4", "--completion-length", "256"]) == 0
    shown = capsys.readouterr().out
    assert (
        "generation (grpo, rloo): G 4 completions per prompt, prompt P 2048 tokens, completion C 256 tokens; "
        "vLLM colocate at 0.3 of each vLLM card (--vllm-gpu-memory-utilization)." in shown
    )
    assert main([*flags, "--vllm", "server", "--vllm-gpu-memory-utilization", "0.8"]) == 0
    assert "vLLM server at 0.8 of each vLLM card" in capsys.readouterr().out
    assert main([*flags[:-1], "dpo"]) == 0
    assert "generation (grpo, rloo)" not in capsys.readouterr().out


@pytest.mark.parametrize("mode", ["server", "none"])
def test_run_refuses_a_vllm_mode_its_worker_does_not_run(mode, capsys):
    assert main(["run", "--hw", "cpu", "--method", "grpo", "--vllm", mode, "--filter", "x"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --vllm {mode}: run generates with vLLM colocated") and "\n" not in err


def test_the_worker_gives_trl_the_asked_vllm_share():
    from bench.assets.prepare import PreparedAssets
    from bench.matrix.axes import Backend, Init, Method, Option, Quant
    from bench.matrix.backends import backend_spec
    from bench.matrix.cell import Cell
    from bench.matrix.plan import plan_for
    from bench.matrix.profiles import load_profile, load_workload
    from bench.worker.spec import WorkerSpec
    from bench.worker.trainers.online import online_arguments

    launcher = backend_spec(Backend.SINGLE).default_launcher
    cell = Cell(
        method=Method.GRPO,
        init=Init.ONE_ADAPTER,
        quant=Quant.NONE,
        backend=Backend.SINGLE,
        launcher=launcher,
        options=(Option.VLLM,),
    )
    workload = load_workload("tiny")
    shared = workload.model_copy(
        update={"generation": workload.generation.model_copy(update={"vllm_gpu_memory_utilization": 0.55})}
    )
    assets = PreparedAssets(model="m", tokenizer="t", dataset="d")
    for given, expected in ((workload, None), (shared, 0.55)):
        args = online_arguments(WorkerSpec.from_plan(plan_for(cell, load_profile("cpu"), given), assets, "/tmp/c"))
        assert args["vllm_mode"] == "colocate" and args.get("vllm_gpu_memory_utilization") == expected
