"""advise asked the questions people bring, across methods, cards and model sizes: each answers, its picks are made
within a method and are cells the JSON gives as fitting, and no pick's PREDICTED speed implies more MFU than the best
published for its kind (bench/estimate/speed/bounds.py)."""

import json
from pathlib import Path

import pytest

from bench.advise.advice import Advice, advise
from bench.advise.host import host_memory, verdict
from bench.advise.question import predicted
from bench.advise.render import to_json
from bench.cli import main
from bench.cli.advise import _parser, question_of
from bench.estimate.speed.bounds import implied_mfu, mfu_bound
from bench.estimate.speed.cell_speeds import speeds_of_plans
from bench.matrix.plan import plan_for
from bench.matrix.scenario import expand, load_matrix

CONFIGS = {
    # Qwen/Qwen2.5-0.5B and meta-llama/Llama-3.1-405B config.json (the architecture numbers): sizes not shipped
    "qwen2.5-0.5b": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896,
                     "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
                     "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 32768,
                     "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": True,
                     "torch_dtype": "bfloat16", "hidden_act": "silu"},
    "llama-3.1-405b": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 16384,
                       "intermediate_size": 53248, "num_hidden_layers": 126, "num_attention_heads": 128,
                       "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
                       "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": False,
                       "torch_dtype": "bfloat16", "hidden_act": "silu", "attention_bias": False, "mlp_bias": False},
}  # fmt: skip

QUESTIONS = [
    ("dpo", "qwen2.5-0.5b", "A10:1"),
    ("sft", "qwen2.5-0.5b", "L4:1"),
    ("grpo", "qwen2.5-0.5b", "RTX-4090:1"),
    ("all", "qwen2.5-0.5b", "T4:2"),
    ("dpo", "phi-3-mini-4k", "RTX-4090:2"),
    ("kto", "phi-3-mini-4k", "L4:4"),
    ("orpo", "qwen2.5-7b", "A10:2"),
    ("reward", "qwen2.5-7b", "L40S:2"),
    ("dpo", "llama-3.1-8b", "RTX-4090:1"),
    ("rloo", "llama-3.1-8b", "A100-80G:1"),
    ("grpo", "llama-3.1-8b", "H100:8"),
    ("sft", "llama-3.1-8b", "H200:1"),
    ("orpo", "mistral-7b-v0.3", "RTX-3090:2"),
    ("simpo", "gemma-2-9b", "A100-40G:4"),
    ("dpo", "llama-3.1-70b", "H100:8"),
    ("sft", "llama-3.1-70b", "A100-80G:8"),
    ("kto", "llama-3.1-70b", "H200:4"),
    ("grpo", "qwen2.5-72b", "H200:8"),
    ("dpo", "qwen2.5-72b", "B200:8"),
    ("dpo", "llama-3.1-405b", "H100:8"),
    ("sft", "llama-3.1-405b", "H200:8"),
    ("all", "llama-3.1-405b", "H100:8"),
]
"""(method, model, --gpu): 0.5B to 405B, GRPO and RLOO included, the cards people own and rent."""

NO_HOST_FIGURE = ("L4", "RTX-4090", "RTX-3090")
HOST_RAM = "256"
"""The cards the GPU catalog has no host-memory figure for: the command line asks for --host-ram there, so the
questions give it."""


@pytest.fixture(scope="module")
def matrix():
    return expand(load_matrix())


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("models")
    for name, config in CONFIGS.items():
        (folder / name).mkdir()
        (folder / name / "config.json").write_text(json.dumps(config))
    return {name: str(folder / name) for name in CONFIGS}


def _flags(method: str, model: str, gpu: str, models: dict[str, str]) -> list[str]:
    host = ["--host-ram", HOST_RAM] if gpu.split(":")[0] in NO_HOST_FIGURE else []
    return ["advise", "--model", models.get(model, model), "--gpu", gpu, "--method", method, *host]


def _id(question) -> str:
    return question.id if hasattr(question, "id") else "-".join(question)


GENERATION_QUESTIONS = [
    ("grpo", "qwen2.5-7b", "H100:8", ("--vllm", "colocate")),
    ("grpo", "qwen2.5-7b", "L40S:1", ("--vllm", "colocate", "--vllm-gpu-memory-utilization", "0.5")),
    (
        "rloo",
        "llama-3.1-8b",
        "A100-80G:8",
        ("--vllm", "server", "--num-generations", "16", "--completion-length", "512"),
    ),
    ("grpo", "qwen2.5-0.5b", "H100:8", ("--num-generations", "4", "--prompt-length", "512", "--vllm", "none")),
]
"""GRPO and RLOO as people run them: vLLM colocated or served, their own G, P and C."""


@pytest.mark.parametrize(("method", "model", "gpu"), QUESTIONS, ids=[_id(q) for q in QUESTIONS])
def test_each_question_answers_with_picks_an_expert_would_sign(matrix, models, method, model, gpu):
    _answers_with_signed_picks(matrix, _flags(method, model, gpu, models))


@pytest.mark.parametrize(
    ("method", "model", "gpu", "extra"),
    GENERATION_QUESTIONS,
    ids=[" ".join(q[:3] + q[3]) for q in GENERATION_QUESTIONS],
)
def test_each_online_question_answers_under_its_generation_settings(matrix, models, method, model, gpu, extra):
    advice = _answers_with_signed_picks(matrix, [*_flags(method, model, gpu, models), *extra])
    given = dict(zip(extra[::2], extra[1::2], strict=True))
    assert advice.generation is not None
    assert advice.generation.vllm == given.get("--vllm")
    assert str(advice.generation.num_generations) == given.get("--num-generations", "8")


def _answers_with_signed_picks(matrix, flags: list[str]) -> Advice:
    question = question_of(_parser().parse_args(flags))
    profile, workload, by_id, predictions = predicted(question, matrix)
    host = host_memory(profile, question.host_ram)
    advice = Advice.model_validate_json(to_json(advise(profile, workload, predictions, by_id, question.prefer, host)))
    assert advice.cells, "no applicable setup at all"
    rows = {c.cell_id: c for c in advice.cells}
    shown = {p.cell_id: verdict(p, profile, host) for p in predictions if p.status == "predicted"}
    kinds = [(p.method, p.kind) for p in advice.picks]
    assert len(kinds) == len(set(kinds)), "one pick of each kind per method"
    for method_ in {c.method for c in advice.cells if c.verdict == "fits"}:
        assert {"fewest-gpus", "faithful"} <= {k for m, k in kinds if m == method_}
    for pick in advice.picks:
        row = rows[pick.cell_id]
        assert row.method == pick.method and row.verdict == "fits"
        assert all(shown[i] == "fits" for i in (row.cell_id, *row.alternatives))
        assert (pick.kind == "fastest") <= (row.tokens_per_s is not None), "a fastest pick without a speed"
        if row.tokens_per_s is None:
            continue
        plan = plan_for(by_id[pick.cell_id], profile, workload)
        speed = speeds_of_plans([plan])[pick.cell_id]
        assert speed.tokens_per_s == pytest.approx(row.tokens_per_s)
        assert row.mfu == pytest.approx(implied_mfu(speed, plan)), "the MFU shown beside the tokens/s"
        bound = mfu_bound(plan)
        if bound is not None:
            assert implied_mfu(speed, plan) <= bound[0] * (1 + 1e-9), f"{pick.cell_id}: over {bound[1].id}"
    return advice


@pytest.mark.parametrize(("method", "model", "gpu"), [QUESTIONS[1], QUESTIONS[6]])
def test_the_command_lines_json_gives_the_same_picks_and_verdicts(matrix, models, capsys, method, model, gpu):
    flags = _flags(method, model, gpu, models)
    question = question_of(_parser().parse_args(flags))
    profile, workload, by_id, predictions = predicted(question, matrix)
    host = host_memory(profile, question.host_ram)
    asked = advise(profile, workload, predictions, by_id, question.prefer, host)
    assert main([*flags, "--format", "json"]) == 0
    cli = Advice.model_validate_json(capsys.readouterr().out)
    assert cli.picks == asked.picks
    assert [(c.cell_id, c.verdict, c.alternatives) for c in cli.cells] == [
        (c.cell_id, c.verdict, c.alternatives) for c in asked.cells
    ]


def test_faithful_orders_full_fine_tuning_then_adapters_on_bf16_8bit_4bit():
    from bench.advise.picks import faithfulness

    order = sorted(
        [("one_adapter", "nf4"), ("two_models", "none"), ("one_adapter", "int8"), ("one_adapter", "none")],
        key=lambda c: faithfulness(*c),
    )
    assert order == [("two_models", "none"), ("one_adapter", "none"), ("one_adapter", "int8"), ("one_adapter", "nf4")]


def test_launcher_variants_that_predict_alike_are_one_row_in_every_format(matrix, capsys):
    flags = ["advise", "--model", "llama-3.1-8b", "--gpu", "H100:8", "--method", "sft"]
    assert main([*flags, "--format", "json"]) == 0
    advice = Advice.model_validate_json(capsys.readouterr().out)
    folded = [c for c in advice.cells if c.alternatives]
    assert folded and all("+" in a for c in folded for a in c.alternatives)
    ids = [i for c in advice.cells for i in (c.cell_id, *c.alternatives)]
    assert len(ids) == len(set(ids))
    assert main([*flags, "--format", "csv"]) == 0
    csv_text = capsys.readouterr().out
    assert csv_text.count("\nPREDICTED,") == len(advice.cells) and " ".join(folded[0].alternatives) in csv_text
    assert main([*flags, "--top", "0"]) == 0
    assert f"(same: {', '.join(folded[0].alternatives)})" in capsys.readouterr().out


def test_no_pick_is_fastest_without_a_speed(tmp_path: Path, capsys):
    custom = ["advise", "--model", "llama-3.1-8b", "--gpu", "MyCard:8", "--gpu-memory", "80", "--method", "grpo"]
    assert main([*custom, "--format", "json"]) == 0  # a custom card: its speed unknown
    advice = Advice.model_validate_json(capsys.readouterr().out)
    assert advice.picks and all(c.tokens_per_s is None for c in advice.cells if c.verdict == "fits")
    assert "fastest" not in {p.kind for p in advice.picks}
    assert main(custom) == 0
    assert "no **fastest** pick for GRPO" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("rate", "shown"), [(34_101.4, 34_100), (966.33, 966), (1_925.5, 1_930), (7.26, 7), (123_456, 123_000), (0, 0)]
)
def test_a_predicted_speed_is_shown_to_three_significant_figures(rate, shown):
    from bench.advise.picks import shown_tokens

    assert shown_tokens(rate) == shown
