"""The online methods' generation flags (GRPO, RLOO): completions per prompt, their length, the prompt's, and who
generates (vLLM colocated, a vLLM server, or transformers' generate), read into the workload's `generation`
settings. A bad value is one line naming the flag and what it allows; a flag of these given where no asked method
generates is one line too (they would change nothing)."""

import argparse

from bench.cli.arg_types import whole_number

VLLM_MODES = ("none", "colocate", "server")
"""`--vllm`: transformers' generate, or TRL's `vllm_mode` (trl/trainer/grpo_config.py, vllm_mode)."""

GENERATION_FLAGS = {
    "num_generations": "--num-generations",
    "completion_length": "--completion-length",
    "prompt_length": "--prompt-length",
    "vllm": "--vllm",
    "vllm_gpu_memory_utilization": "--vllm-gpu-memory-utilization",
}
"""The TargetRequest field of each flag."""


def utilization(text: str) -> float:
    """`--vllm-gpu-memory-utilization`: a share of the card in (0, 1], as vLLM's gpu_memory_utilization."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(
            f"--vllm-gpu-memory-utilization {text!r}: must be a share of the card in (0, 1], e.g. 0.3"
        )
    return value


def vllm_mode(text: str) -> str:
    if text not in VLLM_MODES:
        raise argparse.ArgumentTypeError(f"--vllm {text!r}: choose from {', '.join(VLLM_MODES)}")
    return text


def add_generation_arguments(parser: argparse.ArgumentParser) -> None:
    """The generation flags, in their own group; each None when not given (the workload's setting stands)."""
    group = parser.add_argument_group("online RL generation (grpo, rloo; default: the workload's)")
    group.add_argument(
        "--num-generations",
        type=whole_number("--num-generations", "a whole number", 2),
        default=None,
        metavar="G",
        help="completions sampled per prompt (TRL's num_generations, at least 2: the group is the baseline)",
    )
    group.add_argument(
        "--completion-length",
        type=whole_number("--completion-length", "a whole number", 1),
        default=None,
        metavar="C",
        help="a completion's most tokens (TRL's max_completion_length)",
    )
    group.add_argument(
        "--prompt-length",
        type=whole_number("--prompt-length", "a whole number", 1),
        default=None,
        metavar="P",
        help="a prompt's most tokens (default: the workload's, else --max-length)",
    )
    group.add_argument(
        "--vllm",
        type=vllm_mode,
        default=None,
        metavar="|".join(VLLM_MODES),
        help="who generates for every online cell: transformers' generate (none), vLLM on the training GPUs "
        "(colocate) or vLLM on GPUs of its own (server, `trl vllm-serve`) (default: the cell's `+vllm` option)",
    )
    group.add_argument(
        "--vllm-gpu-memory-utilization",
        type=utilization,
        default=None,
        metavar="SHARE",
        help="the share of each vLLM card vLLM reserves, in (0, 1] (default: TRL's, 0.3 colocated, 0.9 served)",
    )


def check_online(args: argparse.Namespace) -> None:
    """One line where generation flags are given and none of the methods `--method` asks for generates: they
    would change nothing."""
    from bench.errors import BenchError
    from bench.matrix.methods import method_spec
    from bench.matrix.scenario import parse_methods

    methods = [m.value for m in parse_methods(args.method)]
    given = [flag for name, flag in GENERATION_FLAGS.items() if getattr(args, name, None) is not None]
    if given and not any(method_spec(m).generates for m in methods):
        raise BenchError(
            f"{given[0]} applies to the online methods (grpo, rloo); --method {','.join(methods)} generates "
            "nothing: add --method grpo (or rloo, all)"
        )
