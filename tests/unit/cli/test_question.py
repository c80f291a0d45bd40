"""The command line and the decision page ask `advise` the same typed question: the flags read into a `Question`
equal the one the page builds without argv, and a `TargetRequest` gives back the flags it was read from."""

from bench.advise.target import TargetRequest
from bench.cli import parser
from bench.cli.advise import question_of
from bench.report.decide_grid import ModelChoice, advise_question

FLAGS = [
    "--gpu",
    "A10:2",
    "--model",
    "qwen2.5-7b",
    "--max-length",
    "1024",
    "--lora-targets",
    "all-linear",
    "--nodes",
    "2",
    "--gradient-checkpointing",
    "off",
    "--precision",
    "fp16",
]


def asked(*argv: str):
    return question_of(parser().parse_args(["advise", *argv]))


def test_a_target_request_gives_back_the_flags_it_was_read_from():
    assert asked(*FLAGS).target.flags() == FLAGS


def test_the_decision_page_asks_what_the_command_line_asks():
    for model in (ModelChoice("qwen2.5-7b", "--model"), ModelChoice("small", "--workload")):
        page = advise_question(model, "A10", 2, 2048, 1)
        argv = ["--gpu", "A10:2", model.flag, model.name, "--max-length", "2048", "--batch-size", "1"]
        command_line = asked(*argv)
        assert page.target == TargetRequest(**{**vars(command_line.target), "scenarios": None})
        assert (page.method, page.filter, page.prefer, page.host_ram) == ("dpo", None, "fastest", None)
        assert page.target.flags() == argv


def test_without_settings_keeps_the_hardware_and_the_model():
    request = asked(*FLAGS).target.without_settings()
    assert request.flags() == ["--gpu", "A10:2", "--model", "qwen2.5-7b", "--nodes", "2"]
